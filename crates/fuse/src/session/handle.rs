//! Typed handles to the values of a session. A handle is a reference-counted token: the session
//! keeps only a weak reference, so it knows at each flush which results the user still holds
//! (outputs) and which nobody can read any more (temporaries a fused kernel may keep on chip).

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::element::Element;

/// What a handle holds: the value's identity and extents. Public only inside the crate's
/// private modules, so users cannot name it.
#[derive(Debug)]
pub struct Token {
    /// The session that made the value.
    pub(crate) session: u64,
    /// The value, unique within its session.
    pub(crate) id: u64,
    /// Its extents: `[]` scalar, `[n]` vector, `[m, n]` matrix.
    pub(crate) dims: Vec<usize>,
}

pub(crate) mod sealed {
    /// Handles are the three types of this module; the token stays private.
    pub trait Sealed {
        /// The handle's token.
        fn token(&self) -> &std::sync::Arc<crate::session::handle::Token>;
    }
}

/// A handle to a value of a [`Session`](crate::Session): [`Matrix`], [`Vector`] or [`Scalar`].
/// Sealed. Read it with [`Session::read`](crate::Session::read).
pub trait Handle<T: Element>: sealed::Sealed {
    /// The extents: `[]` for a scalar, `[n]` for a vector, `[rows, cols]` for a matrix.
    fn dims(&self) -> &[usize] {
        &self.token().dims
    }
}

/// Defines a handle type: the token, clone, debug and the sealed impls.
macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub struct $name<T: Element> {
            token: Arc<Token>,
            _element: PhantomData<fn() -> T>,
        }

        impl<T: Element> $name<T> {
            pub(crate) fn new(token: Arc<Token>) -> Self {
                $name { token, _element: PhantomData }
            }
        }

        // Not derived: a clone shares the token, and needs no bound on T.
        impl<T: Element> Clone for $name<T> {
            fn clone(&self) -> Self {
                $name::new(Arc::clone(&self.token))
            }
        }

        impl<T: Element> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}<{}>(session #{}, v{}, {:?})", stringify!($name),
                    T::PRECISION, self.token.session, self.token.id, self.token.dims)
            }
        }

        impl<T: Element> sealed::Sealed for $name<T> {
            fn token(&self) -> &Arc<Token> {
                &self.token
            }
        }

        impl<T: Element> Handle<T> for $name<T> {}
    };
}

handle! {
    /// A row-major matrix of a session: host data, or the result of a recorded call such as
    /// `sger`. Cloning shares the value; once every clone is dropped, a result not yet computed
    /// becomes a temporary that is never written back.
    ///
    /// ```
    /// use fuse::{Backend, Session};
    ///
    /// let s = Session::<f32>::new(Backend::Reference)?;
    /// let a = s.matrix(2, 2, vec![1.0, 2.0, 3.0, 4.0])?;
    /// let b = s.smadd(&a, &a)?;
    /// assert_eq!((b.rows(), b.cols()), (2, 2));
    /// assert_eq!(s.read(&b)?, [2.0, 4.0, 6.0, 8.0]);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    Matrix
}

handle! {
    /// A vector of a session: host data, or the result of a recorded call such as `sgemv`.
    ///
    /// ```
    /// use fuse::{Backend, Session};
    ///
    /// let s = Session::<f64>::new(Backend::Reference)?;
    /// let x = s.vector(vec![1.0, 2.0, 3.0])?;
    /// let y = s.dscal(2.0, &x)?;
    /// assert_eq!(y.len(), 3);
    /// assert_eq!(s.read(&y)?, [2.0, 4.0, 6.0]);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    Vector
}

