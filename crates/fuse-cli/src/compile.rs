//! `fuse compile`: the generator's output for a plan, written out (a lower stage: it uses the
//! generator and NVRTC through `fuse::stages`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use fuse::stages::fuse_codegen::generate::{generate_plan, Step};
use fuse::stages::fuse_codegen::nvrtc::{self, Arch, CompileOptions, NvrtcError};
use fuse::stages::fuse_codegen::{profile, sass};
use fuse::stages::fuse_core::{explore, file, Library, Limits, Plan, Program, Sizes, TimingTable};

use crate::args::Backend;
use crate::failure::{bad_input, failure, stdout, Failure};

/// The plan of predicted rank `rank` among `backend`'s plans by `table`, and a line saying
/// which it is: a rank means something only within one backend and one table.
fn ranked_plan(
    program: &Program,
    sizes: &Sizes,
    library: &Library,
    (backend, table): (&fuse::Backend, &TimingTable),
    rank: usize,
) -> Result<(Plan, String), Failure> {
    let exploration = explore(program, sizes, table, library, Limits::default()).map_err(bad_input)?;
    if rank == 0 {
        return Err(bad_input("--plan 0: plans are ranked from 1 (the best predicted)"));
    }
    let count = exploration.count();
    let plan = (exploration.plans().nth(rank - 1))
        .ok_or_else(|| bad_input(format!("--plan {rank}: {} has only {count} plan(s)", program.file)))?;
    let said = format!(
        "plan {rank} of {count} for the {backend} backend, ranked by timings: {} (`fuse explore --backend {backend}` lists them)",
        exploration.timings
    );
    Ok((plan, said))
}

/// The backend whose plans `fuse compile` ranks: one that runs generated CUDA — as asked, else
/// the GPU here, else its emulation.
fn generating_backend(asked: Option<Backend>) -> Result<fuse::Backend, Failure> {
    match asked {
        Some(b @ (Backend::Cuda | Backend::Emulate)) => Ok(b.into()),
        Some(other) => {
            let name = fuse::Backend::from(other);
            Err(bad_input(format!(
                "--backend {name}: fuse compile writes the CUDA of a GPU plan: use --backend cuda or emulate (`fuse explore --backend {name}` shows the {name} backend's plans)"
            )))
        }
        None => match fuse::Backend::detect() {
            gpu @ fuse::Backend::Cuda { .. } => Ok(gpu),
            _ => Ok(fuse::Backend::Emulate),
        },
    }
}

/// What `plan.yaml` holds: the plan, and how to launch its kernels.
#[derive(Serialize)]
struct PlanFile<'a> {
    script: &'a str,
    sizes: Vec<(&'a str, usize)>,
    plan: &'a Plan,
    buffers: Vec<&'a str>,
    /// Scratch memory of each run, numbers per reduction (`scratch` launch arguments).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    scratch: Vec<(&'a str, usize)>,
    steps: &'a [Step],
}

/// Options of `fuse compile`.
pub struct CompileArgs {
    pub out: PathBuf,
    pub rank: usize,
    pub backend: Option<Backend>,
    pub timings: Option<PathBuf>,
    pub arch: String,
}

