//! Reading inputs from and writing outputs to `.npy` files (numpy's format), one per name.

use std::path::{Path, PathBuf};

use ndarray::{ArrayD, IxDyn};
use ndarray_npy::{ReadNpyExt, WriteNpyExt};

use fuse::stages::fuse_core::{Bindings, HostArray, HostData, Precision, Program};

/// Reads `DIR/<input>.npy` for every input of `program` that has such a file; returns the
/// arrays and the paths read.
pub fn read_inputs(program: &Program, dir: &Path) -> Result<(Bindings, Vec<PathBuf>), String> {
    if !dir.is_dir() {
        return Err(format!("--inputs {}: no such folder", dir.display()));
    }
    let mut arrays = Bindings::new();
    let mut read = Vec::new();
    for &id in &program.inputs {
        let name = &program.values[id].variable;
        let path = dir.join(format!("{name}.npy"));
        if !path.exists() {
            continue;
        }
        arrays.insert(name.clone(), read_array(&path, program.precision)?);
        read.push(path);
    }
    Ok((arrays, read))
}

fn read_array(path: &Path, precision: Precision) -> Result<HostArray, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let dtype = match precision {
        Precision::F32 => "float32",
        Precision::F64 => "float64",
    };
    let bad = |e: ndarray_npy::ReadNpyError| {
        format!(
            "{}: expected a {dtype} .npy array (the script is {precision}): {e}",
            path.display()
        )
    };
    Ok(match precision {
        Precision::F32 => {
            let a = ArrayD::<f32>::read_npy(file).map_err(bad)?;
            HostArray::f32(a.shape().to_vec(), a.iter().copied().collect())
        }
        Precision::F64 => {
            let a = ArrayD::<f64>::read_npy(file).map_err(bad)?;
            HostArray::f64(a.shape().to_vec(), a.iter().copied().collect())
        }
    })
}

/// Writes each array as `DIR/<name>.npy` in `precision`, creating `DIR`. Each file is written
/// beside its final name and renamed into place, so a failure never leaves half a file, and a
/// file listed in `protected` (an input just read) is never overwritten.
pub fn write_outputs(
    outputs: &Bindings,
    precision: Precision,
    dir: &Path,
    protected: &[PathBuf],
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("--outputs {}: {e}", dir.display()))?;
    let targets: Vec<(PathBuf, &HostArray)> = outputs
        .iter()
        .map(|(name, a)| (dir.join(format!("{name}.npy")), a))
        .collect();
    for (path, _) in &targets {
        if protected.iter().any(|p| same_file(p, path)) {
            return Err(format!(
                "refusing to overwrite input {}: write outputs to another folder than --inputs",
                path.display()
            ));
        }
    }
    let mut written = Vec::new();
    for (path, array) in targets {
        write_array(&path, &array.to_precision(precision))?;
        written.push(path);
    }
    Ok(written)
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn write_array(path: &Path, array: &HostArray) -> Result<(), String> {
    let partial = path.with_extension("npy.partial");
    let err = |e: String| format!("cannot write {}: {e}", path.display());
    let file = std::fs::File::create(&partial).map_err(|e| err(e.to_string()))?;
    let shape = IxDyn(&array.dims);
    let written = match &array.data {
        HostData::F32(v) => ArrayD::from_shape_vec(shape, v.clone())
            .map_err(|e| e.to_string())?
            .write_npy(file),
        HostData::F64(v) => ArrayD::from_shape_vec(shape, v.clone())
            .map_err(|e| e.to_string())?
            .write_npy(file),
    };
    written.map_err(|e| err(e.to_string()))?;
    std::fs::rename(&partial, path).map_err(|e| err(e.to_string()))
}
