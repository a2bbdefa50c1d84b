//! `fuse explore` (ranked fusion plans) and `fuse explain` (why calls share a kernel or not),
//! for the backend `fuse run` would use (or `--backend`): ranked by its timing table, at the
//! sizes in force, in its words — passes, threads and tiles on the CPU; kernels, blocks and
//! shared memory on a GPU.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};

use fuse::stages::fuse_core::distribute::{distribute, Links, Step};
use fuse::stages::fuse_core::explore::{explore, Exploration, GpuLayout, Kernel, Limits, Plan, TimingTable, Verdict};
use fuse::stages::fuse_core::{Library, Program};
use fuse::stages::fuse_cpu::fused::{FusedPlan, SimdLevel};

use crate::args::{load, parse_size, Backend};
use crate::failure::{bad_input, failure, internal, stdout, Failure};

/// Where the explorer's inputs come from, shared by both commands.
#[derive(Args)]
pub struct Inputs {
    /// Script file.
    script: PathBuf,
    /// The backend whose plans to rank, in its words; without it, the one `fuse run` would use
    /// here (the GPU when one is usable, else the CPU).
    #[arg(long, value_enum)]
    backend: Option<Backend>,
    /// Timing table (YAML) to predict with, of the backend's kind of machine; without it, the
    /// one the backend ranks by (see `fuse calibrate`).
    #[arg(long, value_name = "FILE")]
    timings: Option<PathBuf>,
    /// Override a size of the script, e.g. --size m=1000 (repeatable).
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    sizes: Vec<(String, usize)>,
}

/// Options of `fuse explore`.
#[derive(Args)]
pub struct ExploreArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// How many of the best plans to print.
    #[arg(long, value_name = "K", default_value_t = 3)]
    top: usize,
    /// Print every plan, best first (instead of --top).
    #[arg(long)]
    all: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Options of `fuse explain`.
#[derive(Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    inputs: Inputs,
    /// Explain the program split over R ranks (as `mpirun -n R fuse run --distributed` runs
    /// it): each value's distribution, the collectives between the parts, and each part's best
    /// plan on rank 0's rows.
    #[arg(long, value_name = "R", value_parser = clap::value_parser!(u32).range(1..))]
    ranks: Option<u32>,
    /// With --ranks: the links table collectives are timed by (written by `mpirun -n R fuse
    /// calibrate --distributed -o FILE`); without it, an estimate for ranks on one machine.
    #[arg(long, value_name = "FILE", requires = "ranks")]
    links: Option<PathBuf>,
}

/// What an exploration needs: the program at the sizes in force, the backend and its table.
struct Prepared {
    program: Program,
    backend: fuse::Backend,
    table: TimingTable,
}

impl Prepared {
    fn new(inputs: &Inputs, library: &Library) -> Result<Prepared, Failure> {
        let mut program = load(&inputs.script, library)?;
        // The sizes in force, so that the header says what was explored.
        program.sizes = crate::args::bind_sizes(&program, &inputs.sizes)?;
        let backend = inputs.backend.map_or_else(fuse::Backend::detect, fuse::Backend::from);
        let chosen = backend
            .timing_table(library, inputs.timings.as_deref())
            .map_err(failure)?
            .ok_or_else(|| bad_input("--backend reference runs call by call: it has no plans to explore"))?;
        if let Some(note) = chosen.note {
            eprintln!("{note}");
        }
        Ok(Prepared {
            program,
            backend,
            table: chosen.table,
        })
    }

    fn explored(&self, library: &Library) -> Result<Exploration<'_>, Failure> {
        explore(
            &self.program,
            &self.program.sizes,
            &self.table,
            library,
            Limits::default(),
        )
        .map_err(bad_input)
    }

    /// The header: the program, the backend (on the CPU, with the instruction set its kernels
    /// run in) and the table.
    fn header(&self, ex: &Exploration) -> Result<String, Failure> {
        let backend = match self.backend {
            fuse::Backend::Cpu => format!("cpu, {}", SimdLevel::shared().map_err(bad_input)?.describe()),
            ref b => b.to_string(),
        };
        Ok(format!(
            "{}\nbackend: {backend}\ntimings: {}\n",
            self.program, ex.timings
        ))
    }

    /// Which plans these are, and where else their ranks mean the same.
    fn ranks(&self) -> String {
        let b = &self.backend;
        match b {
            fuse::Backend::Cpu => format!(
                "ranked for the {b} backend by these timings (`fuse compile --plan RANK` ranks GPU plans: see --backend emulate or cuda)"
            ),
            _ => format!(
                "ranked for the {b} backend by these timings (`fuse compile --backend {b} --plan RANK` writes plan RANK)"
            ),
        }
    }

    /// `plan` described in the words of the backend.
    fn describe(&self, plan: &Plan) -> Result<String, Failure> {
        Ok(match self.backend {
            fuse::Backend::Cpu => {
                let cpu = FusedPlan::new(self.program.clone(), &self.program.sizes, plan).map_err(internal)?;
                plan.describe(&self.program, &cpu)
            }
            _ => plan.describe(&self.program, &GpuLayout),
        })
    }
}

