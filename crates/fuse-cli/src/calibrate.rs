//! `fuse calibrate`: measure this machine and write a timing table for the explorer.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};

use fuse::stages::fuse_core::{file, Library};
use fuse::stages::fuse_cpu::fused::calibrate::{calibrate, to_yaml, Budget};
use fuse::stages::fuse_cpu::fused::timings;
use fuse::stages::fuse_cuda::calibrate::{self as gpu_calibrate, CalibrateOptions};

use crate::failure::failure;
use crate::failure::{bad_input, internal, Failure};
use crate::gpu;

/// Options of `fuse calibrate`.
#[derive(Args)]
pub struct CalibrateArgs {
    /// What to calibrate: `cuda` a GPU, `cpu` this machine's CPU and memory (works anywhere);
    /// without it, the GPU when one is there, else the CPU.
    #[arg(long, value_enum)]
    backend: Option<Target>,
    /// Where to write a copy of the table (YAML). The table is always installed where `fuse run`,
    /// `explore` and `bench` look for it: by GPU, or for the CPU by its key (instruction set,
    /// caches, threads).
    #[arg(short = 'o', long = "out", value_name = "FILE")]
    out: Option<PathBuf>,
    /// GPU to calibrate (cuda).
    #[arg(long, value_name = "N", default_value_t = 0)]
    device: usize,
    /// Measure the links between MPI ranks instead (run under `mpirun -n R`; needs fuse built
    /// with the `mpi` feature): the latency and bandwidth `fuse explain --ranks R --links FILE`
    /// times collectives by. Rank 0 writes the table.
    #[arg(long, conflicts_with = "backend")]
    distributed: bool,
}

/// The backends that can be calibrated.
#[derive(Clone, Copy, ValueEnum)]
enum Target {
    /// The fused CPU backend: copy bandwidth, arithmetic peaks, the cost of a parallel
    /// section, and each library function's compute time.
    Cpu,
    /// A GPU: copy bandwidth, launch overhead, arithmetic peaks, and every library routine in
    /// simulated fusion environments.
    Cuda,
}

/// A progress bar on the terminal (hidden when standard error is not one).
pub fn progress_bar(len: usize) -> ProgressBar {
    let bar = ProgressBar::new(len as u64);
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// `fuse calibrate`: the backend asked for, or the GPU when one is there, else the CPU.
pub fn run(args: &CalibrateArgs, library: &Library) -> Result<(), Failure> {
    if args.distributed {
        return run_links(args);
    }
    if let Some(path) = &args.out {
        check_out(path, false)?;
    }
    let target = args.backend.unwrap_or_else(|| match fuse::select::usable_gpu() {
        Ok(gpu) => {
            eprintln!("calibrating: cuda ({})", gpu.describe());
            Target::Cuda
        }
        Err(e) => {
            eprintln!("calibrating: cpu ({})", e);
            Target::Cpu
        }
    });
    match target {
        Target::Cpu => run_cpu(args, library),
        Target::Cuda => run_cuda(args, library),
    }
}

/// Refuses `-o` over anything but a table of the kind written (a timing table, or with
/// `links` a links table), before minutes of measuring: the file may be the user's.
fn check_out(path: &Path, links: bool) -> Result<(), Failure> {
    let text = match file::read_text(path, file::ENTRY_LIMIT) {
        Ok(text) => text,
        // Nothing there, or unreadable: writing will say so.
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::PermissionDenied) && !dangling(path) => {
            return Ok(())
        }
        // A folder, a FIFO (which would block the write), a dangling link, a huge file.
        Err(e) if e.kind() != ErrorKind::InvalidData => return Err(bad_input(format!("-o {}: {e}", path.display()))),
        Err(_) => String::new(),
    };
    let is_table = match serde_yaml::from_str::<serde_yaml::Value>(&text) {
        Ok(serde_yaml::Value::Mapping(m)) if links => m.contains_key("latency_us"),
        Ok(serde_yaml::Value::Mapping(m)) => m.contains_key("routines") && m.contains_key("device"),
        _ => false,
    };
    match is_table {
        true => Ok(()),
        false => Err(bad_input(format!(
            "-o {}: refusing to overwrite a file that is not a {} table",
            path.display(),
            if links { "links" } else { "timing" }
        ))),
    }
}

/// Whether `path` is a link that leads nowhere.
fn dangling(path: &Path) -> bool {
    file::is_there(path) && !path.exists()
}

