//! `fuse explore` (ranked fusion plans) and `fuse explain` (why calls share a kernel or not).

use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};

use fuse::stages::fuse_core::explore::{explore, Exploration, Kernel, Limits, Plan, TimingTable, Verdict};
use fuse::stages::fuse_core::{Library, Program};

use crate::args::{load, parse_size};
use crate::failure::{bad_input, Failure};

/// Where the explorer's inputs come from, shared by both commands.
#[derive(Args)]
pub struct Inputs {
    /// Script file.
    script: PathBuf,
    /// Timing table (YAML) to predict with; without it, this GPU's (see `fuse calibrate`) or,
    /// without a GPU, the built-in analytic H100 estimate.
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
}

/// The program and timing table an exploration needs.
fn prepare(inputs: &Inputs, library: &Library) -> Result<(Program, TimingTable), Failure> {
    let mut program = load(&inputs.script, library)?;
    // The sizes in force, so that the header says what was explored.
    program.sizes = crate::args::bind_sizes(&program, &inputs.sizes)?;
    let table = crate::gpu::generator_table(library, inputs.timings.as_deref())?;
    Ok((program, table))
}

fn explored<'p>(program: &'p Program, table: &TimingTable, library: &Library) -> Result<Exploration<'p>, Failure> {
    explore(program, &program.sizes, table, library, Limits::default()).map_err(bad_input)
}

/// `fuse explore`: the best plans (or all), with the total number of plans.
pub fn run_explore(args: &ExploreArgs, library: &Library) -> Result<(), Failure> {
    let (program, table) = prepare(&args.inputs, library)?;
    let ex = explored(&program, &table, library)?;
    let count = ex.count();
    let wanted = if args.all { ex.limits.max_plans } else { args.top };
    if !args.json {
        println!("{program}");
        println!("plans: {count} in total");
        println!("timings: {}", ex.timings);
        ex.notes.iter().for_each(|n| println!("note: {n}"));
    }
    // Plans are printed as they come, so that --all never holds them all.
    let mut plans = ex.plans();
    let mut listed = Vec::new();
    for plan in plans.by_ref().take(wanted) {
        match args.json {
            true => listed.push(plan_json(&program, &plan)),
            false => print!("\n{}", plan.describe(&program)),
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
pub fn run_explain(args: &ExplainArgs, library: &Library) -> Result<(), Failure> {
    let (program, table) = prepare(&args.inputs, library)?;
    let ex = explored(&program, &table, library)?;
    let best = ex.best();
    println!("{program}");
    let kernels = best.kernels.len();
    let s = if kernels == 1 { "" } else { "s" };
    println!("best plan: {kernels} kernel{s}, {:.2} µs", best.predicted_us);
    println!("timings: {}", ex.timings);
    let pairs = ex.explain(&best);
    if pairs.is_empty() {
        println!("no two calls share data");
    }
    for pair in pairs {
        let shared: Vec<&str> = pair
            .values
            .iter()
            .map(|&v| program.values[v].variable.as_str())
            .collect();
        println!();
        println!(
            "{}  ·  {}",
            program.calls[pair.first].text, program.calls[pair.second].text
        );
        match pair.verdict {
            Verdict::Fused { kernel } => println!("  share {}: fused in kernel {kernel}", shared.join(", ")),
            Verdict::Apart { why, message } => {
                println!("  share {}: apart ({why})", shared.join(", "));
                println!("  {message}");
            }
        }
    }
    Ok(())
}
