//! What every explorer pass needs to know about a program, computed once: each call's
//! block-to-data mapping, who produces and who reads each value, and which calls share arrays.

use std::ops::RangeInclusive;

use crate::explore::mapping::{
    call_mapping, reads_only_along, Axis, CallMapping, Role, StripLayout, ELEMENT_SIDE, MAX_ROW_THREADS,
};
use crate::explore::vocabulary::Vocabulary;
use crate::program::{Arg, CallId, Program, ValueId};
use crate::shape::{Shape, Sizes};

/// A program with concrete sizes and the relations the explorer works on.
#[derive(Debug, Clone)]
pub struct Context<'p> {
    /// The program explored.
    pub program: &'p Program,
    /// Its sizes.
    pub sizes: Sizes,
    /// The mapping of each call.
    pub mappings: Vec<CallMapping>,
    /// For each value, the calls that read it, in call order. Relations between calls are
    /// derived from these on demand: tables of them per call would grow with the square of
    /// the calls wherever many calls share an input.
    pub readers: Vec<Vec<CallId>>,
    /// Whether the target lets a row sum feed later calls of its own kernel
    /// ([`Hardware::row_barrier`](crate::explore::timing::Hardware::row_barrier)).
    pub row_barrier: bool,
    /// The words of the target, for messages.
    pub words: Vocabulary,
}

impl<'p> Context<'p> {
    /// Analyses `program` under `sizes`.
    pub fn new(program: &'p Program, sizes: &Sizes) -> Self {
        let mut readers = vec![Vec::new(); program.values.len()];
        for (c, call) in program.calls.iter().enumerate() {
            for v in call.reads() {
                readers[v].push(c);
            }
        }
        Context {
            program,
            sizes: sizes.clone(),
            mappings: program.calls.iter().map(|c| call_mapping(program, c)).collect(),
            readers,
            row_barrier: false,
            words: Vocabulary::Gpu,
        }
    }

    /// The same context for a target whose blocks can finish row sums for later calls of the
    /// kernel (see [`Context::row_barrier`]).
    pub fn with_row_barrier(mut self, row_barrier: bool) -> Self {
        self.row_barrier = row_barrier;
        self
    }

    /// The same context for a target that speaks `words` (see [`Vocabulary`]).
    pub fn with_words(mut self, words: Vocabulary) -> Self {
        self.words = words;
        self
    }

    /// Whether a GPU block can hold whole rows of call `c`'s matrix in registers
    /// ([`StripLayout::whole_row_width`]), so a row sum is complete while its row is on chip.
    pub fn whole_rows_fit(&self, c: CallId) -> bool {
        let columns = self.mappings[c].space.tiles(&self.sizes).1 * ELEMENT_SIDE;
        StripLayout::whole_row_width(MAX_ROW_THREADS, columns, self.program.precision).is_some()
    }

    /// The calls that read call `c`'s result, in call order.
    pub fn consumers(&self, c: CallId) -> &[CallId] {
        &self.readers[self.program.calls[c].result]
    }

    /// Whether call `d` reads call `c`'s result.
    pub fn consumes(&self, c: CallId, d: CallId) -> bool {
        self.consumers(c).binary_search(&d).is_ok()
    }

    /// The calls sharing an array with call `c` (a dependency or a common input), a call
    /// once for each array it shares.
    pub fn array_neighbours(&self, c: CallId) -> impl Iterator<Item = CallId> + '_ {
        self.arrays(c)
            .flat_map(|v| self.touching(v, 0..=CallId::MAX))
            .filter(move |&d| d != c)
    }

    /// The vectors and matrices call `c` writes or reads, each once.
    pub fn arrays(&self, c: CallId) -> impl Iterator<Item = ValueId> + '_ {
        let call = &self.program.calls[c];
        // The values read, each once, without collecting them: enumeration asks this of every
        // member of every candidate.
        let reads = call.args.iter().enumerate().filter_map(|(k, a)| match a {
            Arg::Value(v) if !call.args[..k].contains(a) => Some(*v),
            _ => None,
        });
        std::iter::once(call.result)
            .chain(reads)
            .filter(|&v| self.program.values[v].shape != Shape::Scalar)
    }

    /// The calls in `span` that produce or read value `v`, in call order.
    pub fn touching(&self, v: ValueId, span: RangeInclusive<CallId>) -> impl Iterator<Item = CallId> + '_ {
        let readers = &self.readers[v];
        let from = readers.partition_point(|d| d < span.start());
        let producer = self.program.values[v].producer.filter(|p| span.contains(p));
        let readers = readers[from..].iter().copied().take_while(move |d| d <= span.end());
        producer.into_iter().chain(readers)
    }

    /// Number of calls.
    pub fn calls(&self) -> usize {
        self.program.calls.len()
    }

    /// The call as written, for messages.
    pub fn text(&self, call: CallId) -> &str {
        &self.program.calls[call].text
    }

    /// The value's name as written in the script.
    pub fn name(&self, value: ValueId) -> &str {
        &self.program.values[value].variable
    }

    /// The role of value `v` in call `c`, which reads or produces it.
    pub fn role(&self, c: CallId, v: ValueId) -> Role {
        let call = &self.program.calls[c];
        if call.result == v {
            return self.mappings[c].result;
        }
        let position = call.args.iter().position(|a| *a == Arg::Value(v));
        position.map_or(Role::Scalar, |k| self.mappings[c].args[k])
    }

    /// Whether `v` is a run-time scalar input, passed as a kernel argument rather than loaded.
    pub fn is_parameter(&self, v: ValueId) -> bool {
        let value = &self.program.values[v];
        value.producer.is_none() && value.shape == Shape::Scalar
    }

    /// Whether `c`'s result exists only after a global barrier (it reduces).
    pub fn is_reduce(&self, c: CallId) -> bool {
        self.program.calls[c].kind.is_reduce()
    }

    /// Whether `consumer` may read reduce `producer`'s result in the kernel that computes it:
    /// the target has a row barrier (or, on a GPU, a block can hold a whole row of the matrix),
    /// `producer` sums along the columns (one number per row, complete once a block has walked
    /// its rows) and `consumer` reads that number only in the rows it is computed for — every
    /// element it reads of it indexed by the row, not also by the column (a unit triangle's
    /// `t[i] + Σ_{j<i} A[i,j]·t[j]` reads other rows' sums). ATAX's `t = A·x; y = Aᵀ·t` is
    /// then one pass over A.
    pub fn reads_finished_row_sums(&self, producer: CallId, consumer: CallId) -> bool {
        let value = self.program.calls[producer].result;
        (self.row_barrier || self.whole_rows_fit(producer))
            && self.mappings[producer].reduced == Some(Axis::Columns)
            && self.mappings[consumer].space == self.mappings[producer].space
            && self.role(consumer, value) == Role::RowVector
            && reads_only_along(&self.program.calls[consumer], value, Axis::Rows)
    }
}
