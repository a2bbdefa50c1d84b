//! Host-side arrays bound to a program's inputs and outputs, shared by every backend.

use std::collections::BTreeMap;
use std::fmt;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::program::{Program, ValueId};
use crate::shape::{Precision, Sizes};

/// Elements of a host array, in the script's precision.
#[derive(Debug, Clone, PartialEq)]
pub enum HostData {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 64-bit floats.
    F64(Vec<f64>),
}

impl HostData {
    /// The element precision.
    pub fn precision(&self) -> Precision {
        match self {
            HostData::F32(_) => Precision::F32,
            HostData::F64(_) => Precision::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            HostData::F32(v) => v.len(),
            HostData::F64(v) => v.len(),
        }
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, borrowed.
    pub fn view(&self) -> DataView<'_> {
        match self {
            HostData::F32(v) => DataView::F32(v),
            HostData::F64(v) => DataView::F64(v),
        }
    }
}

/// Elements of one precision borrowed from memory that someone else owns — a caller's array
/// read in place, without a copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DataView<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// 64-bit floats.
    F64(&'a [f64]),
}

impl DataView<'_> {
    /// The elements widened to f64 (a copy).
    pub fn to_f64(&self) -> Vec<f64> {
        match self {
            DataView::F32(v) => v.iter().map(|&x| x as f64).collect(),
            DataView::F64(v) => v.to_vec(),
        }
    }

    /// The element precision.
    pub fn precision(&self) -> Precision {
        match self {
            DataView::F32(_) => Precision::F32,
            DataView::F64(_) => Precision::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            DataView::F32(v) => v.len(),
            DataView::F64(v) => v.len(),
        }
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements, copied.
    pub fn to_owned(&self) -> HostData {
        match *self {
            DataView::F32(v) => HostData::F32(v.to_vec()),
            DataView::F64(v) => HostData::F64(v.to_vec()),
        }
    }
}

/// A dense row-major array whose elements are borrowed ([`DataView`]); what a run reads
/// where the caller keeps its data (numpy arrays from Python, say).
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayView<'a> {
    /// Extents, outermost first.
    pub dims: Vec<usize>,
    /// The elements.
    pub data: DataView<'a>,
}

impl ArrayView<'_> {
    /// The same array with its elements copied.
    pub fn to_owned(&self) -> HostArray {
        HostArray {
            dims: self.dims.clone(),
            data: self.data.to_owned(),
        }
    }

    /// Rows `rows` of its outermost dimension, copied (a rank's block of a matrix or vector).
    pub fn rows(&self, rows: std::ops::Range<usize>) -> HostArray {
        let row: usize = self.dims.iter().skip(1).product();
        let span = rows.start * row..rows.end * row;
        let mut dims = self.dims.clone();
        if let Some(outer) = dims.first_mut() {
            *outer = rows.len();
        }
        let data = match self.data {
            DataView::F32(v) => HostData::F32(v[span].to_vec()),
            DataView::F64(v) => HostData::F64(v[span].to_vec()),
        };
        HostArray { dims, data }
    }
}

/// An array bound to an input, owned ([`HostArray`]) or borrowed ([`ArrayView`]): the checks
/// and the host backends read either.
pub trait Bound {
    /// Extents, outermost first.
    fn dims(&self) -> &[usize];
    /// The elements.
    fn data(&self) -> DataView<'_>;
    /// The element precision.
    fn precision(&self) -> Precision {
        self.data().precision()
    }
}

impl Bound for HostArray {
    fn dims(&self) -> &[usize] {
        &self.dims
    }

    fn data(&self) -> DataView<'_> {
        self.data.view()
    }
}

impl Bound for ArrayView<'_> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }

    fn data(&self) -> DataView<'_> {
        self.data
    }
}

/// A dense row-major array on the host; a scalar has no dimensions and one element.
#[derive(Debug, Clone, PartialEq)]
pub struct HostArray {
    /// Extents, outermost first.
    pub dims: Vec<usize>,
    /// The elements.
    pub data: HostData,
}

