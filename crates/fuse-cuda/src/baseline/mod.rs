//! The baseline: a program written as a cuBLAS user would write it, call by call.
//!
//! [`Baseline::new`] translates each call into cuBLAS routines on row-major data — `gemv` with
//! the transpose flag swapped (a row-major m×n matrix is a column-major n×m one), `ger` with its
//! vectors swapped, `geam` for `madd`, `copy`/`scal`/`axpy`/`dot`/`asum`/`nrm2` for BLAS-1 —
//! including the copies that in-place BLAS forces: `saxpy` overwrites its `y`, so
//! `z = saxpy(a, x, w)` becomes a copy of `w` into `z` and then `saxpy` on `z`, unless `w` is a
//! temporary no later call reads (or the script itself overwrites it, as in `x = sscal(a, x)`),
//! in which case the call runs in place as a user would. A scaling read by one `axpy` only is
//! folded into that `axpy`'s coefficient (`z = w − α·v` is `copy w→z; axpy(−α, v, z)`), as a
//! user writes it. The 11 sequences of the paper come out as the paper's cuBLAS versions.
//! Scalar calls (`alpha = sdiv(rho, sigma)`, stored or inlined as an argument) run on the host
//! as a cuBLAS user runs them: the device scalars they read are copied back (the stream waits),
//! the formula is evaluated in the script's precision, and the result is copied up for the
//! calls that read it ([`BlasOp::HostScalar`]).
//!
//! The translation is pure data ([`BlasOp`] at concrete sizes), tested on the CPU against the
//! reference interpreter with the exact cuBLAS argument conventions; [`cublas`] runs it on a GPU.

pub mod cublas;
#[cfg(test)]
mod host;

use std::collections::BTreeMap;
use std::fmt;

use std::sync::Arc;

use fuse_core::{Arg, CallId, HigherOrderKind, Precision, Program, Shape, Sizes, ValueId};

use crate::error::CudaError;

/// A scalar argument of a cuBLAS call. All are passed by device pointer (pointer mode device),
/// so that no call waits for the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarArg {
    /// `factor × input` (or `factor` alone): known before the run, uploaded with the inputs.
    Host {
        /// A literal factor.
        factor: f64,
        /// A run-time scalar input it multiplies, if any.
        input: Option<ValueId>,
    },
    /// A scalar in a value's buffer: a reduction's result, or a stored scalar call's result
    /// copied up from the host.
    Device(ValueId),
    /// An inlined scalar call's result, computed on the host during the run and copied up, by
    /// its slot among the baseline's computed scalars.
    Computed(usize),
}

impl ScalarArg {
    /// The constant `value`.
    pub fn constant(value: f64) -> Self {
        ScalarArg::Host {
            factor: value,
            input: None,
        }
    }
}

/// cuBLAS's transpose flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trans {
    /// `CUBLAS_OP_N`.
    N,
    /// `CUBLAS_OP_T`.
    T,
}

