//! A compiled emulated module and kernel launches.

use crate::arg::{check_signature, KernelArg, Staged};
use crate::compiler;
use crate::error::EmulateError;
use fuse_core::cache::{CacheDir, Scratch};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

/// Block limits of current NVIDIA GPUs.
const MAX_BLOCK_THREADS: u32 = 1024;
const MAX_BLOCK: (u32, u32, u32) = (1024, 1024, 64);
const MAX_GRID: (u32, u32, u32) = (i32::MAX as u32, 65535, 65535);
/// Dynamic shared memory per block (H100 opt-in limit). Static sizes are for ptxas to check.
const MAX_SHARED_BYTES: usize = 227 * 1024;
/// Room for the kernel's error message.
const ERROR_BYTES: usize = 4096;
/// Default cap on worker threads: enough to keep tests quick without flooding a machine.
const MAX_DEFAULT_WORKERS: usize = 8;

/// Fiber stacks that module copies keep between launches, in the whole process. Each stack is
/// two mappings (a guard page below it), and the kernel caps a process's mappings
/// (vm.max_map_count, 65530 by default), while a distributed session keeps many modules loaded
/// on each rank, each with a copy per worker and up to 1024 stacks a copy. Past this many
/// (about 48k mappings), a copy gives its stacks back after each launch.
const STACK_BUDGET: usize = 24 * 1024;
/// Stacks kept now.
static STACKS_KEPT: AtomicUsize = AtomicUsize::new(0);

/// `struct FuseEmuDim3` of the header.
#[repr(C)]
#[derive(Clone, Copy)]
struct Dim3 {
    x: u32,
    y: u32,
    z: u32,
}

/// `fuse_emu_launch_<kernel>` of the header.
type LaunchFn = unsafe extern "C" fn(Dim3, Dim3, usize, *mut *mut c_void, *mut u64, *mut c_char, usize) -> c_int;

/// `fuse_emu_signature_<kernel>` and `fuse_emu_kernels`.
type TextFn = unsafe extern "C" fn() -> *const c_char;

/// `fuse_emu_release_stacks`.
type ReleaseFn = unsafe extern "C" fn();

/// How to build and run a module.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmulateOptions {
    /// Preprocessor definitions, passed as `-DNAME=VALUE`.
    pub defines: Vec<(String, String)>,
    /// OS threads running blocks in parallel; 0 means the available parallelism (at most 8).
    pub workers: usize,
}

/// A kernel source compiled for the host, ready to launch.
pub struct EmulatedModule {
    kernels: Vec<String>,
    workers: usize,
    copies: Mutex<Copies>,
}

/// Loaded copies of the library, one per worker: each copy has its own globals (fibers,
/// `__shared__` variables), so each can run blocks on its own thread.
struct Copies {
    loaded: Vec<Library>,
    /// Fiber stacks each copy keeps (counted in [`STACKS_KEPT`]).
    stacks: Vec<usize>,
}

impl EmulatedModule {
    /// Compiles `source` with default options.
    pub fn compile(source: &str) -> Result<EmulatedModule, EmulateError> {
        EmulatedModule::compile_with(source, &EmulateOptions::default())
    }

    /// Compiles `source` with the host C++ compiler (cached) and loads it.
    pub fn compile_with(source: &str, options: &EmulateOptions) -> Result<EmulatedModule, EmulateError> {
        let cache = CacheDir::open("emulate")?;
        let image = compiler::build(&cache, source, &options.defines)?;
        let workers = match options.workers {
            0 => std::thread::available_parallelism()
                .map_or(1, usize::from)
                .min(MAX_DEFAULT_WORKERS),
            n => n,
        };
        // Every copy now, before a run's data fills the memory: loading one resizes each
        // thread's table of thread-local storage, and glibc aborts the process when that
        // allocation fails ("cannot allocate memory for thread-local data").
        let copies = Copies {
            loaded: load_copies(&image, workers, &cache.scratch()?)?,
            stacks: Vec::new(),
        };
        // SAFETY: the header defines this symbol with this type; it returns a static string.
        let kernels = unsafe { call_text(&copies.loaded[0], "fuse_emu_kernels") }?;
        Ok(EmulatedModule {
            kernels: kernels
                .split(',')
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect(),
            workers,
            copies: Mutex::new(copies),
        })
    }

