//! Finding libnvrtc before cudarc does: the NVRTC [`Spec`] of the shared probe in
//! [`crate::dynlib`], which explains why and how.
//!
//! libnvrtc in turn dlopens `libnvrtc-builtins.so.13.0` by bare name at compile time (and
//! fails with `NVRTC_ERROR_BUILTIN_OPERATION_FAILURE` when the loader path lacks it), so the
//! builtins beside the chosen library are pinned with it, as companions.

use crate::dynlib::{self, Pinned, ProbeError, Spec};
use libloading::Library;
use std::ffi::c_int;
use std::sync::OnceLock;

/// Env var naming the libnvrtc file, or a folder holding it.
pub const LIB_ENV: &str = "FUSE_NVRTC_LIB";

/// Symbol whose address identifies which libnvrtc object is loaded.
const PROBE_SYMBOL: &[u8] = b"nvrtcVersion";

/// How libnvrtc is found and checked.
const SPEC: Spec = Spec {
    label: "NVRTC",
    cudarc_name: "nvrtc",
    env: LIB_ENV,
    // Newest CUDA first.
    files: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    symbol: PROBE_SYMBOL,
    companions: &["libnvrtc-builtins.so"],
    // pip install 'nvidia-cuda-nvrtc==13.0.*', as tests/run does.
    wheel: Some("nvidia/cu13/lib"),
    cudarc_present,
    cudarc_symbol,
    version: version_of,
    cudarc_version,
};

/// The library cudarc uses, pinned for the life of the process.
static LOADED: OnceLock<Pinned> = OnceLock::new();

/// Loads libnvrtc once per process, looking where `nvrtc::load` says; returns the file it came from.
pub fn library() -> Result<&'static str, ProbeError> {
    if let Some(loaded) = LOADED.get() {
        return Ok(&loaded.origin);
    }
    let loaded = dynlib::probe(&SPEC)?;
    Ok(&LOADED.get_or_init(|| loaded).origin)
}

type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

unsafe fn version_of(library: &Library) -> Option<(i32, i32)> {
    // SAFETY: `nvrtcVersion` has this signature and only writes the two ints.
    unsafe {
        let version = library.get::<VersionFn>(PROBE_SYMBOL).ok()?;
        let (mut major, mut minor) = (0, 0);
        (version(&mut major, &mut minor) == 0).then_some((major, minor))
    }
}

/// Version of the library cudarc loaded; called only after `cudarc_present` found one.
unsafe fn cudarc_version() -> Option<(i32, i32)> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: cudarc's library is loaded (checked by the caller); two valid out-pointers.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

unsafe fn cudarc_present() -> bool {
    // SAFETY: only dlopens cudarc's candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

unsafe fn cudarc_symbol(symbol: &[u8]) -> Option<usize> {
    // SAFETY: called after `cudarc_present`, so `culib` finds a library and cannot panic; the
    // symbol is only read as an address.
    let symbol = unsafe { cudarc::nvrtc::sys::culib().get::<unsafe extern "C" fn()>(symbol) }.ok()?;
    Some(*symbol as usize)
}