/// One cuBLAS call (or device-to-device copy), with cuBLAS's own column-major arguments.
/// Buffers are named by the value that owns them.
#[derive(Debug, Clone, PartialEq)]
pub enum BlasOp {
    /// `cudaMemcpy` device to device of `len` elements.
    Copy {
        /// Elements.
        len: usize,
        /// From.
        src: ValueId,
        /// To.
        dst: ValueId,
    },
    /// `cudaMemset` of `len` elements to +0 (the matrix an outer product's `ger` adds to).
    Zero {
        /// Elements.
        len: usize,
        /// The buffer.
        dst: ValueId,
    },
    /// `x ← alpha·x`.
    Scal {
        /// Elements.
        n: usize,
        /// Factor.
        alpha: ScalarArg,
        /// Vector.
        x: ValueId,
    },
    /// `y ← alpha·x + y`.
    Axpy {
        /// Elements.
        n: usize,
        /// Factor.
        alpha: ScalarArg,
        /// Read.
        x: ValueId,
        /// Read and written.
        y: ValueId,
    },
    /// `result ← xᵀy`.
    Dot {
        /// Elements.
        n: usize,
        /// First vector.
        x: ValueId,
        /// Second vector.
        y: ValueId,
        /// One-element buffer.
        result: ValueId,
    },
    /// `result ← Σ|xᵢ|`.
    Asum {
        /// Elements.
        n: usize,
        /// Vector.
        x: ValueId,
        /// One-element buffer.
        result: ValueId,
    },
    /// `result ← ‖x‖₂`.
    Nrm2 {
        /// Elements.
        n: usize,
        /// Vector.
        x: ValueId,
        /// One-element buffer.
        result: ValueId,
    },
    /// `y ← alpha·op(M)·x + beta·y`, M column-major m×n with leading dimension `lda`.
    Gemv {
        /// Transpose flag.
        trans: Trans,
        /// Rows of M.
        m: usize,
        /// Columns of M.
        n: usize,
        /// Leading dimension of M.
        lda: usize,
        /// Factor of the product.
        alpha: ScalarArg,
        /// The matrix.
        a: ValueId,
        /// The vector multiplied.
        x: ValueId,
        /// Factor of `y` (`y` is not read when it is the constant 0).
        beta: ScalarArg,
        /// The result.
        y: ValueId,
    },
    /// `M ← alpha·x·yᵀ + M`, M column-major m×n.
    Ger {
        /// Rows of M (length of x).
        m: usize,
        /// Columns of M (length of y).
        n: usize,
        /// Leading dimension of M.
        lda: usize,
        /// Factor.
        alpha: ScalarArg,
        /// Column vector.
        x: ValueId,
        /// Row vector.
        y: ValueId,
        /// The matrix, updated in place.
        a: ValueId,
    },
    /// `x ← op(T)·x`, T the `upper` (else lower) triangle of column-major n×n `a`, with ones
    /// on its diagonal where `unit`.
    Trmv {
        /// Rows and columns.
        n: usize,
        /// Which triangle, in cuBLAS's column-major terms.
        upper: bool,
        /// Transpose flag.
        trans: Trans,
        /// Whether the diagonal is taken as ones (not read).
        unit: bool,
        /// The matrix.
        a: ValueId,
        /// The vector, overwritten by the product.
        x: ValueId,
    },
    /// `C ← alpha·A + beta·B`, all column-major m×n with leading dimension `ld`.
    Geam {
        /// Rows.
        m: usize,
        /// Columns.
        n: usize,
        /// Leading dimension of all three.
        ld: usize,
        /// Factor of A.
        alpha: ScalarArg,
        /// First matrix.
        a: ValueId,
        /// Factor of B.
        beta: ScalarArg,
        /// Second matrix.
        b: ValueId,
        /// The result.
        c: ValueId,
    },
    /// `c ← x∘y` element by element: cuBLAS's `dgmm`, x a 1×n matrix times diag(y).
    Dgmm {
        /// Elements.
        n: usize,
        /// The vector scaled.
        x: ValueId,
        /// The diagonal.
        y: ValueId,
        /// The result.
        c: ValueId,
    },
    /// `into ← value` on the host: the scalars `value` reads that only the device has are
    /// copied back (the stream waits), `value` is evaluated in the precision, and the result
    /// is copied into `into` (a [`ScalarArg::Device`] or [`ScalarArg::Computed`]).
    HostScalar {
        /// A scalar call (`Arg::Scalar`) over literals and scalar values.
        value: Arg,
        /// Where the result goes.
        into: ScalarArg,
    },
}

/// A program as cuBLAS calls at concrete sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The calls, in order.
    pub ops: Vec<BlasOp>,
    /// Every buffer, by its owning value, with its element count.
    pub buffers: BTreeMap<ValueId, usize>,
    /// For every value that lives in a buffer, the owner of that buffer.
    pub storage: BTreeMap<ValueId, ValueId>,
    /// Element precision.
    pub precision: Precision,
    /// The sizes it was translated at.
    pub sizes: Sizes,
    /// How many [`ScalarArg::Computed`] slots the calls use.
    pub computed: usize,
}

