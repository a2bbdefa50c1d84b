//! Distribution over ranks: a program split into row blocks, the local scripts each rank runs
//! and the collectives between them.
//!
//! Every matrix is split into balanced blocks of rows, one per rank (the *split* size symbol is
//! the matrices' row symbol). Each value then gets a [`Distribution`], inferred call by call from
//! the library formulas (`calls.rs`): a result indexed by split rows is [`Distribution::Rows`]; a
//! sum over split rows (`Aᵀ·r`, a dot of row blocks, an nrm2) is a rank's
//! [`Distribution::Partial`] share; anything else is [`Distribution::Replicated`]. Each use of a
//! value asks for one [`Local`] form of it, and where that differs from how the value lies, a
//! [`Conversion`] makes it: a collective (all-reduce, reduce-scatter, all-gather, gather) or a
//! local step (a slice of a replicated vector).
//!
//! A conversion is a barrier between ranks, so the calls are grouped into [`Segment`]s: a call
//! runs in the first segment after every local form it reads exists. Each segment is a script
//! of its own, over the local row count (a new size symbol, `m_local`), parsed and checked like
//! any script, then explored, fused and run by whatever local backend a rank has. BiCGK is one
//! segment (A's rows read once) followed by a gather of `q` and one reduction of `s`.

mod blocks;
mod calls;
mod links;
mod steps;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use crate::error::Result;
use crate::formula::ReduceOp;
use crate::library::Library;
use crate::program::{CallId, Program, ValueId};
use crate::shape::{Shape, Sizes};

pub use blocks::RowBlocks;
pub use links::Links;

/// How a value's elements lie on the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Split by rows: each rank holds its row block (of a matrix, or of a vector indexed by rows).
    Rows,
    /// Every rank holds all of it (a scalar, or a vector indexed by columns).
    Replicated,
    /// Each rank holds its share of a reduction over the rows; the value is the shares
    /// combined by the operation (a sum, or the Euclidean norm of the ranks' norms).
    Partial(ReduceOp),
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Distribution::Rows => f.write_str("row blocks"),
            Distribution::Replicated => f.write_str("replicated"),
            Distribution::Partial(ReduceOp::Sum) => f.write_str("partial sums"),
            Distribution::Partial(ReduceOp::Norm2) => f.write_str("partial norms"),
        }
    }
}

/// The form in which a rank holds a value for one use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Local {
    /// This rank's row block.
    Rows,
    /// All of it.
    Whole,
    /// All of it on rank 0, zeros on the others: a term that the ranks' partial results must
    /// add once (`+ b·y` of a distributed `Aᵀ·x`), or an output to write.
    RootOnly,
    /// This rank's share of a reduction over rows.
    Partial,
}

impl Local {
    /// The form in which a value of distribution `d` is produced.
    pub fn natural(d: Distribution) -> Local {
        match d {
            Distribution::Rows => Local::Rows,
            Distribution::Replicated => Local::Whole,
            Distribution::Partial(_) => Local::Partial,
        }
    }

    /// The suffix of a value's name in local scripts when it is not held in its natural form.
    fn suffix(self) -> &'static str {
        match self {
            Local::Rows => "_rows",
            Local::Whole => "_all",
            Local::RootOnly => "_root",
            Local::Partial => "_part",
        }
    }
}

/// A value of the program in one local form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalValue {
    /// The value of the distributed program.
    pub value: ValueId,
    /// How each rank holds it.
    pub local: Local,
}

/// How a local form of a value is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// An input read from its source: each rank its rows (`Rows`), rank 0 all of it and
    /// broadcast (`Whole`), or rank 0 alone (`RootOnly`).
    Read,
    /// An input each rank already holds in this form (a session's value), without communication.
    Given,
    /// Row blocks → whole on every rank.
    AllGather,
    /// Row blocks → whole on rank 0.
    Gather,
    /// Partial sums → their sum on every rank.
    AllReduce,
    /// Partial sums → their sum on rank 0.
    Reduce,
    /// Partial sums → each rank its row block of the sum.
    ReduceScatter,
    /// Partial norms → the norm of all of them on every rank (each rank's norm gathered).
    AllNorm,
    /// Whole → this rank's row block, without communication.
    Slice,
    /// Whole → kept on rank 0 only, without communication.
    KeepOnRoot,
}

impl Transfer {
    /// Whether ranks exchange data.
    pub fn communicates(self) -> bool {
        !matches!(self, Transfer::Slice | Transfer::KeepOnRoot | Transfer::Given)
    }

