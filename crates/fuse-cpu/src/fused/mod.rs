//! The fused CPU backend: runs a [`Plan`] — the same plans the explorer makes for a GPU — on
//! the CPU's cores, so that what a GPU kernel keeps on chip stays in cache.
//!
//! Each kernel of the plan processes its data tile by tile: a few rows of the matrix at a time
//! (as many columns as fit a cache-sized run) or a chunk of the vectors, running every call of
//! the kernel on a tile while it is in cache. A fused BiCGK therefore reads A from memory once
//! for both `A·p` and `Aᵀ·r`, and a fused VADD never writes its temporary: values the plan keeps
//! on chip live in per-thread tile buffers. Reductions are per-thread partials added up at the
//! end of the kernel, which is the global barrier (a norm's partials are the three scaled sums
//! of squares BLAS keeps, so that it neither overflows nor underflows) — except row sums (`A·x`): a thread owns whole
//! rows, so it finishes them row block by row block, and calls that read them run in a second
//! pass over the row block while it is still in cache (the CPU timing tables' `row_barrier`).
//! A fused ATAX (`t = A·x; y = Aᵀ·t`) or GESUMMV therefore reads each matrix once.
//!
//! Arithmetic is in the script's precision (f32 scripts compute in f32). The library's
//! formulas run through hand-written loops where they have the form of a sum of products —
//! `A·x` as dot products of eight rows at a time with one load of `x`, `Aᵀ·x` as accumulation
//! of eight scaled rows a pass into a per-thread partial vector, `ger`, `madd` and the BLAS-1
//! maps element-wise, in the widest vectors the CPU has (`loops.rs`) — and through a generic
//! evaluator otherwise, so functions added to the library run too.
//!
//! ```
//! use fuse_core::data::{fill_random_inputs, relative_error};
//! use fuse_core::{explore, script, Bindings, Library, Limits, TimingTable};
//! use fuse_cpu::fused::FusedPlan;
//!
//! let library = Library::builtin().unwrap();
//! let text = "
//! sizes: {m: 300, n: 200}
//! inputs: {A: [m, n], p: [n], r: [m]}
//! outputs: [q, s]
//! calls:
//!   - q = sgemv(A, p)
//!   - s = sgemtv(A, r)
//! ";
//! let program = script::parse("bicgk.yaml", text, &library).unwrap();
//! let table = TimingTable::builtin().unwrap();
//! let plan = explore(&program, &program.sizes, &table, &library, Limits::default()).unwrap().best();
//! assert_eq!(plan.kernels.len(), 1); // one pass over A
//! let fused = FusedPlan::new(program.clone(), &program.sizes, &plan).unwrap();
//! let mut inputs = Bindings::new();
//! fill_random_inputs(&program, &program.sizes, 7, &mut inputs);
//! let got = fused.run(&inputs).unwrap();
//! let want = fuse_core::reference::evaluate(&program, &program.sizes, &inputs).unwrap();
//! assert!(relative_error(&got["s"].to_f64(), &want["s"].to_f64()) < 1e-5);
//! ```

mod cache;
pub mod calibrate;
mod cpu;
mod crew;
mod error;
mod eval;
mod exec;
mod loops;
mod measured;
mod memory;
mod norm;
mod prepare;
mod real;
mod simd;
mod stage;
mod threads;
pub mod timings;

use std::collections::BTreeMap;
use std::mem;
use std::sync::Arc;

use fuse_core::data::{bound_inputs, input_extents, try_zeroed_vec};
use fuse_core::explore::implementation::{dataflow, Block, Finish, Launch, Reduction, DEFAULT_VARIANT};
use fuse_core::explore::{Context, KernelTime, Layout, Vocabulary};
use fuse_core::{Bindings, Bound, HostArray, HostData, Kernel, Plan, Precision, Program, Sizes};

pub use error::CpuError;
pub use real::Real;
pub use simd::{SimdLevel, SIMD_VAR};
pub use threads::{Threads, THREADS_VAR};

