//! Balanced row blocks: rank `k` of `R` holds rows `k·⌊M/R⌋ + min(k, M mod R)` onwards, the
//! first `M mod R` ranks one row more than the others.

use std::ops::Range;

/// How `rows` rows are split over ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowBlocks {
    rows: usize,
    ranks: usize,
}

impl RowBlocks {
    /// Blocks of `rows` rows over `ranks` ranks; `None` unless every rank gets at least one row.
    pub fn new(rows: usize, ranks: usize) -> Option<RowBlocks> {
        (ranks > 0 && rows >= ranks).then_some(RowBlocks { rows, ranks })
    }

    /// The number of ranks.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The rows of rank `rank`.
    pub fn range(&self, rank: usize) -> Range<usize> {
        let (base, extra) = (self.rows / self.ranks, self.rows % self.ranks);
        let start = rank * base + rank.min(extra);
        start..start + base + usize::from(rank < extra)
    }

    /// How many rows rank `rank` holds.
    pub fn rows(&self, rank: usize) -> usize {
        self.range(rank).len()
    }

    /// The elements each rank holds of an array whose rows have `columns` elements each.
    pub fn counts(&self, columns: usize) -> Vec<usize> {
        (0..self.ranks).map(|r| self.rows(r) * columns).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_rows_in_order_and_differ_by_at_most_one() {
        for rows in 1..40 {
            for ranks in 1..=rows.min(9) {
                let b = RowBlocks::new(rows, ranks).unwrap();
                let ranges: Vec<_> = (0..ranks).map(|k| b.range(k)).collect();
                assert_eq!(ranges[0].start, 0);
                assert_eq!(ranges[ranks - 1].end, rows);
                assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
                let (min, max) = (rows / ranks, rows.div_ceil(ranks));
                assert!(
                    ranges.iter().all(|r| r.len() == min || r.len() == max),
                    "{rows} over {ranks}"
                );
            }
        }
        assert_eq!(RowBlocks::new(3, 4), None);
        assert_eq!(RowBlocks::new(3, 0), None);
    }
}