    fn name(self) -> &'static str {
        match self {
            Transfer::Read => "read",
            Transfer::Given => "held by each rank",
            Transfer::AllGather => "all-gather",
            Transfer::Gather => "gather to rank 0",
            Transfer::AllReduce => "all-reduce (sum)",
            Transfer::Reduce => "reduce (sum) to rank 0",
            Transfer::ReduceScatter => "reduce-scatter (sum)",
            Transfer::AllNorm => "all-gather of norms, combined",
            Transfer::Slice => "slice of the rows (local)",
            Transfer::KeepOnRoot => "kept on rank 0 (local)",
        }
    }
}

/// One local form made from another (or read, for an input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversion {
    /// What it makes.
    pub to: LocalValue,
    /// The form it starts from (`None` for a read).
    pub from: Option<Local>,
    /// How.
    pub transfer: Transfer,
}

/// Calls that run together between two conversions: a local script of their own.
#[derive(Debug, Clone)]
pub struct Segment {
    /// The local script (over the local row symbol), as text.
    pub script: String,
    /// It, parsed and checked.
    pub program: Program,
    /// The local forms it reads, in the order of its program's inputs.
    pub inputs: Vec<LocalValue>,
    /// The local forms it returns, in the order of its program's outputs.
    pub outputs: Vec<LocalValue>,
}

impl Segment {
    /// The sizes of its script: those of `local` (a rank's [`Distributed::local_sizes`]) that
    /// it uses.
    pub fn sizes(&self, local: &Sizes) -> Sizes {
        Sizes::new((self.program.sizes.iter()).filter_map(|(s, _)| Some((s.to_string(), local.get(s)?))))
    }

    /// It as the rank of sizes `local` runs it: its script and program at those sizes.
    fn at(&self, local: &Sizes) -> Segment {
        let sizes = self.sizes(local);
        let line = steps::sizes_line(sizes.iter());
        let script: String = (self.script.lines())
            .map(|l| match l.starts_with("sizes: ") {
                true => format!("{line}\n"),
                false => format!("{l}\n"),
            })
            .collect();
        let mut program = self.program.clone();
        program.sizes = sizes;
        Segment {
            script,
            program,
            ..self.clone()
        }
    }
}

/// One step of a distributed run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Make a local form (all ranks take part where it communicates).
    Convert(Conversion),
    /// Run a segment on every rank.
    Run(usize),
}

/// A program split over ranks: what each rank runs, and what moves between them.
#[derive(Debug, Clone)]
pub struct Distributed {
    /// The whole program.
    pub program: Program,
    /// The size symbol split into row blocks.
    pub split: String,
    /// The size symbol of a rank's row count in the local scripts.
    pub local_symbol: String,
    /// The distribution of each value, by [`ValueId`].
    pub distributions: Vec<Distribution>,
    /// The segments, in run order.
    pub segments: Vec<Segment>,
    /// Reads, segments and conversions, in run order.
    pub steps: Vec<Step>,
    /// The form in which each output of the program is left, in output order: whole on rank 0
    /// (`RootOnly`, or `Whole` on every rank) after [`distribute`]; row blocks or whole on
    /// every rank after [`distribute_held`].
    pub results: Vec<LocalValue>,
    /// The local form each call reads each argument in (`None` for a literal).
    pub needs: Vec<Vec<Option<Local>>>,
    names: BTreeMap<LocalValue, String>,
}

/// Splits `program` over ranks by the row blocks of its matrices, for a run whose inputs are
/// read from files (each rank its rows) and whose outputs are gathered on rank 0; local scripts
/// are checked against `library`. An error names the call that cannot be distributed and why.
pub fn distribute(program: &Program, library: &Library) -> Result<Distributed> {
    steps::build(program, library, None)
}

/// [`distribute`] for inputs the ranks already hold as `held` says (one distribution per
/// input, in the program's input order: `Rows` or `Replicated`), as a session's values are;
/// results stay where they lie (row blocks as row blocks, partial sums reduced on every rank).
pub fn distribute_held(program: &Program, library: &Library, held: &[Distribution]) -> Result<Distributed> {
    steps::build(program, library, Some(held))
}

impl Distributed {
    /// The name of a local form in the segments' scripts.
    pub fn name(&self, value: LocalValue) -> &str {
        &self.names[&value]
    }

