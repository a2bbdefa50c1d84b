//! A generated plan on the GPU: the GPU twin of `fuse_emulate::EmulatedPlan`.
//!
//! [`CudaPlan::compile`] turns a [`Generated`] module into a loaded CUDA module (from the
//! on-disk cache when it can); [`CudaPlan::run`] uploads the inputs, poisons every other buffer
//! with NaN (so an element a kernel forgets to write shows up in any comparison), runs the
//! steps — zero-fills and launches — in order on the device's one stream, and downloads the
//! outputs. Timing goes through [`CudaPlan::prepare`] and [`CudaPlan::enqueue`], which separate
//! the upload from the launches.

use std::collections::BTreeMap;

use cudarc::driver::sys::CUfunction_attribute_enum as FuncAttr;
use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use fuse_codegen::generate::{Generated, Launch, LaunchArg, Step};
use fuse_core::data::check_inputs;
use fuse_core::{Bindings, HostArray, Program, Sizes, ValueId};

use crate::cache::ModuleCache;
use crate::device::{host_bytes, Device};
use crate::error::{driver, CudaError};
use crate::module::CudaModuleSet;
use crate::timer::{Timer, Timing, TimingOptions};

/// The largest grid the hardware takes in y and z.
const MAX_GRID_YZ: u32 = 65_535;
/// The bit pattern written into buffers before a run: a NaN in f32 and (twice) in f64.
const POISON: u32 = 0xFFFF_FFFF;

/// A generated plan loaded on a GPU, reusable across runs and sizes.
#[derive(Debug)]
pub struct CudaPlan {
    device: Device,
    kernels: CudaModuleSet,
    generated: Generated,
    /// Dynamic shared memory added to every launch, bytes: 0 except when calibration simulates
    /// the occupancy of a fusion that uses more shared memory.
    extra_shared: u32,
}

/// A plan's device buffers at fixed sizes: inputs uploaded, everything else allocated.
#[derive(Debug)]
pub struct Workspace {
    sizes: Sizes,
    buffers: BTreeMap<ValueId, CudaSlice<u8>>,
}

impl Workspace {
    /// Bytes of device memory held.
    pub fn bytes(&self) -> usize {
        self.buffers.values().map(|b| b.len()).sum()
    }
}

impl CudaPlan {
    /// Compiles `generated` for `device`, through the user's module cache.
    pub fn compile(generated: Generated, device: &Device) -> Result<CudaPlan, CudaError> {
        Self::compile_with(generated, device, &ModuleCache::default_location())
    }

