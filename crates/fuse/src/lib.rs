#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod element;
mod error;
mod script;
mod session;

pub use backend::{Backend, Compiled};
pub use element::{array, Element};
pub use error::{Error, Result};
pub use script::{Inputs, Outputs, Script};
pub use session::{Handle, Matrix, Scalar, ScalarArg, Session, Stats, Vector};

pub use fuse_core::{Bindings, HostArray, HostData, Library, Precision, Program, Sizes};