impl HostArray {
    /// The array, borrowed.
    pub fn view(&self) -> ArrayView<'_> {
        ArrayView {
            dims: self.dims.clone(),
            data: self.data.view(),
        }
    }

    /// An f64 array.
    pub fn f64(dims: Vec<usize>, data: Vec<f64>) -> Self {
        debug_assert_eq!(dims.iter().product::<usize>(), data.len());
        HostArray {
            dims,
            data: HostData::F64(data),
        }
    }

    /// An f32 array.
    pub fn f32(dims: Vec<usize>, data: Vec<f32>) -> Self {
        debug_assert_eq!(dims.iter().product::<usize>(), data.len());
        HostArray {
            dims,
            data: HostData::F32(data),
        }
    }

    /// The element precision.
    pub fn precision(&self) -> Precision {
        self.data.precision()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether it holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements widened to f64.
    pub fn to_f64(&self) -> Vec<f64> {
        self.data.view().to_f64()
    }

    /// The same values in `precision` (rounded when narrowing).
    pub fn to_precision(&self, precision: Precision) -> HostArray {
        let data = match (precision, &self.data) {
            (Precision::F32, HostData::F64(v)) => HostData::F32(v.iter().map(|&x| x as f32).collect()),
            (Precision::F64, HostData::F32(v)) => HostData::F64(v.iter().map(|&x| x as f64).collect()),
            (_, d) => d.clone(),
        };
        HostArray {
            dims: self.dims.clone(),
            data,
        }
    }
}

/// Arrays by script name.
pub type Bindings = BTreeMap<String, HostArray>;

/// Borrowed arrays by script name.
pub type Views<'a> = BTreeMap<String, ArrayView<'a>>;

/// Views of every array of `bindings` (no element is copied).
pub fn views(bindings: &Bindings) -> Views<'_> {
    bindings.iter().map(|(name, a)| (name.clone(), a.view())).collect()
}

/// Why arrays do not fit a program.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    /// An input has no array.
    #[error("input `{0}` has no value")]
    Missing(String),
    /// An array has other extents than the script's shape under the bound sizes.
    #[error("input `{name}` has shape {got:?} but {file} declares it {declared} = {want:?}")]
    Shape {
        /// The input.
        name: String,
        /// Its extents.
        got: Box<[usize]>,
        /// The extents expected.
        want: Box<[usize]>,
        /// The symbolic shape.
        declared: String,
        /// The script.
        file: String,
    },
    /// An array has the other precision.
    #[error("input `{name}` is {got} but the script is {want}")]
    Precision {
        /// The input.
        name: String,
        /// Its precision.
        got: Precision,
        /// The script's.
        want: Precision,
    },
}

/// Checks that `inputs` holds an array of the right shape and precision for every input.
pub fn check_inputs<A: Bound>(program: &Program, sizes: &Sizes, inputs: &BTreeMap<String, A>) -> Result<(), BindError> {
    bound_inputs(program, &input_extents(program, sizes), inputs).map(drop)
}

/// The extents of each input of `program` under `sizes` (in `program.inputs` order; empty
/// where a size is unbound): what a plan compiled for these sizes checks its arrays against.
pub fn input_extents(program: &Program, sizes: &Sizes) -> Vec<Vec<usize>> {
    let extents = |&id: &ValueId| program.values[id].shape.extents(sizes).unwrap_or_default();
    program.inputs.iter().map(extents).collect()
}

/// The array bound to each input of `program` (in `program.inputs` order), each found once
/// and checked against its `extents` (from [`input_extents`]) and the program's precision.
pub fn bound_inputs<'a, A: Bound>(
    program: &Program,
    extents: &[Vec<usize>],
    inputs: &'a BTreeMap<String, A>,
) -> Result<Vec<&'a A>, BindError> {
    let bound = |(&id, want): (&ValueId, &Vec<usize>)| {
        let name = &program.values[id].variable;
        let array = inputs.get(name).ok_or_else(|| BindError::Missing(name.clone()))?;
        check_array(program, id, want, array).map(|()| array)
    };
    program.inputs.iter().zip(extents).map(bound).collect()
}

/// Checks the shape and precision of each array in `inputs` that is bound to an input.
pub fn check_inputs_given<A: Bound>(
    program: &Program,
    sizes: &Sizes,
    inputs: &BTreeMap<String, A>,
) -> Result<(), BindError> {
    for (&id, want) in program.inputs.iter().zip(input_extents(program, sizes)) {
        if let Some(array) = inputs.get(&program.values[id].variable) {
            check_array(program, id, &want, array)?;
        }
    }
    Ok(())
}

