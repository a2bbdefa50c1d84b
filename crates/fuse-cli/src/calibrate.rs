//! `fuse calibrate`: measure this machine and write a timing table for the explorer.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use fuse_core::Library;
use fuse_cpu::fused::calibrate::{calibrate, to_yaml};
use fuse_cpu::fused::timings;

use crate::{bad_input, internal, Failure};

/// Options of `fuse calibrate`.
#[derive(Args)]
pub struct CalibrateArgs {
    /// What to calibrate: `cpu` measures this machine's CPU and memory (works anywhere).
    #[arg(long, value_enum, default_value_t = Target::Cpu)]
    backend: Target,
    /// Where to write the table (YAML); without it, standard output.
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: Option<PathBuf>,
}

/// The backends that can be calibrated.
#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// The fused CPU backend: copy bandwidth, arithmetic peaks, the cost of a parallel
    /// section, and each library function's compute time.
    Cpu,
}

/// A progress bar on the terminal (hidden when standard error is not one).
pub fn progress_bar(len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// `fuse calibrate --backend cpu`: measures, then writes the table.
pub fn run(args: &CalibrateArgs, library: &Library) -> Result<(), Failure> {
    let Target::Cpu = args.backend;
    let bar = progress_bar(0);
    let calibration = calibrate(library, &mut |step| {
        bar.set_length(step.total as u64);
        bar.set_position(step.done as u64);
        bar.set_message(step.what.to_string());
    })
    .map_err(internal)?;
    bar.finish_and_clear();
    for note in &calibration.notes {
        eprintln!("note: {note}");
    }
    let yaml = to_yaml(&calibration.table);
    let model = &calibration.table.model;
    eprintln!(
        "{}: copy {:.1} GB/s, peak {:.0}/{:.0} GFLOP/s (f32/f64), parallel section {:.1} µs, {} functions",
        calibration.table.device.name,
        model.bandwidth_gb_s,
        model.peak_gflop_s.f32,
        model.peak_gflop_s.f64,
        model.launch_us,
        calibration.table.routines.len()
    );
    match &args.out {
        None => print!("{yaml}"),
        Some(path) => {
            std::fs::write(path, yaml).map_err(|e| bad_input(format!("-o {}: {e}", path.display())))?;
            eprintln!(
                "wrote {0}; the CPU backend uses it with {1}={0}",
                path.display(),
                timings::ENV
            );
        }
    }
    Ok(())
}