    /// The row blocks of `ranks` ranks at `sizes`, or why the rows cannot be split that many ways.
    pub fn blocks(&self, sizes: &Sizes, ranks: usize) -> Result<RowBlocks, String> {
        let rows = sizes
            .get(&self.split)
            .ok_or_else(|| format!("size `{}` is not bound", self.split))?;
        RowBlocks::new(rows, ranks).ok_or_else(|| {
            format!(
                "cannot split {rows} rows (`{}`) over {ranks} ranks: each rank needs at least one row",
                self.split
            )
        })
    }

    /// The sizes of rank `rank`'s local scripts: the whole sizes plus its row count.
    pub fn local_sizes(&self, sizes: &Sizes, blocks: &RowBlocks, rank: usize) -> Sizes {
        let mut local = sizes.clone();
        local.set(&self.local_symbol, blocks.rows(rank));
        local
    }

    /// The plan as rank `rank` of those `blocks` run at `sizes`: its local scripts with that
    /// rank's sizes (its rows of the split symbol), not the whole problem's.
    pub fn on_rank(&self, sizes: &Sizes, blocks: &RowBlocks, rank: usize) -> Distributed {
        let local = self.local_sizes(sizes, blocks, rank);
        Distributed {
            segments: self.segments.iter().map(|s| s.at(&local)).collect(),
            ..self.clone()
        }
    }

    /// The shape of a local form, in the local scripts' symbols.
    pub fn local_shape(&self, value: LocalValue) -> Shape {
        let shape = &self.program.values[value.value].shape;
        match (value.local, shape) {
            (Local::Rows, Shape::Vector(_)) => Shape::Vector(self.local_symbol.clone()),
            (Local::Rows, Shape::Matrix(_, n)) => Shape::Matrix(self.local_symbol.clone(), n.clone()),
            _ => shape.clone(),
        }
    }

    /// The elements a conversion brings to one rank (the busiest), at `sizes` over `ranks`:
    /// what its time is made of, since the ranks receive at once.
    pub fn elements_received(&self, conversion: &Conversion, sizes: &Sizes, ranks: usize) -> u64 {
        let shape = &self.program.values[conversion.to.value].shape;
        let len: u64 = shape
            .extents(sizes)
            .map(|e| e.iter().product::<usize>() as u64)
            .unwrap_or(0);
        let r = ranks.max(1) as u64;
        let others_share = len * (r - 1) / r;
        match conversion.transfer {
            Transfer::Slice | Transfer::KeepOnRoot | Transfer::Given => 0,
            Transfer::Read if conversion.to.local != Local::Whole => 0,
            // A broadcast brings all of it to every rank.
            Transfer::Read => len * u64::from(r > 1),
            Transfer::AllGather | Transfer::Gather | Transfer::Reduce | Transfer::ReduceScatter => others_share,
            // A ring: reduce-scatter, then all-gather.
            Transfer::AllReduce => 2 * others_share,
            Transfer::AllNorm => len * (r - 1),
        }
    }

    /// The calls that read `form`, in program order.
    pub fn readers(&self, form: LocalValue) -> Vec<CallId> {
        (0..self.program.calls.len())
            .filter(|&c| {
                let call = &self.program.calls[c];
                (call.args.iter().zip(&self.needs[c])).any(|(a, n)| {
                    let mut values = Vec::new();
                    a.collect_reads(&mut values);
                    values.contains(&form.value) && *n == Some(form.local)
                })
            })
            .collect()
    }
}

impl fmt::Display for Distributed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} over ranks: rows `{}` in one block per rank (`{}` rows on a rank)",
            self.program.name, self.split, self.local_symbol
        )?;
        for (id, value) in self.program.values.iter().enumerate() {
            writeln!(
                f,
                "  {:<8} {:<10} {}",
                value.name,
                value.shape.to_string(),
                self.distributions[id]
            )?;
        }
        for (n, step) in self.steps.iter().enumerate() {
            match step {
                Step::Convert(c) => {
                    let name = &self.program.values[c.to.value].name;
                    writeln!(f, "{}. {} `{name}` → `{}`", n + 1, c.transfer.name(), self.name(c.to))?;
                }
                Step::Run(k) => {
                    writeln!(f, "{}. run part {} on every rank:", n + 1, k + 1)?;
                    for line in self.segments[*k].script.lines() {
                        writeln!(f, "     {line}")?;
                    }
                }
            }
        }
        Ok(())
    }
}
