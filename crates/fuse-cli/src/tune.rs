//! `fuse tune`: the measured-fastest of the best predicted plans, remembered per GPU.

use std::path::PathBuf;

use clap::Args;
use serde_json::json;

use fuse::stages::fuse_core::explore::library_checksum;
use fuse::stages::fuse_core::{Library, Program};
use fuse::stages::fuse_cuda::timer::TimingOptions;
use fuse::stages::fuse_cuda::tune::{tune, Entry, TuneCache, TuneOptions, Tuned};

use crate::args::{load, parse_size};
use crate::calibrate::progress_bar;
use crate::failure::failure;
use crate::failure::Failure;
use crate::gpu;

/// Options of `fuse tune`.
#[derive(Args)]
pub struct TuneArgs {
    /// Script file.
    script: PathBuf,
    /// How many of the best predicted plans to time.
    #[arg(long, value_name = "K", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..))]
    top: u32,
    /// Override a size of the script, e.g. --size m=8192 (repeatable).
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    sizes: Vec<(String, usize)>,
    /// GPU to tune on.
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// Timing table to rank plans with, instead of this GPU's.
    #[arg(long, value_name = "FILE")]
    timings: Option<PathBuf>,
    /// Timed runs per plan (after warm-up); the median is reported.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Do not remember the fastest plan.
    #[arg(long)]
    no_save: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// `fuse tune`.
pub fn run(args: &TuneArgs, library: &Library) -> Result<(), Failure> {
    let program = load(&args.script, library)?;
    let sizes = crate::args::bind_sizes(&program, &args.sizes)?;
    let device = gpu::open(args.device)?;
    let table = gpu::table(device.info(), library, args.timings.as_deref())?;
    let options = TuneOptions {
        top: args.top as usize,
        timing: TimingOptions {
            runs: args.runs as usize,
            ..TimingOptions::default()
        },
        ..TuneOptions::default()
    };
    let bar = progress_bar(options.top);
    let tuned = tune(&device, &program, &sizes, library, &table, &options, &mut |step| {
        bar.set_length(step.total as u64);
        bar.set_position(step.done as u64);
        bar.set_message(format!("{} plan {}", program.name, step.rank));
    })
    .map_err(failure)?;
    bar.finish_and_clear();
    let saved = match args.no_save || args.timings.is_some() {
        true => None,
        false => Some(remember(&tuned, &program, &sizes, library, &device)?),
    };
    match args.json {
        true => print_json(&tuned, &program, &sizes.to_string(), &table.describe()),
        false => print_table(&tuned, &program, &sizes.to_string(), &table.describe(), saved),
    }
    Ok(())
}

/// Stores the fastest plan in the GPU's tune cache; returns where.
fn remember(
    tuned: &Tuned,
    program: &Program,
    sizes: &fuse::stages::fuse_core::Sizes,
    library: &Library,
    device: &fuse::stages::fuse_cuda::Device,
) -> Result<PathBuf, Failure> {
    let cache = TuneCache::for_gpu(device.info());
    let best = tuned.best();
    let entry = Entry {
        library: library_checksum(library),
        plan: best.plan.clone(),
        measured_us: best.measured.median_us,
        timed: tuned.candidates.len(),
    };
    cache.put(program, sizes, entry).map_err(failure)?;
    cache.path().map_err(failure)
}

fn print_table(tuned: &Tuned, program: &Program, sizes: &str, timings: &str, saved: Option<PathBuf>) {
    println!("{} at {sizes}", program.file);
    println!("plans ranked by: {timings}");
    println!(
        "{:>5} {:>8} {:>13} {:>13} {:>10} {:>10}",
        "rank", "kernels", "predicted µs", "measured µs", "spread µs", "% fastest"
    );
    let fastest = tuned.best().measured.median_us;
    for c in &tuned.candidates {
        let mark = if std::ptr::eq(c, tuned.best()) {
            " ← fastest"
        } else {
            ""
        };
        println!(
            "{:>5} {:>8} {:>13.1} {:>13.1} {:>10.1} {:>9.1}%{mark}",
            c.plan.rank,
            c.plan.kernels.len(),
            c.plan.predicted_us,
            c.measured.median_us,
            c.measured.max_us - c.measured.min_us,
            100.0 * fastest / c.measured.median_us
        );
    }
    println!(
        "prediction: the fastest plan was predicted rank {}; the first predicted plan runs at {:.1}% of the fastest",
        tuned.rank_of_fastest(),
        tuned.first_pct_of_fastest()
    );
    if let Some(path) = saved {
        println!(
            "remembered in {}: `fuse run --backend cuda` runs plan {} for this script and sizes",
            path.display(),
            tuned.rank_of_fastest()
        );
    }
}

fn print_json(tuned: &Tuned, program: &Program, sizes: &str, timings: &str) {
    let candidates: Vec<serde_json::Value> = tuned
        .candidates
        .iter()
        .map(|c| {
            json!({
                "rank": c.plan.rank,
                "kernels": c.plan.kernels.len(),
                "predicted_us": c.plan.predicted_us,
                "measured_us": c.measured.median_us,
                "min_us": c.measured.min_us,
                "max_us": c.measured.max_us,
            })
        })
        .collect();
    let object = json!({
        "script": program.file,
        "sizes": sizes,
        "timings": timings,
        "fastest_rank": tuned.rank_of_fastest(),
        "first_pct_of_fastest": tuned.first_pct_of_fastest(),
        "candidates": candidates,
    });
    println!("{object}");
}
