//! The C++ headers of emulation: the one force-included by the host compiler, and the prelude
//! that gives the same macros a meaning under NVRTC.

/// The emulation header (`cuda_emu.h`), force-included ahead of every emulated source.
pub const CUDA_EMU_HEADER: &str = include_str!("cuda_emu.h");

/// The GPU side of the helper macros (`cuda_prelude.h`); put it at the top of a source so it
/// compiles with NVRTC as well as under emulation.
pub const CUDA_PRELUDE: &str = include_str!("cuda_prelude.h");
