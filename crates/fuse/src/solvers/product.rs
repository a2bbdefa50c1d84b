//! How a solve multiplies by A: reading all of it, or — where A is exactly symmetric — its
//! upper triangle only, half the bytes of every product.

use super::ops::{In, Ops};
use super::solution::{Options, Symmetry};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Matrix, Vector};

/// The products with A a solve records.
pub(super) enum Product<T: Element> {
    /// `A·x` and `Aᵀ·x` read all of A.
    General(Matrix<T>),
    /// A = Aᵀ: `A·x = U·x + Uᵀ·x − d∘x`, U the upper triangle of A (its diagonal d included),
    /// both triangular products in one pass over U. Subtracting `d∘x` adds at most one
    /// rounding of `|dᵢ·xᵢ|`, within a product's own error bound (`n·ε·Σⱼ |Aᵢⱼ·xⱼ|`).
    Symmetric { a: Matrix<T>, diagonal: Vector<T> },
}

impl<T: Element> Product<T> {
    /// The products with `a`: symmetric where `options` allow it for `a`'s size and the
    /// session finds `a` exactly symmetric on the host (one pass over it), general otherwise.
    pub fn of(ops: &Ops<'_, T>, a: &Matrix<T>, options: &Options<T>) -> Result<Self> {
        let bytes = a
            .rows()
            .saturating_mul(a.cols())
            .saturating_mul(std::mem::size_of::<T>());
        let wanted = match options.symmetry {
            Symmetry::Large => bytes > fuse_cpu::fused::cache_bytes(),
            Symmetry::Always => true,
            Symmetry::Never => false,
        };
        let diagonal = match wanted {
            true => ops.session.symmetric_diagonal(a)?,
            false => None,
        };
        Ok(match diagonal {
            Some(d) => Product::Symmetric {
                a: a.clone(),
                diagonal: ops.session.vector(d)?,
            },
            None => Product::General(a.clone()),
        })
    }

    /// `A·x`.
    pub fn times(&self, ops: &Ops<'_, T>, x: &Vector<T>) -> Result<Vector<T>> {
        match self {
            Product::General(a) => ops.gemv(a, x),
            Product::Symmetric { a, diagonal } => {
                let upper = ops.vector("trmv_upper", &[In::M(a), In::V(x)])?;
                let lower = ops.vector("trmtv_upper", &[In::M(a), In::V(x)])?;
                let both = ops.vector("add", &[In::V(&upper), In::V(&lower)])?;
                let twice = ops.vector("hadamard", &[In::V(diagonal), In::V(x)])?;
                ops.axpy(In::L(-1.0), &twice, &both)
            }
        }
    }

    /// `Aᵀ·x`.
    pub fn transposed_times(&self, ops: &Ops<'_, T>, x: &Vector<T>) -> Result<Vector<T>> {
        match self {
            Product::General(a) => ops.gemtv(a, x),
            Product::Symmetric { .. } => self.times(ops, x),
        }
    }

    /// Whether the products read the upper triangle only.
    #[cfg(test)]
    pub fn is_symmetric(&self) -> bool {
        matches!(self, Product::Symmetric { .. })
    }
}
