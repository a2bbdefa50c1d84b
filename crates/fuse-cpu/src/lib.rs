//! CPU backends of fuse: the f64 [`reference`](mod@reference) interpreter, the ground truth every other backend
//! is tested against, the [`fused`] backend that runs plans fast on the CPU's cores, and the
//! [`emulate`] backend that runs generated CUDA on host threads.

pub mod emulate;
pub mod fused;
pub mod reference;