/// `fuse explore`: the best plans (or all), with the total number of plans.
pub fn run_explore(args: &ExploreArgs, library: &Library) -> Result<(), Failure> {
    let prepared = Prepared::new(&args.inputs, library)?;
    let program = &prepared.program;
    let ex = prepared.explored(library)?;
    let count = ex.count();
    let wanted = if args.all { ex.limits.max_plans } else { args.top };
    if !args.json {
        print!("{}", prepared.header(&ex)?);
        println!("plans: {count} in total, {}", prepared.ranks());
        ex.notes.iter().for_each(|n| println!("note: {n}"));
    }
    // Plans are printed as they come, so that --all never holds them all.
    let mut plans = ex.plans();
    let mut listed = Vec::new();
    for plan in plans.by_ref().take(wanted) {
        match args.json {
            true => listed.push(plan_json(program, &plan)),
            false => print!("\n{}", prepared.describe(&plan)?),
        }
    }
    let mut notes = ex.notes.clone();
    if args.all && plans.next().is_some() {
        notes.push(format!("--all lists at most {wanted} plans; more exist"));
    }
    if plans.budget_exhausted() {
        notes.push(format!(
            "the search expanded its limit of {} partial plans: plans after that point are greedy completions, the best found rather than guaranteed in order",
            ex.limits.max_search_nodes
        ));
    }
    if args.json {
        let object = json!({
            "script": args.inputs.script.display().to_string(),
            "backend": prepared.backend.to_string(),
            "sizes": program.sizes.iter().collect::<std::collections::BTreeMap<_, _>>(),
            "timings": ex.timings,
            "implementations": u64::try_from(count.count).unwrap_or(u64::MAX),
            "implementations_exact": count.exact,
            "notes": notes,
            "plans": listed,
        });
        println!("{object:#}");
    } else {
        notes[ex.notes.len()..].iter().for_each(|n| println!("\nnote: {n}"));
    }
    Ok(())
}

fn plan_json(program: &Program, plan: &Plan) -> Value {
    json!({
        "rank": plan.rank,
        "predicted_us": plan.predicted_us,
        "kernels": plan.kernels.iter().map(|k| kernel_json(program, k)).collect::<Vec<_>>(),
    })
}

fn kernel_json(program: &Program, k: &Kernel) -> Value {
    let names = |ids: &[usize]| {
        ids.iter()
            .map(|&v| program.values[v].variable.clone())
            .collect::<Vec<_>>()
    };
    json!({
        "calls": k.calls.iter().map(|&c| program.calls[c].text.clone()).collect::<Vec<_>>(),
        "variants": k.variants,
        "predicted_us": k.predicted.total_us,
        "transfer_us": k.predicted.transfer_us,
        "compute_us": k.predicted.compute_us,
        "launch_us": k.predicted.launch_us,
        "finish_us": k.predicted.finish_us,
        "block": k.launch.block.threads,
        "instances_per_block": k.launch.block.instances,
        "serial_iterations": k.launch.serial_iterations,
        "walk": k.launch.walk,
        "blocks": k.launch.blocks,
        "shared_bytes": k.launch.shared_bytes,
        "loads": names(&k.loads),
        "stores": names(&k.stores),
        "on_chip": names(&k.on_chip),
        "reductions": k.launch.reductions.iter().map(|r| json!({
            "call": program.calls[r.call].text,
            "finish": r.finish,
        })).collect::<Vec<_>>(),
    })
}