impl Baseline {
    /// Translates `program` at `sizes` (see the module docs).
    pub fn new(program: &Program, sizes: &Sizes) -> Result<Baseline, CudaError> {
        Translator::new(program, sizes).run()
    }

    /// Bytes the calls move through device memory (each call reads its operands and writes its
    /// results once; `gemv` reads `y` only when `beta` is not the constant 0; a host scalar
    /// reads the device scalars it needs and writes its result).
    pub fn traffic_bytes(&self, program: &Program) -> u64 {
        let elements: usize = self.ops.iter().map(|op| op_traffic(op, program)).sum();
        elements as u64 * self.precision.bytes()
    }

    /// The calls in one line, e.g. `copy w→z; axpy(-1·alpha, v, z); dot(z, u)→r`.
    pub fn describe(&self, program: &Program) -> String {
        let ops: Vec<String> = self.ops.iter().map(|op| describe_op(op, program)).collect();
        ops.join("; ")
    }
}

fn op_traffic(op: &BlasOp, program: &Program) -> usize {
    match *op {
        BlasOp::HostScalar { ref value, .. } => device_reads(value, program).len() + 1,
        BlasOp::Copy { len, .. } => 2 * len,
        BlasOp::Zero { len, .. } => len,
        BlasOp::Scal { n, .. } => 2 * n,
        BlasOp::Axpy { n, .. } => 3 * n,
        BlasOp::Dot { n, .. } => 2 * n + 1,
        BlasOp::Asum { n, .. } | BlasOp::Nrm2 { n, .. } => n + 1,
        BlasOp::Gemv { trans, m, n, beta, .. } => {
            let (inner, outer) = if trans == Trans::N { (n, m) } else { (m, n) };
            let reads_y = beta != ScalarArg::constant(0.0);
            m * n + inner + outer * (1 + reads_y as usize)
        }
        BlasOp::Ger { m, n, .. } => 2 * m * n + m + n,
        BlasOp::Geam { m, n, .. } => 3 * m * n,
        BlasOp::Dgmm { n, .. } => 3 * n,
        BlasOp::Trmv { n, .. } => n * (n + 1) / 2 + 2 * n,
    }
}

fn describe_op(op: &BlasOp, program: &Program) -> String {
    let name = |v: ValueId| program.values[v].name.clone();
    let scalar = |s: &ScalarArg| match *s {
        ScalarArg::Host { factor, input: None } => format!("{factor}"),
        ScalarArg::Host { factor, input: Some(v) } => match factor {
            1.0 => name(v),
            _ => format!("{factor}·{}", name(v)),
        },
        ScalarArg::Device(v) => format!("*{}", name(v)),
        ScalarArg::Computed(k) => format!("${k}"),
    };
    let t = |t: Trans| if t == Trans::N { "N" } else { "T" };
    match op {
        BlasOp::Copy { src, dst, .. } => format!("copy {}→{}", name(*src), name(*dst)),
        BlasOp::HostScalar { value, into } => format!("host {} = {}", scalar(into), value.text(program)),
        BlasOp::Dgmm { x, y, c, .. } => format!("dgmm({}, {})→{}", name(*x), name(*y), name(*c)),
        BlasOp::Zero { dst, .. } => format!("zero {}", name(*dst)),
        BlasOp::Scal { alpha, x, .. } => format!("scal({}, {})", scalar(alpha), name(*x)),
        BlasOp::Axpy { alpha, x, y, .. } => format!("axpy({}, {}, {})", scalar(alpha), name(*x), name(*y)),
        BlasOp::Dot { x, y, result, .. } => format!("dot({}, {})→{}", name(*x), name(*y), name(*result)),
        BlasOp::Asum { x, result, .. } => format!("asum({})→{}", name(*x), name(*result)),
        BlasOp::Nrm2 { x, result, .. } => format!("nrm2({})→{}", name(*x), name(*result)),
        BlasOp::Gemv {
            trans,
            alpha,
            a,
            x,
            beta,
            y,
            ..
        } => format!(
            "gemv_{}({}, {}, {}, {}, {})",
            t(*trans),
            scalar(alpha),
            name(*a),
            name(*x),
            scalar(beta),
            name(*y)
        ),
        BlasOp::Ger { alpha, x, y, a, .. } => {
            format!("ger({}, {}, {}, {})", scalar(alpha), name(*x), name(*y), name(*a))
        }
        BlasOp::Trmv {
            upper,
            trans,
            unit,
            a,
            x,
            ..
        } => format!(
            "trmv_{}{}{}({}, {})",
            if *upper { "U" } else { "L" },
            t(*trans),
            if *unit { "U" } else { "N" },
            name(*a),
            name(*x)
        ),
        BlasOp::Geam {
            alpha, a, beta, b, c, ..
        } => format!(
            "geam({}, {}, {}, {})→{}",
            scalar(alpha),
            name(*a),
            scalar(beta),
            name(*b),
            name(*c)
        ),
    }
}

