//! What a new user reads first: `--help`, the README's command table, `fuse devices` without a
//! GPU, and `fuse compile` finding the NVRTC wheel with no variable set.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};

use common::{repo, script, stderr, stdout};

fn fuse_env(args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fuse"));
    command.args(args).envs(env.iter().copied());
    for name in unset {
        command.env_remove(name);
    }
    command.output().expect("the fuse binary runs")
}

/// The subcommands `fuse --help` lists.
fn subcommands() -> Vec<String> {
    let help = stdout(&fuse_env(&["--help"], &[("COLUMNS", "1000")], &[]));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A command's line, not the continuation of a wrapped description.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

#[test]
fn the_top_level_help_says_what_fuse_is() {
    let help = stdout(&fuse_env(&["--help"], &[("COLUMNS", "1000")], &[]));
    assert!(
        help.contains("fuse is a kernel-fusion compiler and runtime for sequences of BLAS calls"),
        "{help}"
    );
    assert!(!help.contains("on the way to"), "{help}");
}

#[test]
fn the_readme_lists_every_command() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let listed: BTreeSet<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `fuse ")?.split([' ', '`']).next())
        .collect();
    let commands = subcommands();
    assert!(commands.len() >= 12, "{commands:?}");
    for command in &commands {
        assert!(
            listed.contains(command.as_str()),
            "README's command table lacks `fuse {command}`"
        );
    }
}

#[test]
fn tests_run_says_what_it_starts_before_each_long_step() {
    // Builds, installs and test runs take minutes each on a small machine: a line on stderr
    // before each, so that a quiet stretch is known for what it is.
    let text = std::fs::read_to_string(repo().join("tests/run")).unwrap();
    let lines: Vec<&str> = (text.lines().map(str::trim))
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let long = |l: &str| l.starts_with("cargo ") || l.contains(" -m pip install") || l.contains(" -m pytest");
    let steps: Vec<usize> = (0..lines.len()).filter(|&k| long(lines[k])).collect();
    assert!(steps.len() >= 7, "{steps:?}");
    for k in steps {
        let before = lines[k - 1];
        assert!(
            before.starts_with("echo \"tests/run: ") && before.ends_with(">&2"),
            "no `echo \"tests/run: …\" >&2` before `{}`",
            lines[k]
        );
    }
    assert!(lines.last().unwrap().starts_with("echo \"tests/run: all passed"));
}

#[test]
fn the_readme_script_example_checks_without_a_warning() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme.split("## Script language").nth(1).unwrap();
    let example = section.split("```yaml\n").nth(1).unwrap().split("```").next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("example.yaml");
    std::fs::write(&path, example).unwrap();
    let out = fuse_env(&["check", path.to_str().unwrap()], &[], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[test]
fn the_readme_documents_what_a_new_user_looks_for() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for needed in [
        "FUSE_CPU_TIMINGS",
        "FUSE_CPU_CALIBRATE=0",
        "`fuse explore SCRIPT [--backend cpu\\|emulate\\|cuda]",
        "`fuse explain SCRIPT [--backend cpu\\|emulate\\|cuda]",
        "`fuse compile SCRIPT -o DIR [--backend cuda\\|emulate]",
        "up to 40 minutes",
    ] {
        assert!(readme.contains(needed), "the README lacks {needed:?}");
    }
}

#[test]
fn help_examples_do_not_wrap_in_80_columns() {
    // Each example is one line of the help however wide the terminal: the same lines at 80
    // columns as at 1000.
    let examples = |command: &str, columns: &str| -> Vec<String> {
        let help = stdout(&fuse_env(&[command, "--help"], &[("COLUMNS", columns)], &[]));
        help.lines()
            .skip_while(|l| !l.starts_with("Example"))
            .map(|l| l.trim_end().to_string())
            .collect()
    };
    for command in subcommands() {
        let wide = examples(&command, "1000");
        assert_eq!(examples(&command, "80"), wide, "`fuse {command} --help` at 80 columns");
        assert!(wide.iter().all(|l| l.chars().count() <= 80), "{command}: {wide:?}");
    }
}

#[test]
fn devices_without_a_gpu_still_names_libraries_and_caches() {
    let cache = tempfile::tempdir().unwrap();
    let out = fuse_env(
        &["devices"],
        &[
            ("FUSE_CUDA_LIB", "/nowhere/libcuda.so.1"),
            ("FUSE_CACHE_DIR", cache.path().to_str().unwrap()),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let text = stdout(&out);
    for line in ["driver: ", "nvrtc: ", "cublas: "] {
        assert!(text.lines().any(|l| l.starts_with(line)), "no `{line}` line: {text}");
    }
    assert!(text.contains(&format!("cache: {}", cache.path().display())), "{text}");
    let err = stderr(&out);
    assert!(err.starts_with("error: no NVIDIA GPU driver here"), "{err}");
    assert!(err.contains("/nowhere/libcuda.so.1 (no such file)"), "{err}");
}

#[test]
fn compile_finds_the_nvrtc_wheel_without_a_variable() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let wheel = Command::new(&python).args(["-c", "import nvidia.cu13"]).output();
    assert!(
        wheel.is_ok_and(|o| o.status.success()),
        "the NVRTC wheel is not installed for {python}: run tests/run, which installs tests/requirements.txt"
    );
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("bicgk");
    let out = fuse_env(
        &["compile", &script("bicgk.yaml"), "-o", out_dir.to_str().unwrap()],
        &[("FUSE_CACHE_DIR", dir.path().to_str().unwrap())],
        &["FUSE_NVRTC_LIB", "LD_LIBRARY_PATH"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ptx = std::fs::read_dir(&out_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().ends_with(".ptx"));
    assert!(ptx, "no PTX written: {}{}", stdout(&out), stderr(&out));
}