/// `fuse explain`: for every pair of calls that share data, fused in the best plan or why not.
/// Written through one buffer: a script whose calls share an input has the square of its calls
/// in pairs, and a write per line took as long as explaining them.
pub fn run_explain(args: &ExplainArgs, library: &Library) -> Result<(), Failure> {
    let prepared = Prepared::new(&args.inputs, library)?;
    if let Some(ranks) = args.ranks {
        let links = match &args.links {
            Some(path) => Links::load(path).map_err(bad_input)?,
            None => Links::estimate(),
        };
        return explain_distributed(&prepared, ranks as usize, &links, library);
    }
    let program = &prepared.program;
    let ex = prepared.explored(library)?;
    let words = ex.words();
    let best = ex.best();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    write!(out, "{}", prepared.header(&ex)?).map_err(stdout)?;
    writeln!(
        out,
        "best plan: {}, {:.2} µs",
        words.kernels(best.kernels.len()),
        best.predicted_us
    )
    .map_err(stdout)?;
    write!(out, "{}", prepared.describe(&best)?).map_err(stdout)?;
    let pairs = ex.explain(&best);
    if pairs.is_empty() {
        writeln!(out, "no two calls share data").map_err(stdout)?;
    }
    for pair in pairs {
        let shared: Vec<&str> = pair
            .values
            .iter()
            .map(|&v| program.values[v].variable.as_str())
            .collect();
        let (first, second) = (&program.calls[pair.first].text, &program.calls[pair.second].text);
        let verdict = match pair.verdict {
            Verdict::Fused { kernel } => format!("fused in {} {kernel}", words.kernel()),
            Verdict::Apart { why, message } => format!("apart ({why})\n  {message}"),
        };
        writeln!(out, "\n{first}  ·  {second}\n  share {}: {verdict}", shared.join(", ")).map_err(stdout)?;
    }
    out.flush().map_err(stdout)
}

/// `fuse explain --ranks R`: the distributed plan, what each collective moves and costs and
/// why it is there, and the best local plan of each part on rank 0.
fn explain_distributed(prepared: &Prepared, ranks: usize, links: &Links, library: &Library) -> Result<(), Failure> {
    let program = &prepared.program;
    let d = distribute(program, library).map_err(bad_input)?;
    let blocks = d.blocks(&program.sizes, ranks).map_err(bad_input)?;
    println!(
        "{program}\nbackend: {} on each of {ranks} ranks; local scripts at rank 0's sizes (`{}` = {} of `{}`)\n\n{}",
        prepared.backend,
        d.local_symbol,
        blocks.rows(0),
        d.split,
        d.on_rank(&program.sizes, &blocks, 0)
    );
    println!(
        "collectives at {} (links: {:.1} µs a step, {:.1} GB/s a rank; {}):",
        program.sizes, links.latency_us, links.bandwidth_gbs, links.measured_on
    );
    let mut total_us = 0.0;
    for step in &d.steps {
        let Step::Convert(c) = step else { continue };
        let bytes = d.elements_received(c, &program.sizes, ranks) * program.precision.bytes();
        let us = links.time_us(c.transfer, bytes, ranks);
        if us == 0.0 {
            continue;
        }
        total_us += us;
        let why: Vec<String> = (d.readers(c.to).iter())
            .map(|&k| format!("read by `{}`", program.calls[k].text))
            .chain(d.results.contains(&c.to).then(|| "an output".to_string()))
            .collect();
        println!(
            "  `{}`: {} a rank, {us:.1} µs ({})",
            d.name(c.to),
            fuse::stages::fuse_core::data::bytes(bytes),
            why.join("; ")
        );
    }
    for (k, segment) in d.segments.iter().enumerate() {
        let mut local = Prepared {
            program: segment.program.clone(),
            backend: prepared.backend.clone(),
            table: prepared.table.clone(),
        };
        local.program.sizes = d.local_sizes(&program.sizes, &blocks, 0);
        let ex = local.explored(library)?;
        let best = ex.best();
        total_us += best.predicted_us;
        println!(
            "\npart {} on rank 0 ({}): {}, {:.2} µs",
            k + 1,
            local.program.sizes,
            ex.words().kernels(best.kernels.len()),
            best.predicted_us
        );
        print!("{}", local.describe(&best)?);
    }
    println!("\npredicted per run: {total_us:.1} µs (the parts on rank 0 and every collective)");
    Ok(())
}
