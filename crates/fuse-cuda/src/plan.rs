//! A generated plan on the GPU: the GPU twin of `fuse_emulate::EmulatedPlan`.
//!
//! [`CudaPlan::compile`] turns a [`Generated`] module into a loaded CUDA module (from the
//! on-disk cache when it can); [`CudaPlan::run`] uploads the inputs, poisons every other buffer
//! with NaN (so an element a kernel forgets to write shows up in any comparison), runs the
//! steps — zero-fills and launches — in order on the device's one stream, and downloads the
//! outputs. Timing goes through [`CudaPlan::prepare`] and [`CudaPlan::enqueue`], which separate
//! the upload from the launches. The same steps can be captured as one CUDA graph
//! ([`CudaPlan::capture`], see [`crate::graph`]) and replayed on the same buffers;
//! [`CudaPlan::run_replaying`] runs them whichever way has been timed faster on those buffers.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum as FuncAttr;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use fuse_codegen::generate::{Generated, Launch, LaunchArg, Step};
use fuse_core::data::check_inputs;
use fuse_core::{Bindings, HostArray, Program, Sizes, ValueId};

use crate::cache::ModuleCache;
use crate::device::{host_bytes, Device};
use crate::error::{driver, CudaError};
use crate::graph::{PlanGraph, Replays, Ways};
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

    /// Every buffer, by the value it holds (what [`CudaPlan::enqueue_on`] takes).
    pub fn buffers_mut(&mut self) -> BTreeMap<ValueId, &mut CudaSlice<u8>> {
        by_value(&mut self.buffers)
    }
}

