//! The second pass: the split symbol, the local forms every use asks for, the conversions that
//! make them, the segments between conversions and their local scripts.
//!
//! Invariants: a call runs in the first segment in which every local form it reads exists (an
//! input's forms exist from the start, a result's natural form in its own segment, any other
//! form from the next one); conversions of a value run right after the segment that produced
//! it; every conversion starts from the value's natural form or from a form made just before it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use crate::error::{Diagnostic, Location, Result};
use crate::formula::ReduceOp;
use crate::library::Library;
use crate::program::{Arg, Program, ValueId};
use crate::script;
use crate::shape::Shape;

use super::calls::split_call;
use super::{Conversion, Distributed, Distribution, Local, LocalValue, Segment, Step, Transfer};

/// The plan of `program`; `held` gives the distribution of each input as the ranks already
/// hold it (a session's values), else inputs are read from a source and outputs gathered on
/// rank 0.
pub(super) fn build(program: &Program, library: &Library, held: Option<&[Distribution]>) -> Result<Distributed> {
    let split = split_symbol(program, held)?;
    let mut dists = first_distributions(program, &split, held);
    let (segment_of, needs) = split_calls(program, &split, &mut dists)?;
    let results = results(program, &dists, held.is_some());
    let mut wanted: BTreeMap<ValueId, BTreeSet<Local>> = BTreeMap::new();
    let uses = program.calls.iter().zip(&needs).flat_map(|(c, n)| reads(&c.args, n));
    for (value, local) in uses.chain(results.iter().map(|r| (r.value, r.local))) {
        wanted.entry(value).or_default().insert(local);
    }
    let conversions: BTreeMap<ValueId, Vec<Conversion>> = (wanted.iter())
        .map(|(&value, locals)| (value, made(program, value, dists[value], locals, held.is_some())))
        .collect();
    let mut d = Distributed {
        program: program.clone(),
        local_symbol: local_symbol(program, &split),
        split,
        distributions: dists,
        segments: Vec::new(),
        steps: Vec::new(),
        results,
        needs,
        names: BTreeMap::new(),
    };
    d.names = names(&d, &wanted, &conversions);
    for input in &program.inputs {
        d.steps
            .extend(conversions.get(input).into_iter().flatten().map(|c| Step::Convert(*c)));
    }
    let segment_count = segment_of.iter().max().map_or(0, |s| s + 1);
    let readers = readers(&d, &segment_of);
    for k in 0..segment_count {
        let calls: Vec<usize> = (0..program.calls.len()).filter(|&c| segment_of[c] == k).collect();
        let segment = segment(&d, library, k, &calls, &readers, &wanted)?;
        d.segments.push(segment);
        d.steps.push(Step::Run(k));
        for &c in &calls {
            let made = conversions.get(&program.calls[c].result).into_iter().flatten();
            d.steps.extend(made.map(|conv| Step::Convert(*conv)));
        }
    }
    Ok(d)
}

/// Each value's distribution before the calls are decided: inputs as held, else by their
/// outermost dimension (the split rows or not).
fn first_distributions(program: &Program, split: &str, held: Option<&[Distribution]>) -> Vec<Distribution> {
    let mut dists: Vec<Distribution> = (program.values.iter())
        .map(|v| match v.shape.dims().first() {
            Some(d) if *d == split => Distribution::Rows,
            _ => Distribution::Replicated,
        })
        .collect();
    for (&v, &d) in program.inputs.iter().zip(held.unwrap_or_default()) {
        dists[v] = d;
    }
    dists
}

/// The local form of each argument of a call (`None` for a literal).
type Needs = Vec<Option<Local>>;

/// Decides every call in order (setting its result's distribution in `dists`): the segment
/// each runs in and the local form of each argument.
fn split_calls(program: &Program, split: &str, dists: &mut [Distribution]) -> Result<(Vec<usize>, Vec<Needs>)> {
    let mut segment_of = vec![0usize; program.calls.len()];
    let mut needs = Vec::with_capacity(program.calls.len());
    for (c, call) in program.calls.iter().enumerate() {
        let decided = split_call(program, call, split, dists)?;
        let available = |v: ValueId, local: Local| match program.values[v].producer {
            None => 0,
            Some(p) => segment_of[p] + usize::from(local != Local::natural(dists[v])),
        };
        segment_of[c] = (reads(&call.args, &decided.needs).map(|(v, l)| available(v, l)))
            .max()
            .unwrap_or(0);
        dists[call.result] = decided.result;
        needs.push(decided.needs);
    }
    Ok((segment_of, needs))
}

