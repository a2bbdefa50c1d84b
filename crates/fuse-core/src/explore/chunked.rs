//! A vector of numbers that the search's partial plans share in chunks. A partial plan holds a
//! few numbers per call of the program but differs from its parent in only a few calls, so
//! copying it whole for every child costs as much as the program is long (tens of megabytes
//! per thousand partial plans on a long script); sharing unchanged chunks costs a pointer each.

use std::rc::Rc;

/// Entries per chunk.
const CHUNK: usize = 256;

/// A vector of `u32` whose clones share every chunk neither has written since.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChunkedVec {
    chunks: Vec<Rc<[u32; CHUNK]>>,
    len: usize,
}

impl ChunkedVec {
    /// `len` entries of `value`.
    pub(crate) fn filled(len: usize, value: u32) -> Self {
        let chunk = Rc::new([value; CHUNK]);
        ChunkedVec {
            chunks: vec![chunk; len.div_ceil(CHUNK)],
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entry `i` (which must be below the length).
    pub(crate) fn get(&self, i: usize) -> u32 {
        debug_assert!(i < self.len);
        self.chunks[i / CHUNK][i % CHUNK]
    }

    /// Sets entry `i`, copying its chunk first if another vector shares it.
    pub(crate) fn set(&mut self, i: usize, value: u32) {
        debug_assert!(i < self.len);
        Rc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK] = value;
    }

    pub(crate) fn push(&mut self, value: u32) {
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.push(Rc::new([0; CHUNK]));
        }
        self.len += 1;
        self.set(self.len - 1, value);
    }

    /// Removes the last entry.
    pub(crate) fn pop(&mut self) {
        self.len -= 1;
        if self.len.is_multiple_of(CHUNK) {
            self.chunks.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_keep_their_own_values_across_chunks() {
        let mut a = ChunkedVec::filled(CHUNK + 3, 7);
        let b = a.clone();
        a.set(CHUNK + 1, 1);
        a.set(0, 2);
        assert_eq!((a.get(0), a.get(CHUNK + 1), a.get(CHUNK + 2)), (2, 1, 7));
        assert_eq!((b.get(0), b.get(CHUNK + 1)), (7, 7), "the clone is unchanged");
        let mut c = ChunkedVec::default();
        for k in 0..2 * CHUNK as u32 + 1 {
            c.push(k);
        }
        let d = c.clone();
        c.pop();
        c.pop();
        c.push(99);
        assert_eq!((c.len(), c.get(2 * CHUNK - 1), c.get(3)), (2 * CHUNK, 99, 3));
        assert_eq!(
            (d.len(), d.get(2 * CHUNK - 1), d.get(2 * CHUNK)),
            (2 * CHUNK + 1, 2 * CHUNK as u32 - 1, 2 * CHUNK as u32)
        );
    }
}
