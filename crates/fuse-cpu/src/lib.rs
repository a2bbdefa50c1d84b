//! CPU backends of fuse: the f64 [`reference`] interpreter, the ground truth every other backend
//! is tested against, and the [`emulate`] backend that runs generated CUDA on host threads.

pub mod emulate;
pub mod reference;