impl fmt::Display for Trans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if *self == Trans::N { "N" } else { "T" })
    }
}

/// A scaling folded into the `axpy` that reads it: `t = scal(factor, source)`.
#[derive(Debug, Clone, Copy)]
struct Fold {
    factor: ScalarArg,
    source: ValueId,
}

/// The state of one translation.
struct Translator<'p> {
    program: &'p Program,
    sizes: &'p Sizes,
    folds: BTreeMap<ValueId, Fold>,
    /// The last call reading each value (after folding).
    last_reader: BTreeMap<ValueId, CallId>,
    /// The slot of each inlined scalar call computed so far: the rewrite stage inlines
    /// `alpha = sdiv(rho, sigma)` into every reader, and a user computes it once.
    computed: Vec<(Arg, ScalarArg)>,
    out: Baseline,
}

impl<'p> Translator<'p> {
    fn new(program: &'p Program, sizes: &'p Sizes) -> Self {
        let out = Baseline {
            ops: Vec::new(),
            buffers: BTreeMap::new(),
            storage: BTreeMap::new(),
            precision: program.precision,
            sizes: sizes.clone(),
            computed: 0,
        };
        let mut t = Translator {
            program,
            sizes,
            folds: BTreeMap::new(),
            last_reader: BTreeMap::new(),
            computed: Vec::new(),
            out,
        };
        // Array inputs have buffers; scalar inputs travel with the host scalars.
        for &v in &program.inputs {
            if program.values[v].shape != Shape::Scalar {
                t.fresh(v);
            }
        }
        t.find_folds();
        t.find_last_readers();
        t
    }

    fn run(mut self) -> Result<Baseline, CudaError> {
        for c in 0..self.program.calls.len() {
            if !self.folds.contains_key(&self.program.calls[c].result) {
                self.call(c)?;
            }
        }
        Ok(self.out)
    }

    /// Elements of value `v` at the sizes (1 for a scalar).
    fn len(&self, v: ValueId) -> usize {
        let dims = self.program.values[v].shape.extents(self.sizes).unwrap_or_default();
        dims.iter().product()
    }

    /// `(rows, columns)` of matrix value `v`.
    fn matrix(&self, v: ValueId) -> (usize, usize) {
        match self.program.values[v].shape.extents(self.sizes).unwrap_or_default()[..] {
            [m, n] => (m, n),
            _ => (1, self.len(v)),
        }
    }

    /// Scalings worth folding: `t = scal(a, x)` whose only reader is `axpy(b, t, y)` with `t`
    /// as its `x` and not its `y`, and `a·b` known on the host (at most one run-time input).
    fn find_folds(&mut self) {
        let program = self.program;
        for call in &program.calls {
            if call.function != "scal" || program.is_output(call.result) {
                continue;
            }
            let readers: Vec<&fuse_core::Call> = (program.calls.iter())
                .filter(|c| c.reads().contains(&call.result))
                .collect();
            let [reader] = readers[..] else { continue };
            let is_x = reader.function == "axpy"
                && reader.args.get(1) == Some(&Arg::Value(call.result))
                && reader.args.get(2) != Some(&Arg::Value(call.result));
            let (Some(factor), Some(&Arg::Value(source))) = (self.host_scalar(&call.args[0]), call.args.get(1)) else {
                continue;
            };
            let combined = self.host_scalar(&reader.args[0]).and_then(|b| multiply(factor, b));
            if is_x && combined.is_some() {
                self.folds.insert(call.result, Fold { factor, source });
            }
        }
    }