/// The form each output is left in: whole on rank 0 for a run, as it lies for a session.
fn results(program: &Program, dists: &[Distribution], held: bool) -> Vec<LocalValue> {
    (program.outputs.iter())
        .map(|&value| LocalValue {
            value,
            local: match (dists[value], held) {
                (Distribution::Rows, true) => Local::Rows,
                (Distribution::Replicated, _) | (_, true) => Local::Whole,
                _ => Local::RootOnly,
            },
        })
        .collect()
}

/// The conversions that make the `wanted` forms of `value`: reads of an input from its
/// source, or (a held input, a result) collectives and slices from its natural form.
fn made(
    program: &Program,
    value: ValueId,
    dist: Distribution,
    wanted: &BTreeSet<Local>,
    held: bool,
) -> Vec<Conversion> {
    let input = program.values[value].producer.is_none();
    if input && !held {
        let read = |&local| Conversion {
            to: LocalValue { value, local },
            from: None,
            transfer: Transfer::Read,
        };
        return wanted.iter().map(read).collect();
    }
    let mut made = conversions(value, dist, wanted);
    if input {
        let natural = Local::natural(dist);
        let given = Conversion {
            to: LocalValue { value, local: natural },
            from: None,
            transfer: Transfer::Given,
        };
        made.insert(0, given);
    }
    made
}

/// The segments other than its own that read each form of a result.
fn readers(d: &Distributed, segment_of: &[usize]) -> HashMap<LocalValue, BTreeSet<usize>> {
    let mut readers: HashMap<LocalValue, BTreeSet<usize>> = HashMap::new();
    for (c, call) in d.program.calls.iter().enumerate() {
        for (value, local) in reads(&call.args, &d.needs[c]) {
            readers
                .entry(LocalValue { value, local })
                .or_default()
                .insert(segment_of[c]);
        }
    }
    readers
}

/// The values a call reads with the local form of each (those inside an inlined scalar call
/// with its argument's), literals skipped.
fn reads<'a>(args: &'a [Arg], needs: &'a [Option<Local>]) -> impl Iterator<Item = (ValueId, Local)> + 'a {
    args.iter().zip(needs).flat_map(|(a, n)| {
        let mut values = Vec::new();
        a.collect_reads(&mut values);
        values.into_iter().filter_map(move |v| n.map(|l| (v, l)))
    })
}

/// The size symbol split into row blocks: the row symbol of every matrix and of every input held
/// by rows, or (without those) the length of the first vector.
fn split_symbol(program: &Program, held: Option<&[Distribution]>) -> Result<String> {
    let refuse = |why: String| Diagnostic::new(Location::file(&program.file), format!("cannot distribute: {why}"));
    let matrices = program.values.iter().filter_map(|v| match &v.shape {
        Shape::Matrix(m, _) => Some(m.as_str()),
        _ => None,
    });
    let held_rows = (program.inputs.iter().zip(held.unwrap_or_default()))
        .filter(|(_, d)| **d == Distribution::Rows)
        .filter_map(|(&v, _)| program.values[v].shape.dims().first().copied());
    let rows: BTreeSet<&str> = matrices.chain(held_rows).collect();
    match rows.len() {
        1 => Ok(rows.into_iter().next().unwrap_or_default().to_string()),
        0 => program
            .values
            .iter()
            .find_map(|v| match &v.shape {
                Shape::Vector(n) => Some(n.clone()),
                _ => None,
            })
            .ok_or_else(|| refuse("it has no matrix or vector to split over ranks".into()).into()),
        _ => {
            let listed: Vec<String> = rows.iter().map(|r| format!("`{r}`")).collect();
            Err(refuse(format!(
                "its matrices (and vectors held by rows) have different row counts ({}); all are split by the same rows",
                listed.join(", ")
            ))
            .into())
        }
    }
}