/// `fuse calibrate --backend cuda`: measures GPU `--device`, installs the table for that GPU
/// and writes it to `-o FILE` too.
fn run_cuda(args: &CalibrateArgs, library: &Library) -> Result<(), Failure> {
    let device = gpu::open(args.device)?;
    let options = CalibrateOptions::default();
    let bar = progress_bar(0);
    let started = std::time::Instant::now();
    let calibration = gpu_calibrate::calibrate(&device, library, &options, &mut |step| {
        bar.set_length(step.total as u64);
        bar.set_position(step.done as u64);
        bar.set_message(step.what.to_string());
        if bar.is_hidden() {
            // Minutes of work with no terminal (a log): a line per step says where it is.
            let seconds = started.elapsed().as_secs();
            eprintln!(
                "calibrating {} of {}: {} ({seconds} s)",
                step.done + 1,
                step.total,
                step.what
            );
        }
    })
    .map_err(failure)?;
    bar.finish_and_clear();
    for note in &calibration.notes {
        eprintln!("note: {note}");
    }
    let model = &calibration.table.model;
    eprintln!(
        "{}: copy {:.1} GB/s, launch {:.2} µs, peak {:.0}/{:.0} GFLOP/s (f32/f64), {} kernels, {} routine times",
        calibration.table.device.name,
        model.bandwidth_gb_s,
        model.launch_us,
        model.peak_gflop_s.f32,
        model.peak_gflop_s.f64,
        calibration.kernels,
        calibration.table.routines.len()
    );
    let yaml = gpu_calibrate::to_yaml(&calibration, &options);
    let installed = fuse::stages::fuse_cuda::timings::install(device.info(), &yaml).map_err(failure)?;
    eprintln!("wrote {}", installed.display());
    if let Some(path) = &args.out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| bad_input(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(path, &yaml).map_err(|e| bad_input(format!("{}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    eprintln!("`fuse run`, `explore`, `bench` and `tune` use it on this GPU from now on");
    Ok(())
}

/// `fuse calibrate --distributed`: measures the links between the ranks; rank 0 writes them.
/// A failure is every rank's, said once.
#[cfg(feature = "mpi")]
fn run_links(args: &CalibrateArgs) -> Result<(), Failure> {
    use crate::distributed::{agree, on_ranks};
    use fuse::distributed::{measure_links, Communicator};
    on_ranks(|comm| {
        let out = args.out.as_deref().filter(|_| comm.rank() == 0);
        agree(
            comm,
            out.map_or(Ok(()), |path| check_out(path, true)).map_err(|f| f.message),
        )?;
        let links = measure_links(comm).map_err(failure)?;
        agree(
            comm,
            if comm.rank() == 0 {
                write_links(&links, out)
            } else {
                Ok(())
            },
        )
    })
}

/// Rank 0's links, to `out` or standard output.
#[cfg(feature = "mpi")]
fn write_links(links: &fuse::stages::fuse_core::distribute::Links, out: Option<&Path>) -> Result<(), String> {
    eprintln!(
        "{}: {:.2} µs a step, {:.2} GB/s a rank",
        links.measured_on, links.latency_us, links.bandwidth_gbs
    );
    match out {
        None => print!("{}", links.to_yaml()),
        Some(path) => {
            std::fs::write(path, links.to_yaml()).map_err(|e| format!("-o {}: {e}", path.display()))?;
            eprintln!(
                "wrote {0}; use it with `fuse explain --ranks R --links {0}`",
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(not(feature = "mpi"))]
fn run_links(_: &CalibrateArgs) -> Result<(), Failure> {
    Err(bad_input(
        "--distributed: this fuse was built without MPI. Build it with `cargo build --release --features mpi` and \
         run `mpirun -n R fuse calibrate --distributed`",
    ))
}

/// `fuse calibrate --backend cpu`: measures, installs the table for this CPU's key and writes
/// it to `-o FILE` too.
fn run_cpu(args: &CalibrateArgs, library: &Library) -> Result<(), Failure> {
    let bar = progress_bar(0);
    let calibration = calibrate(library, Budget::FULL, &mut |step| {
        bar.set_length(step.total as u64);
        bar.set_position(step.done as u64);
        bar.set_message(step.what.to_string());
    })
    .map_err(internal)?;
    bar.finish_and_clear();
    for note in &calibration.notes {
        eprintln!("note: {note}");
    }
    let yaml = to_yaml(&calibration.table, Budget::FULL);
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
    let installed = timings::install(&yaml).map_err(failure)?;
    eprintln!("wrote {}", installed.display());
    if let Some(path) = &args.out {
        std::fs::write(path, yaml).map_err(|e| bad_input(format!("-o {}: {e}", path.display())))?;
        eprintln!(
            "wrote {0}; another machine's CPU backend uses it with {1}={0}",
            path.display(),
            timings::ENV
        );
    }
    eprintln!(
        "`fuse run`, `explore`, `bench` and `tune` use it on this CPU ({}) from now on, unless {}=0",
        timings::describe(&timings::this_cpu().map_err(failure)?),
        timings::CALIBRATE_ENV
    );
    Ok(())
}