    /// The last reader of every value, a folded scaling's source read where the fold lands.
    fn find_last_readers(&mut self) {
        for (c, call) in self.program.calls.iter().enumerate() {
            for v in call.reads() {
                let v = self.folds.get(&v).map_or(v, |f| f.source);
                self.last_reader.insert(v, c);
            }
        }
    }

    /// A literal or a scalar input as a host-known scalar; `None` for a device scalar or an
    /// inlined scalar call.
    fn host_scalar(&self, arg: &Arg) -> Option<ScalarArg> {
        match *arg {
            Arg::Literal(value) => Some(ScalarArg::constant(value)),
            Arg::Value(v) if self.program.values[v].producer.is_none() => Some(ScalarArg::Host {
                factor: 1.0,
                input: Some(v),
            }),
            Arg::Value(_) | Arg::Scalar(_) => None,
        }
    }

    /// A scalar argument as cuBLAS gets it; an inlined scalar call is first computed on the
    /// host into a slot of its own.
    fn scalar(&mut self, arg: &Arg) -> ScalarArg {
        if let Some(known) = self.host_scalar(arg) {
            return known;
        }
        if let Arg::Value(v) = *arg {
            return ScalarArg::Device(self.owner(v));
        }
        if let Some((_, slot)) = self.computed.iter().find(|(value, _)| value == arg) {
            return *slot;
        }
        let into = ScalarArg::Computed(self.out.computed);
        self.out.computed += 1;
        self.computed.push((arg.clone(), into));
        self.push(BlasOp::HostScalar {
            value: arg.clone(),
            into,
        });
        into
    }

    fn value(&self, arg: &Arg) -> ValueId {
        match *arg {
            Arg::Value(v) => self.owner(v),
            Arg::Literal(_) | Arg::Scalar(_) => unreachable!("array arguments are values (the parser checks shapes)"),
        }
    }

    fn owner(&self, v: ValueId) -> ValueId {
        self.out.storage.get(&v).copied().unwrap_or(v)
    }

    /// Whether call `c` may overwrite `v`'s buffer (see the module docs).
    fn can_overwrite(&self, v: ValueId, c: CallId) -> bool {
        let value = &self.program.values[v];
        let result = &self.program.values[self.program.calls[c].result];
        let own = value.producer.is_some() || value.variable == result.variable;
        own && value.shape != Shape::Scalar && !self.program.is_output(v) && self.last_reader.get(&v) == Some(&c)
    }

    /// The buffer call `c` writes its result into when it updates `v` in place: `v`'s own when
    /// it may be overwritten and no other operand shares it, else a fresh buffer holding a copy.
    fn place(&mut self, v: ValueId, c: CallId, others: &[ValueId]) -> ValueId {
        let result = self.program.calls[c].result;
        let owner = self.owner(v);
        if self.can_overwrite(v, c) && !others.contains(&owner) {
            self.out.storage.insert(result, owner);
            return owner;
        }
        let len = self.len(result);
        self.fresh(result);
        self.out.ops.push(BlasOp::Copy {
            len,
            src: owner,
            dst: result,
        });
        result
    }

    /// A new buffer for `v`.
    fn fresh(&mut self, v: ValueId) -> ValueId {
        let len = self.len(v);
        self.out.buffers.insert(v, len);
        self.out.storage.insert(v, v);
        v
    }