/// How the local forms `wanted` of a value are made from its natural form, in the order they
/// must run.
fn conversions(value: ValueId, dist: Distribution, wanted: &BTreeSet<Local>) -> Vec<Conversion> {
    let make = |local, from, transfer| Conversion {
        to: LocalValue { value, local },
        from,
        transfer,
    };
    let natural = Local::natural(dist);
    let rest: BTreeSet<Local> = wanted.iter().copied().filter(|&l| l != natural).collect();
    let has = |l: Local| rest.contains(&l);
    let mut out = Vec::new();
    // Whole on every rank, when asked for or when two forms are cut from it.
    let through_whole = match dist {
        Distribution::Replicated => true,
        Distribution::Rows => has(Local::Whole),
        Distribution::Partial(ReduceOp::Norm2) => !rest.is_empty(),
        Distribution::Partial(ReduceOp::Sum) => has(Local::Whole) || rest.len() > 1,
    };
    if through_whole {
        let gather = match dist {
            Distribution::Replicated => None,
            Distribution::Rows => Some(Transfer::AllGather),
            Distribution::Partial(ReduceOp::Sum) => Some(Transfer::AllReduce),
            Distribution::Partial(ReduceOp::Norm2) => Some(Transfer::AllNorm),
        };
        if let Some(transfer) = gather {
            out.push(make(Local::Whole, Some(natural), transfer));
        }
        if has(Local::Rows) {
            out.push(make(Local::Rows, Some(Local::Whole), Transfer::Slice));
        }
        if has(Local::RootOnly) {
            out.push(make(Local::RootOnly, Some(Local::Whole), Transfer::KeepOnRoot));
        }
        return out;
    }
    for local in rest {
        let transfer = match (dist, local) {
            (Distribution::Rows, _) => Transfer::Gather,
            (_, Local::Rows) => Transfer::ReduceScatter,
            _ => Transfer::Reduce,
        };
        out.push(make(local, Some(natural), transfer));
    }
    out
}

/// The row symbol of the local scripts: `m_local` unless that name is taken.
fn local_symbol(program: &Program, split: &str) -> String {
    let mut symbol = format!("{split}_local");
    while program.sizes.get(&symbol).is_some() || program.values.iter().any(|v| v.variable == symbol) {
        symbol.push('_');
    }
    symbol
}

/// A distinct identifier for each local form: the value's name (`x.1` → `x_1`), suffixed by
/// its form unless it is the natural one.
fn names(
    d: &Distributed,
    wanted: &BTreeMap<ValueId, BTreeSet<Local>>,
    conversions: &BTreeMap<ValueId, Vec<Conversion>>,
) -> BTreeMap<LocalValue, String> {
    let program = &d.program;
    let mut forms: BTreeSet<LocalValue> = wanted
        .iter()
        .flat_map(|(&value, locals)| locals.iter().map(move |&local| LocalValue { value, local }))
        .collect();
    forms.extend(conversions.values().flatten().map(|c| c.to));
    forms.extend(program.calls.iter().map(|c| LocalValue {
        value: c.result,
        local: Local::natural(d.distributions[c.result]),
    }));
    let mut taken: HashSet<String> = program.sizes.iter().map(|(s, _)| s.to_string()).collect();
    taken.insert(d.local_symbol.clone());
    let mut names = BTreeMap::new();
    for form in forms {
        let mut name = program.values[form.value].name.replace('.', "_");
        if form.local != Local::natural(d.distributions[form.value]) {
            name.push_str(form.local.suffix());
        }
        while !taken.insert(name.clone()) {
            name.push('_');
        }
        names.insert(form, name);
    }
    names
}