    /// Kernels marked with `FUSE_EMU_EXPORT`, in source order.
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// Runs `kernel` over `grid` blocks of `block` threads, like `cuLaunchKernel`.
    ///
    /// Buffers are copied to 256-byte aligned device copies fenced by red zones; mutable ones
    /// are copied back after a successful run. Launches of one module are serialised.
    pub fn launch(
        &self,
        kernel: &str,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        dynamic_shared_bytes: usize,
        args: &mut [KernelArg],
    ) -> Result<(), EmulateError> {
        self.check_kernel(kernel)?;
        check_geometry(grid, block, dynamic_shared_bytes).map_err(|reason| EmulateError::InvalidLaunch {
            kernel: kernel.to_owned(),
            reason,
        })?;
        let mut copies = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: exported by FUSE_EMU_EXPORT for every name in `self.kernels`.
        let signature = unsafe { call_text(&copies.loaded[0], &format!("fuse_emu_signature_{kernel}")) }?;
        check_signature(kernel, &signature, args)?;
        let blocks = u64::from(grid.0) * u64::from(grid.1) * u64::from(grid.2);
        // Every copy was loaded with the module.
        let workers = self.workers.min(usize::try_from(blocks).unwrap_or(usize::MAX));
        let launchers = copies.loaded[..workers]
            .iter()
            .map(|library| launcher(library, kernel))
            .collect::<Result<Vec<_>, _>>()?;
        let mut staged = Staged::new(args)?;
        let pointers = ArgPointers(staged.pointers());
        let launch = Launch {
            grid: dim3(grid),
            block: dim3(block),
            dynamic_shared_bytes,
            args: &pointers,
        };
        threads_fit(workers - 1)?;
        let next_block = AtomicU64::new(0);
        let underway = crate::stop::Underway::enter(&next_block, blocks);
        let ran = launch.run(&launchers, &next_block);
        underway.leave();
        let threads = (block.0 * block.1 * block.2) as usize;
        copies.keep_or_release_stacks(workers, threads)?;
        ran.map_err(EmulateError::Execution)?;
        staged.finish(kernel, args)
    }

    fn check_kernel(&self, kernel: &str) -> Result<(), EmulateError> {
        if self.kernels.iter().any(|k| k == kernel) {
            return Ok(());
        }
        Err(EmulateError::UnknownKernel {
            name: kernel.to_owned(),
            exported: self.kernels.clone(),
        })
    }
}

impl Copies {
    /// After a launch of blocks of `threads` on the first `used` copies (each now holds stacks
    /// for at least that many threads): each keeps them while the process keeps no more than
    /// [`STACK_BUDGET`], and gives all of its own back otherwise.
    fn keep_or_release_stacks(&mut self, used: usize, threads: usize) -> Result<(), EmulateError> {
        self.stacks.resize(self.loaded.len(), 0);
        for k in 0..used.min(self.loaded.len()) {
            let more = threads.saturating_sub(self.stacks[k]);
            let fits = |kept: usize| (kept + more <= STACK_BUDGET).then_some(kept + more);
            if STACKS_KEPT
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits)
                .is_ok()
            {
                self.stacks[k] += more;
                continue;
            }
            STACKS_KEPT.fetch_sub(std::mem::take(&mut self.stacks[k]), Ordering::Relaxed);
            // SAFETY: the header defines it with this type; no launch runs on this copy now
            // (the module's lock is held).
            let release = unsafe { self.loaded[k].get::<ReleaseFn>(b"fuse_emu_release_stacks") };
            let release = release.map_err(|source| EmulateError::Symbol {
                symbol: "fuse_emu_release_stacks".to_owned(),
                source,
            })?;
            // SAFETY: as above.
            unsafe { release() };
        }
        Ok(())
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        // Unloading a copy unmaps its stacks.
        STACKS_KEPT.fetch_sub(self.stacks.iter().sum(), Ordering::Relaxed);
    }
}

/// Room in the address space for the stacks of `threads` more threads, tried by mapping as
/// much and giving it back: a thread whose stack maps but whose signal stack does not is an
/// abort of the process, not an error (Rust's runtime maps one for each new thread).
fn threads_fit(threads: usize) -> Result<(), EmulateError> {
    const PER_THREAD: usize = 4 << 20;
    let bytes = threads * PER_THREAD;
    if bytes == 0 {
        return Ok(());
    }
    // SAFETY: a fresh private mapping of no access, unmapped at once; it touches no memory.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if at == libc::MAP_FAILED {
            return Err(EmulateError::HostMemory(fuse_core::data::HostMemoryError {
                what: format!("the stacks of {threads} threads running emulated blocks"),
                needed: bytes as u64,
                available: None,
            }));
        }
        libc::munmap(at, bytes);
    }
    Ok(())
}

/// Loads `count` copies of the library `image`, each from a file of its own in `folder` (the
/// loader hands back an already loaded object for a name it has seen), reached through the
/// folder's handle. The folder goes when the caller drops it: a loaded copy needs its file no
/// more, and nothing is left in the cache when the process exits with a module loaded.
fn load_copies(image: &[u8], count: usize, folder: &Scratch) -> Result<Vec<Library>, EmulateError> {
    (0..count)
        .map(|_| {
            let name = format!("{:016x}.so", rand::random::<u64>());
            let path = folder.handle_path(&name);
            folder.dir().write(&name, image).map_err(|source| EmulateError::Io {
                context: format!("writing {}", path.display()),
                source,
            })?;
            // SAFETY: our own module, built from the emulation header; its static initialisers
            // only register kernel names.
            unsafe { Library::new(&path) }.map_err(|source| EmulateError::Load { path, source })
        })
        .collect()
}