/// Checks `array`, bound to input `id`, against the extents `want` and the program's precision.
fn check_array<A: Bound>(program: &Program, id: ValueId, want: &[usize], array: &A) -> Result<(), BindError> {
    let value = &program.values[id];
    // Element by element: `!=` on the slices calls memcmp, a tenth of a small run's time.
    let dims = array.dims();
    if dims.len() != want.len() || dims.iter().zip(want).any(|(a, b)| a != b) {
        return Err(BindError::Shape {
            name: value.variable.clone(),
            got: array.dims().into(),
            want: want.into(),
            declared: value.shape.to_string(),
            file: program.file.clone(),
        });
    }
    if array.precision() != program.precision {
        return Err(BindError::Precision {
            name: value.variable.clone(),
            got: array.precision(),
            want: program.precision,
        });
    }
    Ok(())
}

/// Host memory that a run needs and cannot have: an allocation refused, or more than the
/// machine has available.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not enough host memory for {what}: it needs {}{}", bytes(*needed), available.map_or(String::new(), |a| format!(" and {} are available", bytes(a))))]
pub struct HostMemoryError {
    /// What the memory is for (`input `A` of bicgk at m=100000 n=100000`).
    pub what: String,
    /// Bytes needed.
    pub needed: u64,
    /// Bytes available, where known.
    pub available: Option<u64>,
}

/// `n` bytes in words: `80000000000 bytes (74.5 GiB)`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = None;
    for u in UNITS {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = Some(u);
    }
    match unit {
        None => format!("{n} bytes"),
        Some(u) => format!("{n} bytes ({value:.1} {u})"),
    }
}

/// An empty vector with room for `len` elements, or the error naming `what` when the memory
/// cannot be had — an error, not the abort of a failed allocation. Its whole 2 MiB pages are
/// asked to be huge pages, as numpy asks for its arrays: a pass over a large input filled here
/// (a matrix drawn or read from a file) then misses the TLB once per 2 MiB, not per 4 KiB —
/// SGEMV at 8192² f64 went from 61–67 % to 67–81 % of the copy timed beside it.
pub fn try_vec<T>(len: usize, what: impl FnOnce() -> String) -> Result<Vec<T>, HostMemoryError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| HostMemoryError {
        what: what(),
        needed: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        available: None,
    })?;
    advise_huge_pages(v.spare_capacity_mut());
    Ok(v)
}

