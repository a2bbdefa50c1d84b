//! Where a kernel's operands live while it runs: windows on arrays in memory, each thread's
//! share of the arrays a kernel writes, and per-thread tile buffers for values that never
//! reach memory.
//!
//! Every window is addressed in the array's own (global) indices, whatever part of the array
//! it holds: a vector window holds elements from `col0`, a matrix window rows from `row0` and
//! columns from `col0`, `stride` apart. So one formula evaluation reads an input matrix, this
//! thread's rows of a matrix it writes, or a tile buffer, the same way.

use super::loops::Lines;

/// A read-only window on an array.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View<'a, T> {
    data: &'a [T],
    row0: usize,
    col0: usize,
    stride: usize,
}

impl<'a, T: Copy> View<'a, T> {
    /// A whole vector.
    pub(crate) fn vector(data: &'a [T]) -> Self {
        View {
            data,
            row0: 0,
            col0: 0,
            stride: 0,
        }
    }

    /// A whole row-major matrix of `cols` columns.
    pub(crate) fn matrix(data: &'a [T], cols: usize) -> Self {
        View {
            data,
            row0: 0,
            col0: 0,
            stride: cols,
        }
    }

    /// Vector elements `at .. at + len`.
    pub(crate) fn run(&self, at: usize, len: usize) -> &'a [T] {
        let start = at - self.col0;
        &self.data[start..start + len]
    }

    /// Vector element `at`.
    pub(crate) fn item(&self, at: usize) -> T {
        self.data[at - self.col0]
    }

    /// Matrix elements `(row, col .. col + len)`.
    pub(crate) fn row(&self, row: usize, col: usize, len: usize) -> &'a [T] {
        let start = (row - self.row0) * self.stride + (col - self.col0);
        &self.data[start..start + len]
    }

    /// Columns `col .. col + len` of the rows from `row` on.
    pub(crate) fn lines(&self, row: usize, col: usize, len: usize) -> Lines<'a, T> {
        let start = (row - self.row0) * self.stride + (col - self.col0);
        Lines {
            data: &self.data[start..],
            stride: self.stride,
            len,
        }
    }
}

/// A writable window, addressed like [`View`].
#[derive(Debug)]
pub(crate) struct ViewMut<'a, T> {
    data: &'a mut [T],
    row0: usize,
    col0: usize,
    stride: usize,
}

impl<'a, T: Copy> ViewMut<'a, T> {
    /// Elements `start ..` of a vector, held in `data`.
    pub(crate) fn vector(data: &'a mut [T], start: usize) -> Self {
        ViewMut {
            data,
            row0: 0,
            col0: start,
            stride: 0,
        }
    }

    /// Rows `row0 ..` of a matrix of `cols` columns, held in `data`.
    pub(crate) fn rows(data: &'a mut [T], row0: usize, cols: usize) -> Self {
        ViewMut {
            data,
            row0,
            col0: 0,
            stride: cols,
        }
    }

    /// The same window, read-only.
    pub(crate) fn view(&self) -> View<'_, T> {
        View {
            data: &*self.data,
            row0: self.row0,
            col0: self.col0,
            stride: self.stride,
        }
    }

    /// Vector elements `at .. at + len`.
    pub(crate) fn run_mut(&mut self, at: usize, len: usize) -> &mut [T] {
        let start = at - self.col0;
        &mut self.data[start..start + len]
    }

    /// Matrix elements `(row, col .. col + len)`.
    pub(crate) fn row_mut(&mut self, row: usize, col: usize, len: usize) -> &mut [T] {
        let start = (row - self.row0) * self.stride + (col - self.col0);
        &mut self.data[start..start + len]
    }
}

/// A value computed by the running kernel, as one thread holds it.
#[derive(Debug)]
pub(crate) enum Local<'a, T> {
    /// The thread's rows (or elements) of an array in memory.
    Part(ViewMut<'a, T>),
    /// A tile buffer: the value exists only tile by tile, in cache.
    Chip {
        /// The tile's elements.
        data: Vec<T>,
        /// First row of the current tile.
        row0: usize,
        /// First column (vector element) of the current tile.
        col0: usize,
        /// Elements per tile row.
        stride: usize,
    },
    /// Handed to the call writing it.
    Lent,
}

impl<T: Copy> Local<'_, T> {
    /// A tile buffer of `len` elements with tile rows `stride` apart.
    pub(crate) fn chip(len: usize, stride: usize, zero: T) -> Self {
        Local::Chip {
            data: vec![zero; len],
            row0: 0,
            col0: 0,
            stride,
        }
    }

    /// Moves a tile buffer to the tile at (`row`, `col`); windows on memory stay.
    pub(crate) fn place(&mut self, row: usize, col: usize) {
        if let Local::Chip { row0, col0, .. } = self {
            (*row0, *col0) = (row, col);
        }
    }

    /// A read-only window on it.
    pub(crate) fn view(&self) -> View<'_, T> {
        match self {
            Local::Part(v) => v.view(),
            Local::Chip {
                data,
                row0,
                col0,
                stride,
            } => View {
                data,
                row0: *row0,
                col0: *col0,
                stride: *stride,
            },
            Local::Lent => unreachable!("a call never reads the value it is writing (values are SSA)"),
        }
    }

    /// A writable window on it.
    pub(crate) fn view_mut(&mut self) -> ViewMut<'_, T> {
        match self {
            Local::Part(v) => ViewMut {
                data: &mut *v.data,
                row0: v.row0,
                col0: v.col0,
                stride: v.stride,
            },
            Local::Chip {
                data,
                row0,
                col0,
                stride,
            } => ViewMut {
                data,
                row0: *row0,
                col0: *col0,
                stride: *stride,
            },
            Local::Lent => unreachable!("a value is lent to one call at a time"),
        }
    }
}

/// Splits `data` — `rows` rows of `row_len` elements — into consecutive pieces of the rows in
/// `bounds` (ascending, adjacent), so each thread owns its piece.
pub(crate) fn split_rows<'a, T>(data: &'a mut [T], bounds: &[(usize, usize)], row_len: usize) -> Vec<&'a mut [T]> {
    let mut rest = data;
    let mut pieces = Vec::with_capacity(bounds.len());
    for &(start, end) in bounds {
        let (piece, tail) = std::mem::take(&mut rest).split_at_mut((end - start) * row_len);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_use_global_indices() {
        let data: Vec<i32> = (0..12).collect();
        let m = View::matrix(&data, 4);
        assert_eq!(m.row(2, 1, 3), [9, 10, 11]);
        let mut rows: Vec<i32> = data[4..].to_vec();
        let part = ViewMut::rows(&mut rows, 1, 4);
        assert_eq!(part.view().row(2, 0, 2), [8, 9]);
        let v = View::vector(&data);
        assert_eq!((v.item(5), v.run(3, 2)), (5, &[3, 4][..]));
    }

    #[test]
    fn rows_split_into_owned_pieces() {
        let mut data: Vec<i32> = (0..10).collect();
        let pieces = split_rows(&mut data, &[(0, 2), (2, 5)], 2);
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0], [0, 1, 2, 3]);
        assert_eq!(pieces[1], [4, 5, 6, 7, 8, 9]);
    }
}