/// Bytes of the last-level cache a run on this CPU can count on: the CPU's, at most 16 MiB for
/// each thread fuse runs (a VM is shown its host's whole cache, which other tenants share).
pub fn cache_bytes() -> usize {
    cache::Caches::here().last
}

/// A plan prepared for the CPU at fixed sizes; run it any number of times.
#[derive(Debug, Clone)]
pub struct FusedPlan {
    /// Shared, not copied: a long script's program is large.
    program: Arc<Program>,
    sizes: Sizes,
    /// The extents of each input at these sizes, to check a run's arrays against.
    input_extents: Vec<Vec<usize>>,
    prepared: prepare::Prepared,
    threads: Threads,
    /// Whether it is small enough to run on the calling thread ([`INLINE_BYTES`]).
    inline: bool,
}

/// Plans that move fewer bytes than this run on the calling thread: handing a run to the
/// spinning helpers and back costs 1–2 µs on the development machine, what one thread takes to
/// stream about this much from its caches (on two threads, SGEMV at 128² took 2.6 µs against
/// 2.3 alone, at 256² 4.2 against 5.5; GEMVER at 128² 11.2 against 15.4).
const INLINE_BYTES: u64 = 128 << 10;

/// The memory a [`FusedPlan`] computes into: one buffer per value that reaches memory (outputs,
/// and results that later kernels read). Reusing one across runs skips the allocation — what a
/// benchmark wants to leave out of its timings.
#[derive(Debug, Clone)]
pub struct Workspace {
    buffers: Buffers,
}

#[derive(Debug, Clone)]
enum Buffers {
    F32(Vec<Vec<f32>>),
    F64(Vec<Vec<f64>>),
}

impl FusedPlan {
    /// Checks `plan` against `program` and prepares it for `sizes` (bound by
    /// [`Program::bind_sizes`]) to run on the shared threads ([`Threads::shared`]) in the
    /// shared instruction set ([`SimdLevel::shared`]). The plan is lowered, not kept.
    pub fn new(program: impl Into<Arc<Program>>, sizes: &Sizes, plan: &Plan) -> Result<Self, CpuError> {
        let program = program.into();
        SimdLevel::shared()?;
        let mut prepared = prepare::prepare(&program, sizes, plan)?;
        prepared.prefetch = measured::prefetch();
        Ok(FusedPlan {
            prepared,
            inline: program.compulsory_bytes(sizes) < INLINE_BYTES,
            input_extents: input_extents(&program, sizes),
            program,
            sizes: sizes.clone(),
            threads: Threads::shared()?,
        })
    }

    /// The same plan run on `threads`.
    pub fn with_threads(mut self, threads: Threads) -> Self {
        self.threads = threads;
        self
    }

    /// The same plan with its walks out of cache prefetching each step's next rows in software
    /// or not, whatever this CPU's timing table says (what calibration compares).
    pub fn with_prefetch_ahead(mut self, ahead: bool) -> Self {
        self.prepared.prefetch = measured::Prefetch::both(ahead);
        self
    }

    /// The threads it runs on.
    pub fn threads(&self) -> &Threads {
        &self.threads
    }

    /// The program it runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The sizes it was prepared for.
    pub fn sizes(&self) -> &Sizes {
        &self.sizes
    }

    /// A fresh workspace for this plan (zeroed buffers); an error, not an abort, where the host
    /// memory cannot be had.
    pub fn workspace(&self) -> Result<Workspace, CpuError> {
        let buffers = match self.program.precision {
            Precision::F32 => Buffers::F32(self.zeroed()?),
            Precision::F64 => Buffers::F64(self.zeroed()?),
        };
        Ok(Workspace { buffers })
    }