/// Calls a `const char* f(void)` export.
///
/// # Safety
/// `symbol` must have that type in `library`.
unsafe fn call_text(library: &Library, symbol: &str) -> Result<String, EmulateError> {
    let function = library
        .get::<TextFn>(symbol.as_bytes())
        .map_err(|source| EmulateError::Symbol {
            symbol: symbol.to_owned(),
            source,
        })?;
    Ok(CStr::from_ptr(function()).to_string_lossy().into_owned())
}

fn launcher(library: &Library, kernel: &str) -> Result<LaunchFn, EmulateError> {
    let symbol = format!("fuse_emu_launch_{kernel}");
    // SAFETY: FUSE_EMU_EXPORT defines it with the LaunchFn signature.
    unsafe { library.get::<LaunchFn>(symbol.as_bytes()) }
        .map(|f| *f)
        .map_err(|source| EmulateError::Symbol { symbol, source })
}

fn dim3((x, y, z): (u32, u32, u32)) -> Dim3 {
    Dim3 { x, y, z }
}

/// CUDA's launch limits; the reason when one is broken.
fn check_geometry(grid: (u32, u32, u32), block: (u32, u32, u32), dynamic_shared_bytes: usize) -> Result<(), String> {
    let within = |v: (u32, u32, u32), max: (u32, u32, u32)| {
        (1..=max.0).contains(&v.0) && (1..=max.1).contains(&v.1) && (1..=max.2).contains(&v.2)
    };
    if !within(block, MAX_BLOCK) || block.0 * block.1 * block.2 > MAX_BLOCK_THREADS {
        return Err(format!(
            "block {block:?}: each dimension must be at least 1, at most {MAX_BLOCK:?}, and \
             the block at most {MAX_BLOCK_THREADS} threads"
        ));
    }
    if !within(grid, MAX_GRID) {
        return Err(format!("grid {grid:?}: each dimension must be 1..={MAX_GRID:?}"));
    }
    if dynamic_shared_bytes > MAX_SHARED_BYTES {
        return Err(format!(
            "{dynamic_shared_bytes} bytes of dynamic shared memory; at most {MAX_SHARED_BYTES}"
        ));
    }
    Ok(())
}

/// The launch ABI's `void** args`; the module only reads it, from every worker.
struct ArgPointers(Vec<*mut c_void>);

// SAFETY: the pointers are only read while the launch borrows them; what they point to is
// owned by `Staged`, which outlives the worker threads.
unsafe impl Sync for ArgPointers {}

struct Launch<'a> {
    grid: Dim3,
    block: Dim3,
    dynamic_shared_bytes: usize,
    args: &'a ArgPointers,
}

impl Launch<'_> {
    /// Runs the grid on one thread per launcher (one per module copy), blocks handed out by
    /// `next_block`; the first error wins.
    fn run(&self, launchers: &[LaunchFn], next_block: &AtomicU64) -> Result<(), String> {
        let Some((&own, others)) = launchers.split_first() else {
            return Ok(());
        };
        std::thread::scope(|scope| {
            let handles: Vec<_> = others
                .iter()
                .map(|&launcher| scope.spawn(move || self.call(launcher, next_block)))
                .collect();
            let mut result = self.call(own, next_block);
            for handle in handles {
                let joined = handle.join().unwrap_or_else(|_| Err("worker panicked".into()));
                result = result.and(joined);
            }
            result
        })
    }

    fn call(&self, launcher: LaunchFn, next_block: &AtomicU64) -> Result<(), String> {
        let mut error = vec![0u8; ERROR_BYTES];
        // SAFETY: the arguments were checked against the kernel's signature and point to
        // live staged values; `error` is writable for its length.
        let status = unsafe {
            launcher(
                self.grid,
                self.block,
                self.dynamic_shared_bytes,
                self.args.0.as_ptr().cast_mut(),
                next_block.as_ptr(),
                error.as_mut_ptr().cast(),
                error.len(),
            )
        };
        if status == 0 {
            return Ok(());
        }
        let message = CStr::from_bytes_until_nul(&error).map_or_else(
            |_| String::from_utf8_lossy(&error).into_owned(),
            |m| m.to_string_lossy().into_owned(),
        );
        Err(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_limits() {
        assert!(check_geometry((1, 1, 1), (1024, 1, 1), 0).is_ok());
        assert!(check_geometry((1, 1, 1), (32, 32, 1), MAX_SHARED_BYTES).is_ok());
        assert!(check_geometry((1, 1, 1), (1025, 1, 1), 0).is_err());
        assert!(check_geometry((1, 1, 1), (32, 33, 1), 0).is_err());
        assert!(check_geometry((1, 1, 1), (1, 1, 65), 0).is_err());
        assert!(check_geometry((1, 1, 1), (0, 1, 1), 0).is_err());
        assert!(check_geometry((0, 1, 1), (1, 1, 1), 0).is_err());
        assert!(check_geometry((1, 65536, 1), (1, 1, 1), 0).is_err());
        assert!(check_geometry((1, 1, 1), (1, 1, 1), MAX_SHARED_BYTES + 1).is_err());
    }
}