    /// Compiles `generated` for `device` through `cache`.
    pub fn compile_with(generated: Generated, device: &Device, cache: &ModuleCache) -> Result<CudaPlan, CudaError> {
        let names: Vec<&str> = generated
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Launch(l) => Some(l.kernel.as_str()),
                Step::Zero(_) => None,
            })
            .collect();
        let kernels = CudaModuleSet::load(&generated.source, &names, device, cache)?;
        Ok(CudaPlan {
            device: device.clone(),
            kernels,
            generated,
            extra_shared: 0,
        })
    }

    /// Whether the module came from the on-disk cache.
    pub fn from_cache(&self) -> bool {
        self.kernels.from_cache
    }

    /// Why the module cache could not be written, if it could not.
    pub fn cache_warning(&self) -> Option<&str> {
        self.kernels.cache_warning.as_deref()
    }

    /// The generated module it runs.
    pub fn generated(&self) -> &Generated {
        &self.generated
    }

    /// The device it runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Adds `bytes` of (unused) dynamic shared memory to every launch, lowering occupancy the
    /// way a fusion with that much more shared memory would (calibration's simulated
    /// environments, paper §4.2).
    pub fn set_extra_shared(&mut self, bytes: u32) -> Result<(), CudaError> {
        for function in self.kernels.functions() {
            let attr = FuncAttr::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
            function
                .set_attribute(attr, bytes as i32)
                .map_err(driver("cuFuncSetAttribute"))?;
        }
        self.extra_shared = bytes;
        Ok(())
    }

    /// Static shared memory of kernel `name`, bytes (from the driver: no compile report needed).
    pub fn static_shared(&self, name: &str) -> Result<u64, CudaError> {
        let f = self.kernels.function(name)?;
        let bytes = f
            .get_attribute(FuncAttr::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            .map_err(driver("cuFuncGetAttribute"))?;
        Ok(bytes.max(0) as u64)
    }

    /// Runs the plan once on `inputs`; returns the outputs by name. Buffers that kernels write
    /// hold NaN before the run: the checking run of tests, `fuse selftest` and `fuse tune`.
    pub fn run(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<Bindings, CudaError> {
        let mut workspace = self.prepare(program, sizes, inputs)?;
        self.enqueue(&mut workspace)?;
        self.device.synchronize()?;
        self.download(program, &workspace)
    }

    /// Allocates a buffer per global value at `sizes`: inputs uploaded, the others poisoned.
    pub fn prepare(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<Workspace, CudaError> {
        check_inputs(program, sizes, inputs)?;
        let stream = self.device.stream();
        let mut buffers = BTreeMap::new();
        for &v in &self.generated.buffers {
            let value = &program.values[v];
            let slice = match value.producer {
                None => stream
                    .clone_htod(host_bytes(inputs[&value.variable].data.view()))
                    .map_err(driver("cuMemcpyHtoD"))?,
                Some(_) => {
                    let len: usize = value.shape.extents(sizes).unwrap_or_default().iter().product();
                    poisoned(&self.device, len * program.precision.bytes() as usize)?
                }
            };
            buffers.insert(v, slice);
        }
        Ok(Workspace {
            sizes: sizes.clone(),
            buffers,
        })
    }

    /// Queues every step on the stream (no wait).
    pub fn enqueue(&self, workspace: &mut Workspace) -> Result<(), CudaError> {
        let buffers = workspace.buffers.iter_mut().map(|(v, b)| (*v, b)).collect();
        self.enqueue_on(&workspace.sizes, buffers)
    }

    /// The values that live in buffers (inputs, outputs and temporaries between kernels).
    pub fn buffers(&self) -> &[ValueId] {
        &self.generated.buffers
    }

    /// Queues every step — zero fills and launches — at `sizes` on `buffers`, one per value of
    /// [`Self::buffers`], each as long as its value at those sizes (no wait). The scratch
    /// memory of the run is allocated here and freed in stream order after it.
    pub fn enqueue_on(
        &self,
        sizes: &Sizes,
        mut buffers: BTreeMap<ValueId, &mut CudaSlice<u8>>,
    ) -> Result<(), CudaError> {
        let mut scratch = BTreeMap::new();
        for s in &self.generated.scratch {
            let bytes = s.len * s.precision.bytes() as usize;
            let slice = self.device.stream().alloc_zeros::<u8>(bytes);
            scratch.insert(s.value, slice.map_err(driver("cuMemAllocAsync"))?);
        }
        for step in &self.generated.steps {
            match step {
                Step::Zero(v) => {
                    let buffer = buffers.get_mut(v).ok_or_else(|| missing(*v))?;
                    self.device
                        .stream()
                        .memset_zeros(&mut **buffer)
                        .map_err(driver("cuMemsetD8Async"))?;
                }
                Step::Launch(launch) => self.launch(launch, sizes, &buffers, &scratch)?,
            }
        }
        Ok(())
    }

    fn launch(
        &self,
        launch: &Launch,
        sizes: &Sizes,
        buffers: &BTreeMap<ValueId, &mut CudaSlice<u8>>,
        scratch: &BTreeMap<ValueId, CudaSlice<u8>>,
    ) -> Result<(), CudaError> {
        let config = self.config(launch, sizes)?;
        let function = self.kernels.function(&launch.kernel)?;
        // Sizes live here until the launch is queued: the builder keeps pointers to them.
        let extents: Vec<i64> = launch
            .args
            .iter()
            .map(|a| match a {
                LaunchArg::Size(s) => sizes.get(s).unwrap_or(0) as i64,
                LaunchArg::Buffer(_) | LaunchArg::Scratch(_) => 0,
            })
            .collect();
        let stream = self.device.stream();
        let mut builder = stream.launch_builder(function);
        for (arg, extent) in launch.args.iter().zip(&extents) {
            match arg {
                LaunchArg::Buffer(v) => builder.arg(&**buffers.get(v).ok_or_else(|| missing(*v))?),
                LaunchArg::Scratch(v) => builder.arg(scratch.get(v).ok_or_else(|| missing(*v))?),
                LaunchArg::Size(_) => builder.arg(extent),
            };
        }
        // SAFETY: the argument list is the kernel's parameter list in order (the generator emits
        // both from one list): buffers as device pointers of the value's element type and
        // length, sizes as 64-bit integers; the buffers (and scratch) outlive the queued work because their
        // owners free them stream-ordered (cudarc frees on the stream) or after a synchronize.
        unsafe { builder.launch(config) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    }

    /// The launch configuration at `sizes`, checked against the hardware's limits.
    fn config(&self, launch: &Launch, sizes: &Sizes) -> Result<LaunchConfig, CudaError> {
        let grid = launch.grid.dims(sizes);
        let threads = launch.block.0 * launch.block.1 * launch.block.2;
        let limit = |why: String| CudaError::Launch {
            kernel: launch.kernel.clone(),
            why,
        };
        launch.grid.check(sizes).map_err(limit)?;
        if grid.1 > MAX_GRID_YZ || grid.2 > MAX_GRID_YZ || grid.0 > i32::MAX as u32 {
            return Err(limit(format!(
                "grid {grid:?} exceeds the hardware's (2³¹−1, 65535, 65535); choose a plan with more serial iterations"
            )));
        }
        if threads > self.device.info().max_threads_per_block {
            return Err(limit(format!("{threads} threads per block")));
        }
        Ok(LaunchConfig {
            grid_dim: grid,
            block_dim: launch.block,
            shared_mem_bytes: self.extra_shared,
        })
    }

    /// Copies the outputs back (waits for the queued work).
    pub fn download(&self, program: &Program, workspace: &Workspace) -> Result<Bindings, CudaError> {
        let mut out = Bindings::new();
        for &v in &program.outputs {
            let buffer = workspace.buffers.get(&v).ok_or_else(|| missing(v))?;
            let dims = program.values[v].shape.extents(&workspace.sizes).unwrap_or_default();
            let data = self.device.download(buffer, program.precision)?;
            out.insert(program.values[v].variable.clone(), HostArray { dims, data });
        }
        Ok(out)
    }

    /// Times the plan's steps on `workspace` with CUDA events (see [`Timer`]).
    pub fn time(&self, workspace: &mut Workspace, options: &TimingOptions) -> Result<Timing, CudaError> {
        let timer = Timer::new(&self.device, options.flush_l2)?;
        timer.time(options, &mut || self.enqueue(workspace))
    }
}

fn missing(v: ValueId) -> CudaError {
    CudaError::Unsupported(format!("value {v} has no device buffer (a fuse bug, please report)"))
}

/// A device buffer of `bytes` filled with NaN.
pub(crate) fn poisoned(device: &Device, bytes: usize) -> Result<CudaSlice<u8>, CudaError> {
    let stream = device.stream();
    // SAFETY: filled right below, before any use.
    let slice = unsafe { stream.alloc::<u8>(bytes.max(4)) }.map_err(driver("cuMemAlloc"))?;
    let pointer = slice.device_ptr(stream).0;
    // SAFETY: the allocation holds `bytes.max(4)` bytes, a multiple of 4 for f32/f64 buffers.
    unsafe { cudarc::driver::sys::cuMemsetD32Async(pointer, POISON, bytes.max(4) / 4, stream.cu_stream()) }
        .result()
        .map_err(driver("cuMemsetD32Async"))?;
    Ok(slice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poison_is_nan_in_both_precisions() {
        assert!(f32::from_bits(POISON).is_nan());
        assert!(f64::from_bits(((POISON as u64) << 32) | POISON as u64).is_nan());
    }
}
