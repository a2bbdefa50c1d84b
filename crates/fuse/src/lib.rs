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

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}

    /// Handles and compiled programs cross threads; a session moves between them.
    #[test]
    fn thread_safety() {
        send_sync::<Matrix<f32>>();
        send_sync::<Vector<f64>>();
        send_sync::<Scalar<f64>>();
        send_sync::<Compiled>();
        send_sync::<Error>();
        send::<Session<f32>>();
    }
}