    fn call(&mut self, c: CallId) -> Result<(), CudaError> {
        let program = self.program;
        let call = &program.calls[c];
        let args = &call.args;
        let result = call.result;
        let n = self.len(result);
        if call.kind == HigherOrderKind::Scalar {
            let value = Arg::Scalar(Arc::new(fuse_core::ScalarArg {
                callee: call.callee.clone(),
                form: Arc::clone(&call.form),
                args: args.clone(),
            }));
            let into = ScalarArg::Device(self.fresh(result));
            self.computed.push((value.clone(), into));
            self.push(BlasOp::HostScalar { value, into });
            return Ok(());
        }
        match (call.function.as_str(), args.len()) {
            ("scal", 2) => {
                let alpha = self.scalar(&args[0]);
                let x = self.place(self.arg_value(&args[1]), c, &[]);
                self.push(BlasOp::Scal { n, alpha, x });
            }
            ("axpy", 3) => {
                let alpha = self.scalar(&args[0]);
                self.axpy(c, alpha, &args[1], &args[2]);
            }
            ("axpby", 4) => {
                let (alpha, beta) = (self.scalar(&args[0]), self.scalar(&args[2]));
                let x = self.value(&args[1]);
                let y = self.place(self.arg_value(&args[3]), c, &[x]);
                self.push(BlasOp::Scal { n, alpha: beta, x: y });
                self.push(BlasOp::Axpy { n, alpha, x, y });
            }
            ("add", 2) => self.add(c, &args[0], &args[1]),
            ("hadamard", 2) => {
                let (x, y) = (self.value(&args[0]), self.value(&args[1]));
                let c = self.fresh(result);
                self.push(BlasOp::Dgmm { n, x, y, c });
            }
            ("copy", 1) => {
                let src = self.value(&args[0]);
                let dst = self.fresh(result);
                self.push(BlasOp::Copy { len: n, src, dst });
            }
            ("dot", 2) => {
                let (x, y) = (self.value(&args[0]), self.value(&args[1]));
                let result = self.fresh(result);
                let n = self.len(self.arg_value(&args[0]));
                self.push(BlasOp::Dot { n, x, y, result });
            }
            ("asum" | "nrm2", 1) => {
                let x = self.value(&args[0]);
                let n = self.len(self.arg_value(&args[0]));
                let result = self.fresh(result);
                self.push(match call.function.as_str() {
                    "asum" => BlasOp::Asum { n, x, result },
                    _ => BlasOp::Nrm2 { n, x, result },
                });
            }
            ("gemv" | "gemtv", 2 | 3 | 5) => self.gemv(c),
            ("ger", 3 | 4) => self.ger(c),
            ("outer", 2 | 3) => self.outer(c),
            (f, 2) if TRIANGULAR.iter().any(|t| t.0 == f) => self.trmv(c),
            ("madd", 2) => {
                let one = ScalarArg::constant(1.0);
                self.geam(c, (one, &args[0]), (one, &args[1]));
            }
            ("mscal", 2) => {
                let alpha = self.scalar(&args[0]);
                self.geam(c, (alpha, &args[1]), (ScalarArg::constant(0.0), &args[1]));
            }
            _ => {
                return Err(CudaError::Unsupported(format!(
                    "{}: `{}` has no cuBLAS equivalent in the baseline",
                    program.file, call.text
                )))
            }
        }
        Ok(())
    }

    /// The value an array argument names (not its owner).
    fn arg_value(&self, arg: &Arg) -> ValueId {
        match *arg {
            Arg::Value(v) => v,
            Arg::Literal(_) | Arg::Scalar(_) => unreachable!("array arguments are values (the parser checks shapes)"),
        }
    }

    fn push(&mut self, op: BlasOp) {
        self.out.ops.push(op);
    }

    /// `axpy(a, x, y)`, with a scaling of `x` folded into `a`.
    fn axpy(&mut self, c: CallId, alpha: ScalarArg, x: &Arg, y: &Arg) {
        let n = self.len(self.program.calls[c].result);
        let (alpha, x) = match self.folds.get(&self.arg_value(x)) {
            Some(fold) => {
                let alpha = multiply(alpha, fold.factor).expect("folds are checked to multiply");
                (alpha, self.owner(fold.source))
            }
            None => (alpha, self.value(x)),
        };
        let y = self.place(self.arg_value(y), c, &[x]);
        self.push(BlasOp::Axpy { n, alpha, x, y });
    }