/// `len` zeros, or the error naming `what` when the memory cannot be had. The allocator hands
/// them out zeroed (large ones as fresh pages from the system), so no thread writes them
/// first: their pages are first touched by the threads that compute into them.
///
/// On Linux the whole 2 MiB pages inside them are asked to be huge pages (where the system
/// leaves that to the program, as it does by default): a first touch then faults in 2 MiB at a
/// time, not 4 KiB (7,000 faults fewer for the 32 MB output of a GEMVER at 2000² f64).
pub fn try_zeroed_vec<T: bytemuck::Zeroable>(
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<T>, HostMemoryError> {
    let v = bytemuck::allocation::try_zeroed_vec(len).map_err(|()| HostMemoryError {
        what: what(),
        needed: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        available: None,
    })?;
    advise_huge_pages(&v);
    Ok(v)
}

/// Asks for huge pages under the whole 2 MiB pages of `data` (a hint: failure changes nothing).
fn advise_huge_pages<T>(data: &[T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = data.as_ptr() as usize;
        let (first, end) = (
            start.next_multiple_of(HUGE),
            (start + std::mem::size_of_val(data)) / HUGE * HUGE,
        );
        if end > first {
            // SAFETY: the range lies inside `data`'s allocation; MADV_HUGEPAGE changes how its
            // pages are backed, never their contents.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
}

/// Draws every input of `program` that `given` lacks, uniformly from [-1, 1), straight in the
/// program's precision (an f32 element is the f64 draw rounded). Each input has its own stream
/// of the seed, so a value does not change when another input is supplied.
pub fn try_fill_random_inputs(
    program: &Program,
    sizes: &Sizes,
    seed: u64,
    given: &mut Bindings,
) -> Result<(), HostMemoryError> {
    for (k, &id) in program.inputs.iter().enumerate() {
        let name = &program.values[id].variable;
        if !given.contains_key(name) {
            let array = try_random_input(program, sizes, seed, k, None)?;
            given.insert(name.clone(), array);
        }
    }
    Ok(())
}

/// Input `k` (in declaration order) as [`try_fill_random_inputs`] draws it, or only rows
/// `rows` of it (its outermost dimension): the same numbers, its stream started at the first of
/// those rows, so that a rank of a distributed run draws its own rows alone.
pub fn try_random_input(
    program: &Program,
    sizes: &Sizes,
    seed: u64,
    k: usize,
    rows: Option<std::ops::Range<usize>>,
) -> Result<HostArray, HostMemoryError> {
    let value = &program.values[program.inputs[k]];
    let name = &value.variable;
    let mut dims = value.shape.extents(sizes).unwrap_or_default();
    let row: usize = dims.iter().skip(1).product();
    let first = rows.as_ref().map_or(0, |r| r.start * row);
    if let (Some(r), Some(outer)) = (&rows, dims.first_mut()) {
        *outer = r.len();
    }
    let count: usize = dims.iter().product();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(k as u64);
    // Each element is one 64-bit draw: two 32-bit words of the stream.
    rng.set_word_pos(2 * first as u128);
    let what = || format!("input `{name}` of {} at {sizes}", program.name);
    let mut draw = || rng.random_range(-1.0..1.0);
    let data = match program.precision {
        Precision::F32 => {
            let mut v = try_vec(count, what)?;
            v.extend((0..count).map(|_| draw() as f32));
            HostData::F32(v)
        }
        Precision::F64 => {
            let mut v = try_vec(count, what)?;
            v.extend((0..count).map(|_| draw()));
            HostData::F64(v)
        }
    };
    Ok(HostArray { dims, data })
}

/// [`try_fill_random_inputs`] for tests and benchmarks, whose inputs fit: panics where the
/// memory cannot be had.
pub fn fill_random_inputs(program: &Program, sizes: &Sizes, seed: u64, given: &mut Bindings) {
    if let Err(e) = try_fill_random_inputs(program, sizes, seed, given) {
        panic!("{e}");
    }
}

/// Normwise relative error ‖got − want‖₂ / ‖want‖₂ (absolute when `want` is zero), over the
/// finite elements of `want`; where `want` is NaN or infinite, `got` must be the same (NaN
/// where NaN, the same infinity) or the error is infinite: IEEE arithmetic gives the same
/// non-finite results on every backend (a division by zero, the root of a negative number).
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "arrays compared must have equal length");
    let same = |g: f64, w: f64| (g.is_nan() && w.is_nan()) || g == w;
    if got.iter().zip(want).any(|(&g, &w)| !w.is_finite() && !same(g, w)) {
        return f64::INFINITY;
    }
    let finite = || got.iter().zip(want).filter(|(_, w)| w.is_finite());
    let diff: f64 = finite().map(|(g, w)| (g - w) * (g - w)).sum::<f64>().sqrt();
    let norm: f64 = finite().map(|(_, w)| w * w).sum::<f64>().sqrt();
    if norm == 0.0 {
        diff
    } else {
        diff / norm
    }
}

impl fmt::Display for HostArray {
    /// A short summary: shape, norm, range (of the numbers that are not NaN, and how many are)
    /// and the first elements; a scalar as its shortest exact decimal in its precision.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_f64();
        if self.dims.is_empty() {
            let value = match &self.data {
                HostData::F32(d) => d.first().map(|&x| readable(x)),
                HostData::F64(d) => d.first().map(|&x| readable(x)),
            };
            return write!(
                f,
                "scalar {}  {}",
                self.precision(),
                value.unwrap_or_else(|| "NaN".into())
            );
        }
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        if v.is_empty() {
            return write!(f, "[{}] {}  (empty)", dims.join("×"), self.precision());
        }
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        let numbers = || v.iter().copied().filter(|x| !x.is_nan());
        let min = numbers().reduce(f64::min).unwrap_or(f64::NAN);
        let max = numbers().reduce(f64::max).unwrap_or(f64::NAN);
        let nans = match v.len() - numbers().count() {
            0 => String::new(),
            n => format!("  NaN: {n} of {}", v.len()),
        };
        let head: Vec<String> = v.iter().take(4).map(|&x| fixed(x)).collect();
        let more = if v.len() > 4 { ", …" } else { "" };
        write!(
            f,
            "[{}] {}  ‖·‖₂={norm:.6e}  min={}  max={}{nans}  [{}{more}]",
            dims.join("×"),
            self.precision(),
            fixed(min),
            fixed(max),
            head.join(", ")
        )
    }
}

/// `x` to six decimals where that is readable, else in scientific notation with seven
/// significant digits: `0.500000`, `3.000000e20`, `4.000000e-25`.
fn fixed(x: f64) -> String {
    match x.abs() {
        a if a == 0.0 || !a.is_finite() || (1e-4..1e9).contains(&a) => format!("{x:.6}"),
        _ => format!("{x:.6e}"),
    }
}

