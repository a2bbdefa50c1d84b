//! A compiled CUDA module loaded on a device, with its kernels by name: what generated plans
//! and the runtime's own kernels both run from.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;

use crate::cache::ModuleCache;
use crate::device::Device;
use crate::error::{driver, CudaError};

/// A loaded CUDA module, the module's kernels, and the steps that run it.
#[derive(Debug)]
pub struct CudaModuleSet {
    module: Arc<CudaModule>,
    functions: BTreeMap<String, CudaFunction>,
    /// Whether the cubin came from the on-disk cache (nothing was compiled).
    pub from_cache: bool,
    /// Why the cache could not be written, if it could not.
    pub cache_warning: Option<String>,
}

impl CudaModuleSet {
    /// Compiles (or finds in `cache`) `source` for `device` and loads the named kernels.
    pub fn load(source: &str, kernels: &[&str], device: &Device, cache: &ModuleCache) -> Result<Self, CudaError> {
        let compiled = cache.get_or_compile(source, device.arch()?)?;
        let module = device
            .context()
            .load_module(Ptx::from_binary(compiled.cubin))
            .map_err(driver("cuModuleLoadData"))?;
        let mut functions = BTreeMap::new();
        for &name in kernels {
            let function = module.load_function(name).map_err(driver("cuModuleGetFunction"))?;
            functions.insert(name.to_string(), function);
        }
        Ok(CudaModuleSet {
            module,
            functions,
            from_cache: compiled.from_cache,
            cache_warning: compiled.warning,
        })
    }

    /// The kernel `name`, loaded by [`CudaModuleSet::load`].
    pub fn function(&self, name: &str) -> Result<&CudaFunction, CudaError> {
        self.functions
            .get(name)
            .ok_or_else(|| CudaError::Unsupported(format!("kernel `{name}` is not in the module")))
    }

    /// Every loaded kernel.
    pub(crate) fn functions(&self) -> impl Iterator<Item = &CudaFunction> {
        self.functions.values()
    }

    /// Keeps the module alive as long as the set (functions hold it too; this is explicit).
    pub fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }
}
