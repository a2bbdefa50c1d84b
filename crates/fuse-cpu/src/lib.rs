//! CPU backends of fuse. For now: the f64 [`reference`] interpreter, the ground truth every
//! other backend is tested against.

pub mod reference;
