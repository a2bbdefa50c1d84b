//! libcuda, libcublas and libnccl, found before cudarc touches them ([`fuse_codegen::dynlib`] explains
//! why: cudarc panics on first use when a library does not load).
//!
//! Every entry point of this crate that reaches the driver calls [`driver`] first, and the
//! cuBLAS baseline calls [`cublas`], the collectives between GPUs [`nccl`]; each loads its library once per process and then checks
//! the release against the one cudarc's bindings were generated for (CUDA 13.0), because
//! cudarc also panics when a symbol it binds is missing from an older library.

use std::ffi::c_int;
use std::sync::OnceLock;

use fuse_codegen::dynlib::{self, Pinned, Spec};
use libloading::Library;

pub use crate::env_vars::{CUBLAS_ENV, DRIVER_ENV, NCCL_ENV};
use crate::error::CudaError;

/// The CUDA release cudarc's bindings are generated for (feature `cuda-13000`).
pub const CUDA_RELEASE: (i32, i32) = (13, 0);

const DRIVER_SYMBOL: &[u8] = b"cuDriverGetVersion";
const CUBLAS_SYMBOL: &[u8] = b"cublasGetProperty";
const NCCL_SYMBOL: &[u8] = b"ncclGetVersion";

const DRIVER: Spec = Spec {
    label: "CUDA driver",
    cudarc_name: "cuda",
    env: DRIVER_ENV,
    files: &["libcuda.so.1", "libcuda.so"],
    symbol: DRIVER_SYMBOL,
    companions: &[],
    // The driver comes with the GPU's kernel module, never from pip.
    wheel: None,
    cudarc_present: driver_present,
    cudarc_symbol: driver_symbol,
    version: driver_version_of,
    cudarc_version: driver_version,
};

const CUBLAS: Spec = Spec {
    label: "cuBLAS",
    cudarc_name: "cublas",
    env: CUBLAS_ENV,
    files: &["libcublas.so.13", "libcublas.so"],
    symbol: CUBLAS_SYMBOL,
    // libcublas needs libcublasLt by soname: loaded first from the same folder, the loader
    // finds it even where that folder is not on its path.
    companions: &["libcublasLt.so"],
    // pip install 'nvidia-cublas==13.*'.
    wheel: Some("nvidia/cu13/lib"),
    cudarc_present: cublas_present,
    cudarc_symbol: cublas_symbol,
    version: cublas_version_of,
    cudarc_version: cublas_version,
};

const NCCL: Spec = Spec {
    label: "NCCL",
    cudarc_name: "nccl",
    env: NCCL_ENV,
    // cudarc asks the loader for `libnccl.so` (among others), never for NCCL's soname
    // `libnccl.so.2`: see [`CudaError::NoNccl`].
    files: &["libnccl.so", "libnccl.so.2"],
    symbol: NCCL_SYMBOL,
    companions: &[],
    // pip install 'nvidia-nccl-cu13' (a dependency of PyTorch's CUDA wheels).
    wheel: Some("nvidia/nccl/lib"),
    cudarc_present: nccl_present,
    cudarc_symbol: nccl_symbol,
    version: nccl_version_of,
    cudarc_version: nccl_version,
};

static DRIVER_LOADED: OnceLock<Pinned> = OnceLock::new();
static CUBLAS_LOADED: OnceLock<Pinned> = OnceLock::new();
static NCCL_LOADED: OnceLock<Pinned> = OnceLock::new();

/// Loads libcuda once per process and checks its CUDA release; returns the file it came from.
pub fn driver() -> Result<&'static Pinned, CudaError> {
    load(&DRIVER, &DRIVER_LOADED, CudaError::NoDriver)
}

/// Loads libcublas once per process and checks its release; returns the file it came from.
pub fn cublas() -> Result<&'static Pinned, CudaError> {
    load(&CUBLAS, &CUBLAS_LOADED, CudaError::NoCublas)
}

/// Loads libnccl once per process; returns the file it came from. Any NCCL 2 will do: fuse
/// calls only functions NCCL 2.0 has.
pub fn nccl() -> Result<&'static Pinned, CudaError> {
    load(&NCCL, &NCCL_LOADED, CudaError::NoNccl)
}

fn load(
    spec: &Spec,
    slot: &'static OnceLock<Pinned>,
    missing: fn(dynlib::ProbeError) -> CudaError,
) -> Result<&'static Pinned, CudaError> {
    if let Some(pinned) = slot.get() {
        return Ok(pinned);
    }
    let pinned = dynlib::probe(spec).map_err(missing)?;
    check_release(spec, pinned.version)?;
    Ok(slot.get_or_init(|| pinned))
}

/// Refuses a library older than the bindings: cudarc would panic on a missing symbol.
fn check_release(spec: &Spec, version: Option<(i32, i32)>) -> Result<(), CudaError> {
    match version {
        Some(found) if found < CUDA_RELEASE && spec.cudarc_name != "nccl" => {
            let found = format!("{}.{}", found.0, found.1);
            let needed = format!("{}.{}", CUDA_RELEASE.0, CUDA_RELEASE.1);
            Err(match spec.cudarc_name {
                "cuda" => CudaError::OldDriver { found, needed },
                _ => CudaError::Unsupported(format!(
                    "{} {found} is older than CUDA {needed}, which fuse is built for; install cuBLAS 13",
                    spec.label
                )),
            })
        }
        _ => Ok(()),
    }
}

/// `cuDriverGetVersion`'s 13000 as (13, 0).
fn split_version(v: c_int) -> (i32, i32) {
    (v / 1000, (v % 1000) / 10)
}