    /// `add(x, y)`: `axpy(1, x, y)` in place on `y` when allowed, else on (a copy of) `x`.
    fn add(&mut self, c: CallId, x: &Arg, y: &Arg) {
        let n = self.len(self.program.calls[c].result);
        let (xv, yv) = (self.arg_value(x), self.arg_value(y));
        let one = ScalarArg::constant(1.0);
        let (target, other) = if self.can_overwrite(yv, c) && self.owner(xv) != self.owner(yv) {
            (yv, xv)
        } else {
            (xv, yv)
        };
        let other = self.owner(other);
        let target = self.place(target, c, &[other]);
        self.push(BlasOp::Axpy {
            n,
            alpha: one,
            x: other,
            y: target,
        });
    }

    /// `gemv`/`gemtv` in their three forms; row-major A is column-major Aᵀ.
    fn gemv(&mut self, c: CallId) {
        let program = self.program;
        let call = &program.calls[c];
        let args = &call.args;
        let (alpha, a, x) = match args.len() {
            2 => (ScalarArg::constant(1.0), &args[0], &args[1]),
            _ => (self.scalar(&args[0]), &args[1], &args[2]),
        };
        let (rows, cols) = self.matrix(self.arg_value(a));
        let (a, x) = (self.value(a), self.value(x));
        let (beta, y) = match args.len() {
            5 => {
                let beta = self.scalar(&args[3]);
                (beta, self.place(self.arg_value(&args[4]), c, &[a, x]))
            }
            _ => (ScalarArg::constant(0.0), self.fresh(call.result)),
        };
        let trans = if call.function == "gemv" { Trans::T } else { Trans::N };
        self.push(BlasOp::Gemv {
            trans,
            m: cols,
            n: rows,
            lda: cols,
            alpha,
            a,
            x,
            beta,
            y,
        });
    }

    /// `C = alpha·A + beta·B` by `geam` (B is not read where beta is 0).
    fn geam(&mut self, c: CallId, (alpha, a): (ScalarArg, &Arg), (beta, b): (ScalarArg, &Arg)) {
        let (m, cols) = self.matrix(self.arg_value(a));
        let (a, b) = (self.value(a), self.value(b));
        let c = self.fresh(self.program.calls[c].result);
        self.push(BlasOp::Geam {
            m: cols,
            n: m,
            ld: cols,
            alpha,
            a,
            beta,
            b,
            c,
        });
    }

    /// `ger`: row-major A += a·x·yᵀ is column-major Aᵀ += a·y·xᵀ.
    fn ger(&mut self, c: CallId) {
        let args = &self.program.calls[c].args;
        let (alpha, x, y, a) = match args.len() {
            3 => (ScalarArg::constant(1.0), &args[0], &args[1], &args[2]),
            _ => (self.scalar(&args[0]), &args[1], &args[2], &args[3]),
        };
        let (x, y) = (self.value(x), self.value(y));
        let a = self.place(self.arg_value(a), c, &[x, y]);
        self.rank_one(alpha, x, y, a);
    }

    /// A triangular product: `trmv` in place on a copy of `x`; row-major A's upper triangle is
    /// column-major Aᵀ's lower one, so the triangle and the transpose flag swap.
    fn trmv(&mut self, c: CallId) {
        let call = &self.program.calls[c];
        let &(_, upper, transposed, unit) = (TRIANGULAR.iter())
            .find(|t| t.0 == call.function)
            .expect("called for the triangular functions");
        let a = self.value(&call.args[0]);
        let x = self.value(&call.args[1]);
        let y = self.fresh(call.result);
        let n = self.len(y);
        self.push(BlasOp::Copy { len: n, src: x, dst: y });
        self.push(BlasOp::Trmv {
            n,
            upper: !upper,
            trans: if transposed { Trans::N } else { Trans::T },
            unit,
            a,
            x: y,
        });
    }

    /// `outer`: a cuBLAS user zeroes the result and adds `ger` to it.
    fn outer(&mut self, c: CallId) {
        let call = &self.program.calls[c];
        let (alpha, x, y) = match call.args.len() {
            2 => (ScalarArg::constant(1.0), &call.args[0], &call.args[1]),
            _ => (self.scalar(&call.args[0]), &call.args[1], &call.args[2]),
        };
        let (x, y) = (self.value(x), self.value(y));
        let a = self.fresh(call.result);
        let len = self.len(a);
        self.push(BlasOp::Zero { len, dst: a });
        self.rank_one(alpha, x, y, a);
    }