fn by_value(buffers: &mut BTreeMap<ValueId, CudaSlice<u8>>) -> BTreeMap<ValueId, &mut CudaSlice<u8>> {
    buffers.iter_mut().map(|(v, b)| (*v, b)).collect()
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

    /// Runs the plan as a graph is run: captured on a workspace of `earlier` inputs and
    /// replayed, then replayed again after `inputs` are uploaded into the same buffers. The
    /// outputs of the second replay: a graph that keeps anything of the first run (a sum not
    /// zeroed again) gives wrong ones.
    pub fn run_replayed(
        &self,
        program: &Program,
        sizes: &Sizes,
        earlier: &Bindings,
        inputs: &Bindings,
    ) -> Result<Bindings, CudaError> {
        let mut workspace = self.prepare(program, sizes, earlier)?;
        let graph = self.capture_workspace(&mut workspace)?;
        graph.replay()?;
        self.refill(program, &mut workspace, inputs)?;
        graph.replay()?;
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

    /// Uploads `inputs` (at the workspace's sizes) over its inputs' buffers; every other buffer
    /// keeps its address and contents, so a graph captured on the workspace replays on them.
    pub fn refill(&self, program: &Program, workspace: &mut Workspace, inputs: &Bindings) -> Result<(), CudaError> {
        check_inputs(program, &workspace.sizes, inputs)?;
        for (v, buffer) in &mut workspace.buffers {
            let value = &program.values[*v];
            if value.producer.is_none() {
                self.device.upload(inputs[&value.variable].data.view(), buffer)?;
            }
        }
        Ok(())
    }

    /// Queues every step on the stream (no wait).
    pub fn enqueue(&self, workspace: &mut Workspace) -> Result<(), CudaError> {
        self.enqueue_on(&workspace.sizes, by_value(&mut workspace.buffers))
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
        self.queue(self.device.stream(), sizes, &mut buffers)
    }

    /// Runs every step once at `sizes` on `buffers` and waits: one by one, or replayed as a
    /// graph where `replays` has timed that faster on these buffers. The time on the device
    /// (µs, between CUDA events).
    pub fn run_replaying(
        &self,
        replays: &mut Replays<PlanGraph>,
        sizes: &Sizes,
        buffers: BTreeMap<ValueId, &mut CudaSlice<u8>>,
    ) -> Result<f64, CudaError> {
        let stream = self.device.stream();
        let sized = sizes.iter().map(|(_, extent)| extent as u64);
        let key = sized.chain(buffers.values().map(|b| b.device_ptr(stream).0)).collect();
        let mut ways = OnBuffers {
            plan: self,
            timer: Timer::new(&self.device, false)?,
            sizes,
            buffers,
        };
        replays.run(key, &mut ways)
    }

    /// Captures every step at `sizes` on `buffers` (as [`Self::enqueue_on`] would queue them)
    /// as one CUDA graph; nothing runs until it is replayed. The graph keeps the buffers'
    /// addresses: it may only be replayed while they hold the same values.
    pub fn capture(
        &self,
        sizes: &Sizes,
        buffers: &mut BTreeMap<ValueId, &mut CudaSlice<u8>>,
    ) -> Result<PlanGraph, CudaError> {
        PlanGraph::capture(&self.device, |stream| self.queue(stream, sizes, buffers))
    }

    /// Captures the steps on `workspace` (see [`Self::capture`]).
    pub fn capture_workspace(&self, workspace: &mut Workspace) -> Result<PlanGraph, CudaError> {
        self.capture(&workspace.sizes, &mut by_value(&mut workspace.buffers))
    }

    /// Queues every step on `stream`: the device's, or one being captured into a graph.
    fn queue(
        &self,
        stream: &Arc<CudaStream>,
        sizes: &Sizes,
        buffers: &mut BTreeMap<ValueId, &mut CudaSlice<u8>>,
    ) -> Result<(), CudaError> {
        let mut scratch = BTreeMap::new();
        for s in &self.generated.scratch {
            let bytes = s.len * s.precision.bytes() as usize;
            let slice = stream.alloc_zeros::<u8>(bytes);
            scratch.insert(s.value, slice.map_err(driver("cuMemAllocAsync"))?);
        }
        for step in &self.generated.steps {
            match step {
                Step::Zero(v) => {
                    let buffer = buffers.get_mut(v).ok_or_else(|| missing(*v))?;
                    stream.memset_zeros(&mut **buffer).map_err(driver("cuMemsetD8Async"))?;
                }
                Step::Launch(launch) => self.launch(stream, launch, sizes, buffers, &scratch)?,
            }
        }
        Ok(())
    }

    fn launch(
        &self,
        stream: &Arc<CudaStream>,
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

    /// Times the plan's steps on `workspace` with `timer` (see [`Timer`]) the way repeated runs
    /// go: queued one by one and, for a plan of several steps, replayed as a graph; the faster.
    pub fn time(&self, workspace: &mut Workspace, timer: &Timer, options: &TimingOptions) -> Result<Timing, CudaError> {
        let steps = timer.time(options, &mut || self.enqueue(workspace))?;
        if self.generated.steps.len() < 2 {
            return Ok(steps);
        }
        // Where no graph can be captured, runs go step by step (see `Replays`).
        let Ok(graph) = self.capture_workspace(workspace) else {
            return Ok(steps);
        };
        let replayed = timer.time(options, &mut || graph.replay())?;
        Ok(match replayed.median_us < steps.median_us {
            true => replayed,
            false => steps,
        })
    }
}

/// One run of a plan on one set of buffers, each way timed with CUDA events.
struct OnBuffers<'a> {
    plan: &'a CudaPlan,
    timer: Timer,
    sizes: &'a Sizes,
    buffers: BTreeMap<ValueId, &'a mut CudaSlice<u8>>,
}

impl Ways<PlanGraph> for OnBuffers<'_> {
    fn steps(&mut self) -> Result<f64, CudaError> {
        let stream = self.plan.device.stream();
        self.timer
            .once(&mut || self.plan.queue(stream, self.sizes, &mut self.buffers))
    }

    fn capture(&mut self) -> Result<PlanGraph, CudaError> {
        self.plan.capture(self.sizes, &mut self.buffers)
    }

    fn replay(&mut self, graph: &PlanGraph) -> Result<f64, CudaError> {
        self.timer.once(&mut || graph.replay())
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