/// The version that `symbol`, an `int f(int*)` getter returning 0 on success, reports from
/// `library`, split by `split`.
///
/// # Safety
///
/// `symbol` must be such a getter that needs no initialisation and only writes the int
/// (`cuDriverGetVersion` before `cuInit`, `ncclGetVersion` without a communicator).
unsafe fn int_version_of(library: &Library, symbol: &[u8], split: fn(c_int) -> (i32, i32)) -> Option<(i32, i32)> {
    type F = unsafe extern "C" fn(*mut c_int) -> c_int;
    // SAFETY: the caller names such a getter; one valid out-pointer.
    unsafe {
        let f = library.get::<F>(symbol).ok()?;
        let mut v = 0;
        (f(&mut v) == 0).then(|| split(v))
    }
}

unsafe fn driver_version_of(library: &Library) -> Option<(i32, i32)> {
    // SAFETY: `cuDriverGetVersion(int*)` may be called before `cuInit` and only writes the int.
    unsafe { int_version_of(library, DRIVER_SYMBOL, split_version) }
}

unsafe fn driver_version() -> Option<(i32, i32)> {
    let mut v = 0;
    // SAFETY: called after `driver_present`, so cudarc's library loads; one valid out-pointer.
    let status = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (status == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then(|| split_version(v))
}

unsafe fn driver_present() -> bool {
    // SAFETY: only dlopens cudarc's candidate names.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

unsafe fn driver_symbol(symbol: &[u8]) -> Option<usize> {
    // SAFETY: called after `driver_present`, so `culib` finds a library and cannot panic.
    let symbol = unsafe { cudarc::driver::sys::culib().get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*symbol as usize)
}

unsafe fn cublas_version_of(library: &Library) -> Option<(i32, i32)> {
    // The first parameter is the `libraryPropertyType` enum (an int): 0 major, 1 minor.
    type F = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    // SAFETY: `cublasGetProperty` needs no handle and only writes the int.
    unsafe {
        let f = library.get::<F>(CUBLAS_SYMBOL).ok()?;
        let (mut major, mut minor) = (0, 0);
        (f(0, &mut major) == 0 && f(1, &mut minor) == 0).then_some((major, minor))
    }
}

unsafe fn cublas_version() -> Option<(i32, i32)> {
    use cudarc::cublas::sys::{cublasGetProperty, cublasStatus_t, libraryPropertyType};
    let (mut major, mut minor) = (0, 0);
    // SAFETY: called after `cublas_present`; valid out-pointers.
    unsafe {
        let ok = cublasGetProperty(libraryPropertyType::MAJOR_VERSION, &mut major)
            == cublasStatus_t::CUBLAS_STATUS_SUCCESS
            && cublasGetProperty(libraryPropertyType::MINOR_VERSION, &mut minor)
                == cublasStatus_t::CUBLAS_STATUS_SUCCESS;
        ok.then_some((major, minor))
    }
}

unsafe fn cublas_present() -> bool {
    // SAFETY: only dlopens cudarc's candidate names.
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

unsafe fn cublas_symbol(symbol: &[u8]) -> Option<usize> {
    // SAFETY: called after `cublas_present`, so `culib` finds a library and cannot panic.
    let symbol = unsafe { cudarc::cublas::sys::culib().get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*symbol as usize)
}

/// `ncclGetVersion`'s 22703 (NCCL 2.27.3) as (2, 27).
fn split_nccl_version(v: c_int) -> (i32, i32) {
    (v / 10000, (v % 10000) / 100)
}

unsafe fn nccl_version_of(library: &Library) -> Option<(i32, i32)> {
    // SAFETY: `ncclGetVersion(int*)` needs no communicator and only writes the int.
    unsafe { int_version_of(library, NCCL_SYMBOL, split_nccl_version) }
}

unsafe fn nccl_version() -> Option<(i32, i32)> {
    let mut v = 0;
    // SAFETY: called after `nccl_present`, so cudarc's library loads; one valid out-pointer.
    let status = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut v) };
    (status == cudarc::nccl::sys::ncclResult_t::ncclSuccess).then(|| split_nccl_version(v))
}

unsafe fn nccl_present() -> bool {
    // SAFETY: only dlopens cudarc's candidate names.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

unsafe fn nccl_symbol(symbol: &[u8]) -> Option<usize> {
    // SAFETY: called after `nccl_present`, so `culib` finds a library and cannot panic.
    let symbol = unsafe { cudarc::nccl::sys::culib().get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*symbol as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_versions_split_like_cuda_numbers_them() {
        assert_eq!(split_version(13000), (13, 0));
        assert_eq!(split_version(12090), (12, 9));
    }

    #[test]
    fn an_old_driver_is_refused_by_name() {
        let err = check_release(&DRIVER, Some((12, 4))).unwrap_err();
        assert!(matches!(err, CudaError::OldDriver { .. }), "{err}");
        assert!(err.to_string().contains("CUDA 12.4"), "{err}");
        assert!(check_release(&DRIVER, Some((13, 0))).is_ok());
        assert!(check_release(&CUBLAS, Some((12, 9))).is_err());
        assert!(
            check_release(&NCCL, Some((2, 27))).is_ok(),
            "NCCL numbers its own releases"
        );
    }

    #[test]
    fn nccl_versions_split_like_nccl_numbers_them() {
        assert_eq!(split_nccl_version(22703), (2, 27));
        assert_eq!(split_nccl_version(21805), (2, 18));
    }
}
