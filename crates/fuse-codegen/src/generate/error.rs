//! The generator's one error type.

/// Why a plan cannot be turned into CUDA.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GenerateError {
    /// A call uses something the generator does not handle.
    #[error("{file}: cannot generate `{call}`: {what}")]
    Unsupported {
        /// The call as written.
        call: String,
        /// Where it is written.
        file: String,
        /// What is not supported.
        what: String,
    },
    /// The kernel groups do not form a valid plan.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
}
