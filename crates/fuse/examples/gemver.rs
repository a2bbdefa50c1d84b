//! GEMVER (B = A + u₁v₁ᵀ + u₂v₂ᵀ; x = β·Bᵀ·y + z; w = α·B·x) from `scripts/gemver.yaml`
//! through the script API, with numpy `.npy` files:
//!
//! ```sh
//! cargo run --release -p fuse --example gemver -- DIR [m=1024] [n=1024]
//! ```
//!
//! Each input is read from `DIR/<name>.npy` (float32, row-major); an input without a file is
//! drawn at random and written there first, so an empty folder gets a complete input set.
//! Sizes come from the command line, else from the shapes of the files present, else from the
//! script. The outputs are written to `DIR/out/<name>.npy`.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use fuse::{Backend, Element, HostArray, Inputs, Script};
use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{read_npy, write_npy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Errors as the message alone (`main` returning an error would print its `Debug` form), with
/// exit status 2.
fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().ok_or("usage: gemver DIR [m=SIZE] [n=SIZE]")?);
    let script = Script::from_file(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/gemver.yaml"))?;
    let mut sizes = sizes_of_files(&script, &dir)?;
    for arg in args {
        let (symbol, value) = arg
            .split_once('=')
            .ok_or(format!("expected SYMBOL=SIZE, got `{arg}`"))?;
        sizes.retain(|(s, _)| s != symbol);
        sizes.push((symbol.to_string(), value.parse()?));
    }
    let sizes: Vec<(&str, usize)> = sizes.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    let compiled = script.compile(&Backend::default(), &sizes)?;
    println!(
        "{} at {} on {}",
        compiled.program().name,
        compiled.sizes(),
        compiled.backend()
    );

    let inputs = read_or_generate(&compiled.inputs(), &dir)?;
    let start = Instant::now();
    let outputs = compiled.run(&inputs)?;
    println!("ran in {:.1} ms", start.elapsed().as_secs_f64() * 1e3);

    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir)?;
    for (name, array) in outputs.iter() {
        let path = out_dir.join(format!("{name}.npy"));
        write_npy(&path, &to_ndarray(array)?)?;
        println!("{name}: {array}  → {}", path.display());
    }
    Ok(())
}

/// Size symbols bound by the shapes of the input files already in `dir`.
fn sizes_of_files(script: &Script, dir: &Path) -> Result<Vec<(String, usize)>> {
    let program = script.program();
    let mut sizes: Vec<(String, usize)> = Vec::new();
    for &id in &program.inputs {
        let value = &program.values[id];
        let path = dir.join(format!("{}.npy", value.variable));
        if !path.exists() {
            continue;
        }
        let array: ArrayD<f32> = read_npy(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for (symbol, &extent) in value.shape.dims().into_iter().zip(array.shape()) {
            if !sizes.iter().any(|(s, _)| s == symbol) {
                sizes.push((symbol.to_string(), extent));
            }
        }
    }
    Ok(sizes)
}

/// Reads `dir/<name>.npy` for each input, first writing a random one where there is none.
fn read_or_generate(inputs: &[(String, Vec<usize>)], dir: &Path) -> Result<Inputs> {
    std::fs::create_dir_all(dir)?;
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let mut bindings = Inputs::new();
    for (name, dims) in inputs {
        let path = dir.join(format!("{name}.npy"));
        if !path.exists() {
            let count = dims.iter().product();
            let data: Vec<f32> = (0..count).map(|_| rng.random_range(-1.0..1.0)).collect();
            write_npy(&path, &ArrayD::from_shape_vec(IxDyn(dims), data)?)?;
            println!("generated {}", path.display());
        }
        let array: ArrayD<f32> = read_npy(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let data = array.iter().copied().collect();
        bindings = bindings.array(name, fuse::array(array.shape().to_vec(), data)?);
    }
    Ok(bindings)
}

fn to_ndarray(array: &HostArray) -> Result<ArrayD<f32>> {
    let values = <f32 as Element>::values(array).ok_or("gemver.yaml is f32")?;
    Ok(ArrayD::from_shape_vec(IxDyn(&array.dims), <[f32]>::to_vec(values))?)
}