/// Writes source, plan and (where NVRTC is available) PTX and resource report to `args.out`.
pub fn compile(program: &Program, sizes: &Sizes, library: &Library, args: &CompileArgs) -> Result<(), Failure> {
    let arch: Arch = args.arch.parse().map_err(bad_input)?;
    let backend = generating_backend(args.backend)?;
    let chosen = (backend.timing_table(library, args.timings.as_deref()))
        .map_err(failure)?
        .expect("a backend of generated code ranks plans");
    if let Some(note) = chosen.note {
        eprintln!("{note}");
    }
    let table = chosen.table;
    let (plan, said) = ranked_plan(program, sizes, library, (&backend, &table), args.rank)?;
    show(&format!("{said}\n"))?;
    let generated = generate_plan(program, &plan).map_err(bad_input)?;
    let out = &args.out;
    clear_earlier_compile(out)?;
    std::fs::create_dir_all(out).map_err(|e| bad_input(format!("-o {}: {e}", out.display())))?;
    let write = |name: String, text: &str| -> Result<PathBuf, Failure> {
        let path = out.join(name);
        std::fs::write(&path, text).map_err(|e| Failure {
            code: 1,
            message: format!("cannot write {}: {e}", path.display()),
        })?;
        show(&format!("wrote {}\n", path.display()))?;
        Ok(path)
    };
    write(format!("{}.cu", program.name), &generated.source)?;
    let file = PlanFile {
        script: &program.file,
        sizes: sizes.iter().collect(),
        plan: &plan,
        buffers: generated
            .buffers
            .iter()
            .map(|&v| program.values[v].name.as_str())
            .collect(),
        scratch: generated
            .scratch
            .iter()
            .map(|s| (program.values[s.value].name.as_str(), s.len))
            .collect(),
        steps: &generated.steps,
    };
    let yaml = serde_yaml::to_string(&file).map_err(|e| bad_input(format!("cannot serialise the plan: {e}")))?;
    write("plan.yaml".to_string(), &yaml)?;
    let options = CompileOptions {
        arch,
        name: format!("{}.cu", program.name),
        ..CompileOptions::default()
    };
    match nvrtc::compile(&generated.source, &options) {
        Ok(compiled) => {
            write(format!("{}.{arch}.ptx", program.name), &compiled.ptx)?;
            write("resources.txt".to_string(), &resource_report(&compiled.resources))?;
            let functions = match sass::disassemble(&compiled.cubin) {
                Ok(listing) => {
                    write(format!("{}.{arch}.sass", program.name), &listing)?;
                    sass::parse(&listing)
                }
                // Named explicitly and not there: the setting is wrong.
                Err(e @ sass::SassError::NotFound { .. }) if named(sass::NVDISASM_ENV) => {
                    return Err(bad_input(e));
                }
                Err(e) => {
                    eprintln!("note: {e}; profile.txt leaves out the hot loops");
                    Vec::new()
                }
            };
            let kernels = profile::profile(
                &generated,
                &compiled.ptx,
                &compiled.resources,
                &functions,
                sizes,
                &table.device,
            );
            let report = profile::table(&kernels);
            write("profile.txt".to_string(), &report)?;
            show(&report)?;
            Ok(())
        }
        // Named explicitly and not loadable: the setting is wrong, so say where it points.
        Err(e @ (NvrtcError::NotFound { .. } | NvrtcError::Conflict { .. })) if named(nvrtc::LIB_ENV) => {
            Err(bad_input(format!("{}: {e}", nvrtc::LIB_ENV)))
        }
        Err(NvrtcError::NotFound { .. }) => {
            eprintln!("note: NVRTC is not available here, so the source was written but not compiled (set FUSE_NVRTC_LIB; see tests/requirements.txt)");
            Ok(())
        }
        Err(e @ (NvrtcError::Compile { .. } | NvrtcError::InvalidInput(_))) => Err(Failure {
            code: 1,
            message: format!("generated source failed to compile (a fuse bug, please report): {e}"),
        }),
        Err(e) => Err(Failure {
            code: 1,
            message: format!("NVRTC: {e}"),
        }),
    }
}

/// Writes `text` to standard output; a reader that stopped early (`| head`) ends the run quietly.
fn show(text: &str) -> Result<(), Failure> {
    std::io::stdout().write_all(text.as_bytes()).map_err(stdout)
}

/// Whether the user set environment variable `name` (`FUSE_NVRTC_LIB`, `FUSE_NVDISASM`).
fn named(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Whether `name` is one of the files `fuse compile` writes.
fn written_by_compile(name: &str) -> bool {
    matches!(name, "plan.yaml" | "resources.txt" | "profile.txt")
        || [".cu", ".ptx", ".sass"].iter().any(|e| name.ends_with(e))
}

/// Makes `out` ready for a compile: absent, empty, or the folder of an earlier compile (a
/// `plan.yaml` of fuse's and only files compile writes), whose files are removed so that
/// nothing of it is left beside the new ones. Any other folder is the user's: refused.
fn clear_earlier_compile(out: &Path) -> Result<(), Failure> {
    let Ok(entries) = std::fs::read_dir(out) else {
        return match out.exists() {
            true => Err(bad_input(format!("-o {}: not a folder", out.display()))),
            false => Ok(()),
        };
    };
    let names: Vec<String> = entries
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .map_err(|e| bad_input(format!("-o {}: {e}", out.display())))?;
    let plan_of_fuse = file::read_text(&out.join("plan.yaml"), file::ENTRY_LIMIT)
        .is_ok_and(|text| text.contains("\nsteps:") && text.starts_with("script:"));
    if names.is_empty() {
        return Ok(());
    }
    if !plan_of_fuse || !names.iter().all(|n| written_by_compile(n)) {
        return Err(bad_input(format!(
            "-o {}: the folder holds files `fuse compile` did not write: choose a new or empty folder",
            out.display()
        )));
    }
    for name in names {
        let path = out.join(&name);
        std::fs::remove_file(&path).map_err(|e| bad_input(format!("cannot remove {}: {e}", path.display())))?;
    }
    Ok(())
}

fn resource_report(resources: &[nvrtc::KernelResources]) -> String {
    let mut s =
        String::from("kernel                                   arch   regs  smem_B  stack_B  spill_st_B  spill_ld_B\n");
    for r in resources {
        s.push_str(&format!(
            "{:<40} {:<6} {:>4}  {:>6}  {:>7}  {:>10}  {:>10}\n",
            r.kernel, r.arch, r.registers, r.shared_bytes, r.stack_bytes, r.spill_stores_bytes, r.spill_loads_bytes
        ));
    }
    s
}