handle! {
    /// A scalar of a session: a run-time value, or the result of a reduction such as `sdot`.
    /// Pass it where a call takes a scalar (`a`, `b`), like a literal.
    ///
    /// ```
    /// use fuse::{Backend, Session};
    ///
    /// let s = Session::<f64>::new(Backend::Reference)?;
    /// let x = s.vector(vec![3.0, 4.0])?;
    /// let norm = s.dnrm2(&x)?;
    /// let half = s.dscal(&s.scalar(0.5), &x)?;
    /// assert_eq!(s.read_scalar(&norm)?, 5.0);
    /// assert_eq!(s.read(&half)?, [1.5, 2.0]);
    /// # Ok::<(), fuse::Error>(())
    /// ```
    Scalar
}

impl<T: Element> Matrix<T> {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.token.dims.first().copied().unwrap_or(1)
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.token.dims.get(1).copied().unwrap_or(1)
    }
}

impl<T: Element> Vector<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.token.dims.first().copied().unwrap_or(1)
    }

    /// Always `false`: sessions hold no empty arrays.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A handle of whichever kind a call by library name ([`Session::call`](crate::Session::call))
/// returned: its result's extents decide.
#[derive(Debug)]
pub enum AnyHandle<T: Element> {
    /// A scalar result (a reduction such as `dot`).
    Scalar(Scalar<T>),
    /// A vector result.
    Vector(Vector<T>),
    /// A matrix result.
    Matrix(Matrix<T>),
}

impl<T: Element> AnyHandle<T> {
    /// The handle of `token`'s kind.
    pub(crate) fn new(token: Arc<Token>) -> Self {
        match token.dims.len() {
            0 => AnyHandle::Scalar(Scalar::new(token)),
            1 => AnyHandle::Vector(Vector::new(token)),
            _ => AnyHandle::Matrix(Matrix::new(token)),
        }
    }
}

// Not derived: a clone shares the token, and needs no bound on T.
impl<T: Element> Clone for AnyHandle<T> {
    fn clone(&self) -> Self {
        AnyHandle::new(Arc::clone(sealed::Sealed::token(self)))
    }
}

impl<T: Element> sealed::Sealed for AnyHandle<T> {
    fn token(&self) -> &Arc<Token> {
        match self {
            AnyHandle::Scalar(h) => h.token(),
            AnyHandle::Vector(h) => h.token(),
            AnyHandle::Matrix(h) => h.token(),
        }
    }
}

impl<T: Element> Handle<T> for AnyHandle<T> {}

/// An argument of a call by library name ([`Session::call`](crate::Session::call)): a handle
/// of any kind, or a literal scalar (a compile-time constant, as in [`ScalarArg`]).
pub enum CallArg<'a, T: Element> {
    /// A value of the session.
    Handle(&'a dyn Handle<T>),
    /// A constant.
    Literal(T),
}

/// A scalar argument of a call: a [`Scalar`] handle (a run-time value) or a literal of type
/// `T`, which becomes a compile-time constant of the fused code. Once a flush of the same calls
/// meets another value in a literal's place, that literal is passed as a run-time value instead
/// (one more compile); a value known to change every iteration is best a [`Scalar`]
/// (`session.scalar(v)`) from the start.
///
/// ```
/// use fuse::{Backend, Session};
///
/// let s = Session::<f32>::new(Backend::Reference)?;
/// let x = s.vector(vec![1.0, 2.0])?;
/// let a = s.scalar(3.0);
/// let y = s.saxpy(&a, &x, &x)?; // handle: a run-time value
/// let z = s.saxpy(-1.0, &x, &y)?; // literal: a constant
/// assert_eq!(s.read(&z)?, [3.0, 6.0]);
/// # Ok::<(), fuse::Error>(())
/// ```
#[derive(Debug)]
pub enum ScalarArg<'a, T: Element> {
    /// A scalar value of the session.
    Value(&'a Scalar<T>),
    /// A constant.
    Literal(T),
}

impl<'a, T: Element> From<&'a Scalar<T>> for ScalarArg<'a, T> {
    fn from(s: &'a Scalar<T>) -> Self {
        ScalarArg::Value(s)
    }
}

impl<T: Element> From<T> for ScalarArg<'_, T> {
    fn from(v: T) -> Self {
        ScalarArg::Literal(v)
    }
}