    /// `a ← alpha·x·yᵀ + a`, row-major.
    fn rank_one(&mut self, alpha: ScalarArg, x: ValueId, y: ValueId, a: ValueId) {
        let (rows, cols) = self.matrix(a);
        self.push(BlasOp::Ger {
            m: cols,
            n: rows,
            lda: cols,
            alpha,
            x: y,
            y: x,
            a,
        });
    }
}

/// The library's triangular products: (function, upper, transposed, unit diagonal), row-major.
const TRIANGULAR: [(&str, bool, bool, bool); 8] = [
    ("trmv_upper", true, false, false),
    ("trmv_lower", false, false, false),
    ("trmtv_upper", true, true, false),
    ("trmtv_lower", false, true, false),
    ("trmv_upper_unit", true, false, true),
    ("trmv_lower_unit", false, false, true),
    ("trmtv_upper_unit", true, true, true),
    ("trmtv_lower_unit", false, true, true),
];

/// The product of two host scalars, when at most one depends on an input.
fn multiply(a: ScalarArg, b: ScalarArg) -> Option<ScalarArg> {
    match (a, b) {
        (ScalarArg::Host { factor: fa, input: ia }, ScalarArg::Host { factor: fb, input: ib })
            if ia.is_none() || ib.is_none() =>
        {
            Some(ScalarArg::Host {
                factor: fa * fb,
                input: ia.or(ib),
            })
        }
        _ => None,
    }
}

/// The host scalars of `baseline` in the order the GPU executor uploads them, deduplicated.
pub fn host_scalars(baseline: &Baseline) -> Vec<ScalarArg> {
    let mut out: Vec<ScalarArg> = Vec::new();
    let mut add = |s: &ScalarArg| {
        if matches!(s, ScalarArg::Host { .. }) && !out.contains(s) {
            out.push(*s);
        }
    };
    for op in &baseline.ops {
        match op {
            BlasOp::Scal { alpha, .. } | BlasOp::Axpy { alpha, .. } | BlasOp::Ger { alpha, .. } => add(alpha),
            BlasOp::Gemv { alpha, beta, .. } | BlasOp::Geam { alpha, beta, .. } => {
                add(alpha);
                add(beta);
            }
            BlasOp::Copy { .. }
            | BlasOp::Zero { .. }
            | BlasOp::Trmv { .. }
            | BlasOp::Dot { .. }
            | BlasOp::Asum { .. }
            | BlasOp::Nrm2 { .. }
            | BlasOp::Dgmm { .. }
            | BlasOp::HostScalar { .. } => {}
        }
    }
    out
}

/// The values a host scalar reads that only the device has (results of calls), in order.
pub fn device_reads(value: &Arg, program: &Program) -> Vec<ValueId> {
    let mut reads = Vec::new();
    value.collect_reads(&mut reads);
    reads.retain(|&v| program.values[v].producer.is_some());
    reads
}

/// `value` (see [`BlasOp::HostScalar`]) evaluated as the host computes it: each scalar it reads
/// from `read`, each call's result rounded to `precision` as a C program computing in that
/// type rounds it.
pub fn evaluate_host_scalar<E>(
    value: &Arg,
    precision: Precision,
    mut read: impl FnMut(ValueId) -> Result<f64, E>,
) -> Result<f64, E> {
    let mut reads = Vec::new();
    value.collect_reads(&mut reads);
    let known = reads
        .iter()
        .map(|&v| read(v).map(|x| (v, x)))
        .collect::<Result<BTreeMap<ValueId, f64>, E>>()?;
    let round = |x: f64| match precision {
        Precision::F32 => x as f32 as f64,
        Precision::F64 => x,
    };
    Ok(value.scalar_value(&|v| known[&v], &round))
}

#[cfg(test)]
mod tests;
