//! The front end of fuse: the script language, the kernel library's metadata and the
//! data-dependency graph.
//!
//! The pipeline starts here: [`script::parse`] turns a YAML script into a checked [`Program`]
//! (using the [`Library`] for every function's signature), and [`DataGraph::build`] turns the
//! program into the graph the explorer searches.
//!
//! ```
//! use fuse_core::{script, DataGraph, Library};
//!
//! let library = Library::builtin().unwrap();
//! let text = "
//! sizes: {m: 64, n: 32}
//! inputs: {A: [m, n], p: [n], r: [m]}
//! outputs: [q, s]
//! calls:
//!   - q = sgemv(A, p)
//!   - s = sgemtv(A, r)
//! ";
//! let program = script::parse("bicgk.yaml", text, &library).unwrap();
//! assert_eq!(program.calls.len(), 2);
//! let graph = DataGraph::build(&program);
//! assert_eq!(graph.edges().count(), 1); // both calls read A
//! ```

pub mod cache;
pub mod data;
pub mod distribute;
pub mod error;
pub mod explore;
pub mod file;
pub mod formula;
pub mod graph;
pub mod library;
pub mod program;
pub mod reference;
pub mod rewrite;
pub mod script;
pub mod shape;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wording;

pub use data::{ArrayView, BindError, Bindings, Bound, DataView, HostArray, HostData, Views};
pub use error::{Diagnostic, Error, Location, Result};
pub use explore::{explore, Exploration, Kernel, Limits, Plan, TimingTable};
pub use graph::{DataGraph, Edge};
pub use library::{ElementaryFunction, Form, HigherOrderKind, Library};
pub use program::{Arg, Call, CallId, Program, ScalarArg, Value, ValueId};
pub use shape::{Precision, Shape, Sizes};