    /// A fresh workspace whose pages are already provided: each buffer first touched (a write
    /// a page) by this plan's threads, the `k`-th share of every buffer by the `k`-th thread, as
    /// the kernels share out the rows they write. A fresh page costs the operating system a
    /// zero-fill and, under a hypervisor, the host its own provision — on the development VM
    /// 4–30 ms for 32 MB, more than the kernels of a 2000² f64 GEMVER that writes them (3.7 ms).
    /// Taken ahead, while the caller has other work (drawing or reading inputs), that time
    /// leaves the run ([`FusedPlan::run_into`]).
    pub fn touched_workspace(&self) -> Result<Workspace, CpuError> {
        let mut workspace = self.workspace()?;
        match &mut workspace.buffers {
            Buffers::F32(b) => self.touch(b),
            Buffers::F64(b) => self.touch(b),
        }
        Ok(workspace)
    }

    /// Writes zero (what the buffers hold) once a page, each thread its share of every buffer.
    fn touch<T: Real>(&self, buffers: &mut [Vec<T>]) {
        const PAGE: usize = 4096;
        let parts = self.threads.count();
        let mut shares: Vec<Vec<&mut [T]>> = (0..parts).map(|_| Vec::new()).collect();
        for buffer in buffers.iter_mut().filter(|b| !b.is_empty()) {
            let per = buffer.len().div_ceil(parts);
            for (k, share) in buffer.chunks_mut(per).enumerate() {
                shares[k].push(share);
            }
        }
        self.threads.share(shares, |shares| {
            for share in shares {
                for element in share.iter_mut().step_by((PAGE / mem::size_of::<T>()).max(1)) {
                    // SAFETY: a valid, exclusive reference; volatile, so that the write (of the
                    // value already there) is not dropped and the page is taken here.
                    unsafe { std::ptr::write_volatile(element, T::ZERO) };
                }
            }
        });
    }

    /// A zeroed buffer per slot, not written here (see [`try_zeroed_vec`]).
    fn zeroed<T: Real>(&self) -> Result<Vec<Vec<T>>, CpuError> {
        let names = |slot: usize| {
            let values = &self.program.values;
            let value = self.prepared.slots.iter().position(|&s| s == Some(slot));
            value.map_or_else(|| "a value".to_string(), |v| format!("`{}`", values[v].variable))
        };
        let mut buffers = Vec::with_capacity(self.prepared.slot_lens.len());
        for (slot, &len) in self.prepared.slot_lens.iter().enumerate() {
            let what = || format!("{} of {} at {}", names(slot), self.program.name, self.sizes);
            buffers.push(try_zeroed_vec(len, what)?);
        }
        Ok(buffers)
    }

    /// Runs on `inputs` (checked against the program) into `workspace`; read the outputs with
    /// [`FusedPlan::outputs`].
    pub fn run_in<A: Bound>(&self, inputs: &BTreeMap<String, A>, workspace: &mut Workspace) -> Result<(), CpuError> {
        let bound = bound_inputs(&self.program, &self.input_extents, inputs)?;
        match &mut workspace.buffers {
            Buffers::F32(b) if self.fits(b) => self.exec(&bound, b),
            Buffers::F64(b) if self.fits(b) => self.exec(&bound, b),
            _ => return Err(CpuError::Workspace),
        }
        Ok(())
    }

    /// Whether `buffers` are a workspace of this plan.
    fn fits<T: Real>(&self, buffers: &[Vec<T>]) -> bool {
        let lens = &self.prepared.slot_lens;
        T::PRECISION == self.program.precision
            && buffers.len() == lens.len()
            && buffers.iter().zip(lens).all(|(b, &n)| b.len() == n)
    }

    /// Runs the kernels into `buffers`, on the calling thread, with its helpers where the plan
    /// is not small.
    fn exec<T: Real, A: Bound>(&self, bound: &[&A], buffers: &mut [Vec<T>]) {
        let threads = (!self.inline).then_some(&self.threads);
        exec::run(&self.prepared, &self.program, bound, buffers, threads);
    }

    /// The outputs held by `workspace` after [`FusedPlan::run_in`], by name, in the program's
    /// precision (copied: the workspace is kept for the next run).
    pub fn outputs(&self, workspace: &Workspace) -> Bindings {
        match &workspace.buffers {
            Buffers::F32(b) => self.collect(|slot| HostData::F32(b[slot].clone())),
            Buffers::F64(b) => self.collect(|slot| HostData::F64(b[slot].clone())),
        }
    }

