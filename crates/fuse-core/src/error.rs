//! Errors of the front end: every problem with user input becomes a [`Diagnostic`] that names
//! the file, the line and column (where known), the offending text and what was expected.

use std::fmt;

/// Where in which file a problem was found. Lines and columns are 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The script or library file, as the user named it.
    pub file: String,
    /// 1-based line, when the position is known.
    pub line: Option<usize>,
    /// 1-based column, when the position is known.
    pub column: Option<usize>,
}

impl Location {
    /// A location naming only a file.
    pub fn file(file: impl Into<String>) -> Self {
        Location {
            file: file.into(),
            line: None,
            column: None,
        }
    }

    /// A location at `line:column` of `file`.
    pub fn at(file: impl Into<String>, line: usize, column: usize) -> Self {
        Location {
            file: file.into(),
            line: Some(line),
            column: Some(column),
        }
    }

    /// The same location moved `offset` characters to the right on its line.
    pub fn shifted(&self, offset: usize) -> Self {
        Location {
            column: self.column.map(|c| c + offset),
            ..self.clone()
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        Ok(())
    }
}

/// A one-line error about user input: `file:line:column: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct Diagnostic {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong and what was expected (one line).
    pub message: String,
}

impl Diagnostic {
    /// A diagnostic at `location`.
    pub fn new(location: Location, message: impl Into<String>) -> Self {
        Diagnostic {
            location,
            message: message.into(),
        }
    }
}

/// Any error of the front end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A problem in a script or library file, with its position.
    #[error(transparent)]
    Input(#[from] Diagnostic),
    /// A problem with a run-time size binding (`--size`), not tied to a file position.
    #[error("{0}")]
    Sizes(String),
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Result of front-end operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
