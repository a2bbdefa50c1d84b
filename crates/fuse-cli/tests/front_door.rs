//! The `fuse` command is a thin layer over the `fuse` crate: `fuse run` on every backend
//! without a GPU gives the numbers a Rust user gets from `fuse::Backend` for the same script,
//! sizes and seed (exactly, bar the order of an emulated GPU's atomics), and says the same
//! things about its choice (then names the inputs it drew; and, while a compile takes long,
//! what it is doing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fuse::stages::fuse_core::data::fill_random_inputs;
use fuse::stages::fuse_core::wording::list_or_none;
use fuse::{Backend, Bindings, CompileOptions, Inputs, Script};
use ndarray::ArrayD;
use ndarray_npy::ReadNpyExt;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fuse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fuse"))
        .args(args)
        .output()
        .expect("the fuse binary runs")
}

/// What the library computes for `script` at `m`×`n` with the inputs `fuse run --seed` draws.
fn library_run(script: &Script, backend: &Backend, m: usize, n: usize, seed: u64) -> (Bindings, Vec<String>) {
    let program = script.program();
    let sizes = program.bind_sizes(&[("m".into(), m), ("n".into(), n)]).unwrap();
    let mut inputs = Bindings::new();
    fill_random_inputs(program, &sizes, seed, &mut inputs);
    let compiled = backend.compile_with(program, &sizes, &CompileOptions::new()).unwrap();
    let notes = compiled.notes().to_vec();
    (compiled.run(&Inputs::from(inputs)).unwrap().into_bindings(), notes)
}

fn read_f32(path: &Path) -> Vec<f32> {
    let array = ArrayD::<f32>::read_npy(std::fs::File::open(path).unwrap()).unwrap();
    array.iter().copied().collect()
}

#[test]
fn fuse_run_gives_the_numbers_and_notes_of_the_library() {
    let (m, n, seed) = (67, 45, 11);
    for name in ["bicgk", "gemver"] {
        let path = repo().join("scripts").join(format!("{name}.yaml"));
        let script = Script::from_file(&path).unwrap();
        for backend in ["reference", "cpu", "emulate"] {
            let dir = tempfile::tempdir().unwrap();
            let out = fuse(&[
                "run",
                path.to_str().unwrap(),
                "--backend",
                backend,
                "--size",
                &format!("m={m}"),
                "--size",
                &format!("n={n}"),
                "--seed",
                &seed.to_string(),
                "--outputs",
                dir.path().to_str().unwrap(),
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{name} {backend}: {stderr}");
            let (want, notes) = library_run(&script, &backend.parse().unwrap(), m, n, seed);
            let program = script.program();
            let inputs: Vec<&str> = program
                .inputs
                .iter()
                .map(|&v| program.values[v].variable.as_str())
                .collect();
            let drawn = format!("inputs: {} drawn at random (seed {seed})", list_or_none(&inputs));
            // Besides: what a compile that has taken over a second is doing.
            let said: Vec<&str> = (stderr.lines())
                .filter(|l| !l.starts_with("note: compiling the kernels of "))
                .collect();
            assert_eq!(said[..said.len() - 1], notes, "{name} {backend}: the notes");
            assert_eq!(said.last(), Some(&drawn.as_str()), "{name} {backend}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert_eq!(stdout.lines().count(), want.len(), "{name} {backend}: {stdout}");
            for (output, array) in &want {
                let got = read_f32(&dir.path().join(format!("{output}.npy")));
                let want = array.to_f64();
                assert_eq!(got.len(), want.len(), "{name} {backend} {output}");
                // Emulated blocks add their partial sums by atomics in whatever order the host
                // threads reach them, as a GPU's do: equal to rounding, not to the bit.
                let tolerance = match backend {
                    "emulate" => 1e-5,
                    _ => 0.0,
                };
                let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() <= tolerance * scale,
                        "{name} {backend} {output}[{i}]: the CLI ({g}) and the library ({w}) differ"
                    );
                }
            }
        }
    }
}