/// Segment `k`: the calls in it as a local script, with the forms it reads and returns.
fn segment(
    d: &Distributed,
    library: &Library,
    k: usize,
    calls: &[usize],
    readers: &HashMap<LocalValue, BTreeSet<usize>>,
    wanted: &BTreeMap<ValueId, BTreeSet<Local>>,
) -> Result<Segment> {
    let program = &d.program;
    let natural = |value: ValueId| LocalValue {
        value,
        local: Local::natural(d.distributions[value]),
    };
    let made_here: BTreeSet<LocalValue> = calls.iter().map(|&c| natural(program.calls[c].result)).collect();
    let mut inputs: Vec<LocalValue> = Vec::new();
    for &c in calls {
        for (value, local) in reads(&program.calls[c].args, &d.needs[c]) {
            let form = LocalValue { value, local };
            if !made_here.contains(&form) && !inputs.contains(&form) {
                inputs.push(form);
            }
        }
    }
    let read_elsewhere = |form: LocalValue| readers.get(&form).is_some_and(|s| s.iter().any(|&r| r != k));
    let outputs: Vec<LocalValue> = calls
        .iter()
        .map(|&c| natural(program.calls[c].result))
        .filter(|&form| {
            let converted = wanted
                .get(&form.value)
                .is_some_and(|w| w.iter().any(|&l| l != form.local));
            converted || read_elsewhere(form) || d.results.contains(&form)
        })
        .collect();

    let script = local_script(d, k, calls, &inputs, &outputs);
    let file = format!("{} (part {} over ranks)", program.file, k + 1);
    let parsed = script::parse(&file, &script, library)?;
    Ok(Segment {
        script,
        program: parsed,
        inputs,
        outputs,
    })
}

fn local_script(d: &Distributed, k: usize, calls: &[usize], inputs: &[LocalValue], outputs: &[LocalValue]) -> String {
    let program = &d.program;
    let shapes: Vec<Shape> = inputs
        .iter()
        .map(|&f| d.local_shape(f))
        .chain(calls.iter().map(|&c| {
            let result = program.calls[c].result;
            d.local_shape(LocalValue {
                value: result,
                local: Local::natural(d.distributions[result]),
            })
        }))
        .collect();
    let symbols: BTreeSet<&str> = shapes.iter().flat_map(|s| s.dims()).collect();
    let default = |s: &str| {
        let whole = if s == d.local_symbol { &d.split } else { s };
        program.sizes.get(whole).unwrap_or(1)
    };
    let mut text = String::new();
    let _ = writeln!(text, "name: {}_part{}", program.name, k + 1);
    let _ = writeln!(text, "precision: {}", program.precision);
    let _ = writeln!(text, "{}", sizes_line(symbols.iter().map(|&s| (s, default(s)))));
    let _ = writeln!(text, "inputs:");
    for (form, shape) in inputs.iter().zip(&shapes) {
        let _ = writeln!(text, "  {}: {shape}", d.name(*form));
    }
    let names: Vec<&str> = outputs.iter().map(|&f| d.name(f)).collect();
    let _ = writeln!(text, "outputs: [{}]", names.join(", "));
    let _ = writeln!(text, "calls:");
    let mut inlined = 0;
    for &c in calls {
        let call = &program.calls[c];
        let args: Vec<String> = (call.args.iter().zip(&d.needs[c]))
            .map(|(arg, need)| local_arg(d, arg, need.unwrap_or(Local::Whole), &mut text, &mut inlined))
            .collect();
        let result = LocalValue {
            value: call.result,
            local: Local::natural(d.distributions[call.result]),
        };
        let _ = writeln!(text, "  - {} = {}({})", d.name(result), call.callee, args.join(", "));
    }
    text
}

/// How the local script writes `arg`: an inlined scalar call becomes a call of its own on a
/// line before (`_inlined1 = sdiv(rho, sigma)`), which the script's rewrite inlines again.
fn local_arg(d: &Distributed, arg: &Arg, local: Local, text: &mut String, inlined: &mut usize) -> String {
    match arg {
        Arg::Value(value) => d.name(LocalValue { value: *value, local }).to_string(),
        Arg::Literal(x) => format!("{x:?}"),
        Arg::Scalar(s) => {
            let args: Vec<String> = s.args.iter().map(|a| local_arg(d, a, local, text, inlined)).collect();
            *inlined += 1;
            let _ = writeln!(text, "  - _inlined{inlined} = {}({})", s.callee, args.join(", "));
            format!("_inlined{inlined}")
        }
    }
}

/// A local script's `sizes: {m_local: 250, n: 4096}` line.
pub(super) fn sizes_line<'a>(sizes: impl Iterator<Item = (&'a str, usize)>) -> String {
    let sizes: Vec<String> = sizes.map(|(s, v)| format!("{s}: {v}")).collect();
    format!("sizes: {{{}}}", sizes.join(", "))
}