/// The shortest decimal that reads back as `x` (Rust's `Display`), in scientific notation when
/// very large or very small: `0.1`, `3e20`, `4.0000001e-25`.
fn readable<T: fmt::Display + fmt::LowerExp + Into<f64> + Copy>(x: T) -> String {
    match x.into().abs() {
        a if a == 0.0 || !a.is_finite() || (1e-4..1e9).contains(&a) => format!("{x}"),
        _ => format!("{x:e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each input is found once, in the program's order, and checked: a missing one, one of
    /// other extents (a transposed matrix, one dimension too few) or of the other precision
    /// is the error naming it.
    #[test]
    fn bound_inputs_are_found_in_order_and_checked() {
        let program = crate::testing::sequence("bicgk", Precision::F32);
        let sizes = crate::testing::sizes_mn(&program, 3, 5);
        let extents = input_extents(&program, &sizes);
        let mut inputs = Bindings::new();
        fill_random_inputs(&program, &sizes, 1, &mut inputs);
        let bound = bound_inputs(&program, &extents, &inputs).unwrap();
        for (&id, array) in program.inputs.iter().zip(&bound) {
            assert!(std::ptr::eq(*array, &inputs[&program.values[id].variable]));
        }
        let with = |name: &str, array: Option<HostArray>| {
            let mut changed = inputs.clone();
            match array {
                Some(a) => changed.insert(name.to_string(), a),
                None => changed.remove(name),
            };
            bound_inputs(&program, &extents, &changed).map(|_| ()).unwrap_err()
        };
        assert_eq!(with("p", None), BindError::Missing("p".into()));
        let f32s = |dims: Vec<usize>| HostArray {
            data: HostData::F32(vec![0.0; dims.iter().product()]),
            dims,
        };
        for dims in [vec![5, 3], vec![15], vec![3, 5, 1]] {
            let err = with("A", Some(f32s(dims.clone())));
            assert!(
                matches!(&err, BindError::Shape { name, got, want, .. } if name == "A" && **got == *dims && **want == [3, 5]),
                "{err:?}"
            );
        }
        let f64s = HostArray {
            dims: vec![5],
            data: HostData::F64(vec![0.0; 5]),
        };
        assert!(matches!(with("p", Some(f64s)), BindError::Precision { name, .. } if name == "p"));
    }

    /// Both allocators mark a large allocation's whole 2 MiB pages for huge pages (`hg` among
    /// the flags of its mapping in /proc/self/smaps).
    #[cfg(target_os = "linux")]
    #[test]
    fn large_allocations_ask_for_huge_pages() {
        fn flags_of(address: usize) -> String {
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
            let mut inside = false;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-')) {
                    let (lo, hi) = range.split_once('-').unwrap();
                    let (lo, hi) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16));
                    inside = matches!((lo, hi), (Ok(lo), Ok(hi)) if (lo..hi).contains(&address));
                } else if let Some(flags) = line.strip_prefix("VmFlags:").filter(|_| inside) {
                    return flags.to_string();
                }
            }
            panic!("no mapping holds {address:#x}");
        }
        let len = 3 << 20;
        let drawn: Vec<f64> = try_vec(len, String::new).unwrap();
        let zeroed: Vec<f64> = try_zeroed_vec(len, String::new).unwrap();
        for (what, start) in [("try_vec", drawn.as_ptr()), ("try_zeroed_vec", zeroed.as_ptr())] {
            let middle = start as usize + (len * 8) / 2;
            let flags = flags_of(middle);
            assert!(flags.split_whitespace().any(|f| f == "hg"), "{what}: VmFlags{flags}");
        }
    }

    #[test]
    fn relative_error_is_normwise() {
        assert_eq!(relative_error(&[3.0, 4.0], &[3.0, 4.0]), 0.0);
        assert!((relative_error(&[3.0, 4.5], &[3.0, 4.0]) - 0.1).abs() < 1e-12);
        assert_eq!(relative_error(&[0.5], &[0.0]), 0.5);
    }

    /// A block of rows drawn alone is those rows of the whole draw, in both precisions.
    #[test]
    fn rows_drawn_alone_are_the_rows_of_the_whole_draw() {
        let library = crate::Library::builtin().unwrap();
        for p in ["f32", "f64"] {
            let prefix = if p == "f32" { "s" } else { "d" };
            let text = format!(
                "precision: {p}\nsizes: {{m: 37, n: 11}}\ninputs: {{A: [m, n], x: [n], r: [m]}}\noutputs: [y]\ncalls:\n  - y = {prefix}gemv(A, x)\n"
            );
            let program = crate::script::parse("t.yaml", &text, &library).unwrap();
            let sizes = program.sizes.clone();
            let mut whole = Bindings::new();
            try_fill_random_inputs(&program, &sizes, 5, &mut whole).unwrap();
            for (k, name, row) in [(0, "A", 11), (2, "r", 1)] {
                for rows in [0..37, 0..1, 13..25, 36..37] {
                    let part = try_random_input(&program, &sizes, 5, k, Some(rows.clone())).unwrap();
                    let want = &whole[name].to_f64()[rows.start * row..rows.end * row];
                    assert_eq!(part.to_f64(), want, "{p} {name} rows {rows:?}");
                    assert_eq!(part.dims[0], rows.len());
                }
            }
        }
    }

    /// Drawn straight in f32, an input is the f64 draw rounded: the same values as before
    /// inputs were drawn without an f64 copy.
    #[test]
    fn f32_inputs_are_the_f64_draws_rounded() {
        let library = crate::Library::builtin().unwrap();
        let text = |p: &str| {
            let prefix = if p == "f32" { "s" } else { "d" };
            format!("precision: {p}\nsizes: {{n: 37}}\ninputs: {{x: [n]}}\noutputs: [y]\ncalls:\n  - y = {prefix}scal(2.0, x)\n")
        };
        let draw = |p: &str| {
            let program = crate::script::parse("t.yaml", &text(p), &library).unwrap();
            let mut given = Bindings::new();
            try_fill_random_inputs(&program, &program.sizes, 5, &mut given).unwrap();
            given.remove("x").unwrap()
        };
        let (single, double) = (draw("f32"), draw("f64"));
        assert_eq!(single, double.to_precision(Precision::F32));
        assert_eq!(single.dims, [37]);
    }

    #[test]
    fn memory_that_cannot_be_had_is_an_error_naming_the_bytes() {
        let err = try_vec::<f64>(usize::MAX / 4, || "a big one".to_string()).unwrap_err();
        assert_eq!(err.what, "a big one");
        assert!(
            err.to_string()
                .starts_with("not enough host memory for a big one: it needs "),
            "{err}"
        );
        assert_eq!(bytes(80_000_000_000), "80000000000 bytes (74.5 GiB)");
        assert_eq!(bytes(512), "512 bytes");
    }

    #[test]
    fn summaries_are_readable_at_any_magnitude() {
        let scalar = |x: f32| HostArray::f32(vec![], vec![x]).to_string();
        assert_eq!(scalar(3e20), "scalar f32  3e20");
        assert_eq!(scalar(4e-25), "scalar f32  4e-25");
        // Not a nice number: the shortest decimal that reads back exactly.
        for x in [3e20f32, 4e-25, 1e-5, 7e12] {
            let next = f32::from_bits(x.to_bits() + 1);
            let text = scalar(next);
            let number = text.strip_prefix("scalar f32  ").unwrap();
            assert_eq!(number.parse::<f32>(), Ok(next), "{text}");
            assert!(number.contains('e') && number.len() <= 14, "{text}");
        }
        assert_eq!(scalar(0.1), "scalar f32  0.1");
        assert_eq!(scalar(-2.5), "scalar f32  -2.5");
        assert_eq!(HostArray::f64(vec![], vec![1e300]).to_string(), "scalar f64  1e300");
        let big = HostArray::f32(vec![2], vec![3e20, -1e-30]).to_string();
        assert!(big.contains("min=-1.000000e-30  max=3.000000e20"), "{big}");
        assert!(big.contains("[3.000000e20, -1.000000e-30]"), "{big}");
    }

    #[test]
    fn nan_is_counted_not_a_range_of_infinities() {
        let all = HostArray::f32(vec![3], vec![f32::NAN; 3]).to_string();
        assert!(all.contains("min=NaN  max=NaN  NaN: 3 of 3"), "{all}");
        let some = HostArray::f64(vec![3], vec![1.0, f64::NAN, -2.0]).to_string();
        assert!(some.contains("min=-2.000000  max=1.000000  NaN: 1 of 3"), "{some}");
    }

    #[test]
    fn narrowing_rounds_to_f32() {
        let a = HostArray::f64(vec![2], vec![0.1, 1.0]).to_precision(Precision::F32);
        assert_eq!(a.data, HostData::F32(vec![0.1f32, 1.0]));
    }
}