    /// Runs on `inputs` (owned [`Bindings`], or [`Views`](fuse_core::Views) of the caller's
    /// memory, read in place); returns every output by name, in the program's precision — the
    /// buffers computed into, not copies of them.
    pub fn run<A: Bound>(&self, inputs: &BTreeMap<String, A>) -> Result<Bindings, CpuError> {
        self.run_into(inputs, self.workspace()?)
    }

    /// [`FusedPlan::run`] into `workspace` (one of this plan's, such as a
    /// [`FusedPlan::touched_workspace`]), whose buffers the outputs then are.
    pub fn run_into<A: Bound>(
        &self,
        inputs: &BTreeMap<String, A>,
        mut workspace: Workspace,
    ) -> Result<Bindings, CpuError> {
        self.run_in(inputs, &mut workspace)?;
        Ok(match workspace.buffers {
            Buffers::F32(mut b) => self.collect(|slot| HostData::F32(mem::take(&mut b[slot]))),
            Buffers::F64(mut b) => self.collect(|slot| HostData::F64(mem::take(&mut b[slot]))),
        })
    }

    /// Each output with the data of its slot.
    fn collect(&self, mut data: impl FnMut(usize) -> HostData) -> Bindings {
        self.program
            .outputs
            .iter()
            .filter_map(|&v| {
                let value = &self.program.values[v];
                let array = HostArray {
                    dims: value.shape.extents(&self.sizes).unwrap_or_default(),
                    data: data(self.prepared.slots[v]?),
                };
                Some((value.variable.clone(), array))
            })
            .collect()
    }
}

/// The CPU's words for a plan (`fuse explore`, `fuse explain`): passes of threads over tiles.
impl Layout for FusedPlan {
    fn words(&self) -> Vocabulary {
        Vocabulary::Cpu
    }

    fn layout(&self, index: usize, _: &Kernel) -> String {
        let kernel = &self.prepared.kernels[index];
        let threads = self.threads.count();
        match self.program.precision {
            Precision::F32 => exec::layout::<f32>(kernel, threads, self.prepared.prefetch),
            Precision::F64 => exec::layout::<f64>(kernel, threads, self.prepared.prefetch),
        }
    }

    /// Whatever the plan names: a thread owns whole rows, so it completes row sums; every other
    /// reduction is summed from the threads' partials after the parallel section.
    fn finish(&self, index: usize, reduction: &Reduction) -> String {
        let row_sums = self.prepared.kernels[index]
            .calls
            .iter()
            .any(|c| c.result == reduction.value && matches!(c.op, prepare::Op::RowSums { .. }));
        match row_sums {
            true => "complete in each thread, which owns whole rows".to_string(),
            false => "threads' partials added at the end of the pass".to_string(),
        }
    }
}

/// The unfused plan of `program`: one kernel per call, in script order — the baseline fusion is
/// measured against (every call reads its operands from memory and writes its result back).
pub fn unfused_plan(program: &Program, sizes: &Sizes) -> Plan {
    let ctx = Context::new(program, sizes);
    let kernels = (0..program.calls.len())
        .map(|c| {
            let flow = dataflow(&ctx, &[c]);
            let call = &program.calls[c];
            let reductions = match call.kind.is_reduce() {
                true => vec![Reduction {
                    call: c,
                    value: call.result,
                    finish: Finish::Kernel,
                }],
                false => Vec::new(),
            };
            Kernel {
                calls: vec![c],
                variants: vec![DEFAULT_VARIANT.to_string()],
                loads: flow.loads,
                stores: flow.stores,
                on_chip: flow.on_chip,
                parameters: flow.parameters,
                launch: Launch {
                    block: Block::new(256, 1),
                    serial_iterations: 1,
                    block_rows: None,
                    walk: None,
                    blocks: 0,
                    shared_bytes: 0,
                    reductions,
                },
                predicted: KernelTime::default(),
            }
        })
        .collect();
    Plan {
        rank: 0,
        predicted_us: 0.0,
        kernels,
    }
}
