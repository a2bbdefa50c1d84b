//! The script API: a script compiled for a backend, called with numpy arrays by name.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use fuse::{
    Backend, Bindings, CompileOptions, Compiled, HostArray, Precision, Script, SizeSource, Sizes, Threads, Views,
};
use numpy::PyUntypedArrayMethods;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::arrays::{borrow, to_python, view, InPlace, Real};
use crate::device::{self, GpuArray, Imported};
use crate::errors::{input_error, IntoPy};
use crate::interrupt::interruptible;

/// A checked script bound to a backend. Compiled once per set of sizes (the sizes given,
/// the rest from the arrays' shapes, else the script's defaults) and reused by every call at
/// those sizes.
#[pyclass(frozen, module = "fuseblas._core")]
pub struct Program {
    script: Arc<Script>,
    backend: Backend,
    options: CompileOptions,
    given: Vec<(String, usize)>,
    compiled: Mutex<HashMap<String, Arc<Compiled>>>,
    /// The input shapes of the last call and the program they bound: a loop's calls meet the
    /// same shapes, and skip binding sizes and the cache's key (a fifth of a small call).
    last: Mutex<Option<(Shapes, Arc<Compiled>)>>,
}

/// Each input's name and dims, in the script's order.
type Shapes = Vec<(String, Vec<usize>)>;

/// `auto` (the GPU where one is usable, else the CPU) or a backend name of `fuse run`; a GPU
/// asked for is looked up now, so that its absence is reported where it was asked for.
pub(crate) fn parse_backend(name: &str) -> PyResult<Backend> {
    let backend = match name {
        "auto" => Backend::detect(),
        name => name.parse::<Backend>().py_err()?,
    };
    if let Backend::Cuda { .. } = backend {
        let library = fuse::Library::builtin().map_err(fuse::Error::from).py_err()?;
        backend.timing_table(&library, None).py_err()?;
    }
    Ok(backend)
}

/// Compile options with `threads` CPU threads (else fuse's default).
pub(crate) fn options(threads: Option<usize>) -> PyResult<CompileOptions> {
    let options = CompileOptions::new();
    match threads {
        Some(n) => Ok(options.threads(Threads::new(n).map_err(|e| input_error(e.to_string()))?)),
        None => Ok(options),
    }
}

#[pymethods]
impl Program {
    /// Reads (`is_text` false: `source` is a path) or parses a script and, where `sizes` gives
    /// every size symbol, compiles it at once.
    #[new]
    #[pyo3(signature = (source, *, is_text, backend = "auto", sizes = None, threads = None))]
    fn new(
        py: Python<'_>,
        source: &str,
        is_text: bool,
        backend: &str,
        sizes: Option<Vec<(String, usize)>>,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let script = match is_text {
            true => Script::from_str("<script>", source),
            false => Script::from_file(source),
        }
        .py_err()?;
        let program = Program {
            script: Arc::new(script),
            backend: parse_backend(backend)?,
            options: options(threads)?,
            given: sizes.unwrap_or_default(),
            compiled: Mutex::new(HashMap::new()),
            last: Mutex::new(None),
        };
        program.check_symbols(&program.given, "sizes")?;
        let fixed = program
            .script
            .program()
            .sizes
            .iter()
            .all(|(symbol, _)| program.given.iter().any(|(s, _)| s == symbol));
        if fixed {
            let sizes = program.bind(&[])?;
            program.compiled(py, &sizes)?;
        }
        Ok(program)
    }

    /// Runs on `arrays` (input name → numpy array of the script's dtype, C-contiguous; a
    /// scalar as a 0-d array); returns every output by name, in the script's order.
    fn run<'py>(&self, py: Python<'py>, arrays: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        match self.script.program().precision {
            Precision::F32 => self.run_as::<f32>(py, arrays),
            Precision::F64 => self.run_as::<f64>(py, arrays),
        }
    }

    /// The script's name.
    #[getter]
    fn name(&self) -> &str {
        &self.script.program().name
    }

    /// `"float32"` or `"float64"`: the dtype of every array it reads and returns.
    #[getter]
    fn dtype(&self) -> &'static str {
        match self.script.program().precision {
            Precision::F32 => f32::DTYPE,
            Precision::F64 => f64::DTYPE,
        }
    }

    /// The backend it runs on (`cpu`, `cuda`, …).
    #[getter]
    fn backend(&self) -> String {
        self.backend.to_string()
    }

    /// Each input's name and declared shape in size symbols (`[]` for a scalar).
    #[getter]
    fn inputs(&self) -> Vec<(String, Vec<String>)> {
        let p = self.script.program();
        p.inputs
            .iter()
            .map(|&v| {
                (
                    p.values[v].variable.clone(),
                    p.values[v].shape.dims().iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect()
    }

    /// The outputs' names, in the script's order.
    #[getter]
    fn outputs(&self) -> Vec<String> {
        let p = self.script.program();
        p.outputs.iter().map(|&v| p.values[v].variable.clone()).collect()
    }

    /// The script's default sizes.
    #[getter]
    fn default_sizes(&self) -> Vec<(String, usize)> {
        self.script
            .program()
            .sizes
            .iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// What compiling at `sizes` chose (the plan's kernels, one line each, then the notes:
    /// an estimated timing table, a module from the cache).
    fn describe(&self, py: Python<'_>, sizes: Vec<(String, usize)>) -> PyResult<String> {
        self.check_symbols(&sizes, "describe")?;
        let given: Vec<SizeSource> = sizes
            .iter()
            .map(|(symbol, value)| SizeSource::Given {
                symbol,
                value: *value,
                what: format!("{symbol}={value}"),
            })
            .collect();
        let compiled = self.compiled(py, &self.bind(&given)?)?;
        let mut lines: Vec<String> = vec![format!(
            "{} on {} at {}",
            self.name(),
            compiled.backend(),
            compiled.sizes()
        )];
        if let Some(plan) = compiled.plan() {
            let p = compiled.program();
            for (i, kernel) in plan.kernels.iter().enumerate() {
                let calls: Vec<String> = kernel
                    .calls
                    .iter()
                    .map(|&c| format!("{} = {}", p.values[p.calls[c].result].variable, p.calls[c].callee))
                    .collect();
                lines.push(format!("kernel {}: {}", i + 1, calls.join(", ")));
            }
            lines.push(format!("predicted: {:.1} µs", plan.predicted_us));
        }
        lines.extend(compiled.notes().iter().cloned());
        Ok(lines.join("\n"))
    }
}

impl Program {
    fn run_as<'py, T: Real>(&self, py: Python<'py>, arrays: &Bound<'py, PyDict>) -> PyResult<Bound<'py, PyDict>> {
        let mut borrowed: Vec<(String, InPlace<'py, T>)> = Vec::with_capacity(arrays.len());
        let mut on_gpu = Vec::new();
        for (name, object) in arrays.iter() {
            let name: String = name.extract()?;
            match device::cuda_device(&object)? {
                Some(ordinal) => on_gpu.push((name, object, ordinal)),
                None => borrowed.push((name.clone(), borrow::<T>(&object, &format!("input `{name}`"))?)),
            }
        }
        if !on_gpu.is_empty() {
            return self.run_on_gpu(py, &borrowed, &on_gpu);
        }
        let p = self.script.program();
        let given: Vec<(&str, &[usize])> = (p.inputs.iter())
            .filter_map(|&v| borrowed.iter().find(|(name, _)| *name == p.values[v].variable))
            .map(|(name, array)| (name.as_str(), array.shape()))
            .collect();
        let compiled = match self.recall(&given) {
            Some(compiled) => compiled,
            None => {
                let shapes: Vec<SizeSource> = (given.iter())
                    .map(|&(name, dims)| SizeSource::Shape {
                        input: name,
                        dims,
                        what: format!("argument `{name}`"),
                    })
                    .collect();
                let compiled = self.compiled(py, &self.bind(&shapes)?)?;
                let shapes = given.iter().map(|&(n, d)| (n.to_owned(), d.to_vec())).collect();
                *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((shapes, Arc::clone(&compiled)));
                compiled
            }
        };
        let mut views = Views::new();
        for (name, array) in &borrowed {
            views.insert(name.clone(), view(array)?);
        }
        let outputs = match self.backend {
            // Seconds at large sizes: run on a worker from copies of the inputs, so that Ctrl-C
            // returns at once and abandons nothing borrowed (both backends read their inputs
            // once more, into the interpreter's f64 arrays or the emulated device's buffers).
            Backend::Reference | Backend::Emulate => {
                // Checked whole before the first copy: the copies alone may fit where the run does not.
                let p = compiled.program();
                let needed = p.input_bytes(compiled.sizes()).saturating_add(compiled.run_bytes());
                fuse::check_host_memory(needed, || {
                    format!(
                        "a run of {} at {} on {} (the inputs copied, the outputs and temporaries)",
                        p.name,
                        compiled.sizes(),
                        self.backend
                    )
                })
                .py_err()?;
                let owned = self.copies(&views).py_err()?;
                let note = format!(
                    "running {} on {} (slow: a test backend)",
                    compiled.program().name,
                    self.backend
                );
                interruptible(py, &note, move || compiled.run(&owned.into()))?
            }
            _ => py.detach(|| compiled.run_views(&views)),
        }
        .py_err()?;
        let mut by_name = outputs.into_bindings();
        let result = PyDict::new(py);
        for name in self.outputs() {
            if let Some(array) = by_name.remove(&name) {
                result.set_item(name, to_python(py, array)?)?;
            }
        }
        Ok(result)
    }

    /// Runs where some inputs are GPU arrays (`on_gpu`: name, object, GPU): those read in
    /// place through DLPack, the host ones copied up; the array outputs are left on the GPU
    /// (`DeviceArray`s), the scalars come back as floats.
    fn run_on_gpu<'py, T: Real>(
        &self,
        py: Python<'py>,
        host: &[(String, InPlace<'py, T>)],
        on_gpu: &[(String, Bound<'py, PyAny>, usize)],
    ) -> PyResult<Bound<'py, PyDict>> {
        let precision = self.script.program().precision;
        let mut imported = Vec::with_capacity(on_gpu.len());
        for (name, object, ordinal) in on_gpu {
            imported.push((
                name.clone(),
                device::import(
                    object,
                    &format!("input `{name}`"),
                    Some(precision),
                    *ordinal,
                    (&self.backend, "program"),
                )?,
            ));
        }
        let p = self.script.program();
        let dims_of = |name: &str| -> Option<Vec<usize>> {
            let on_host = host.iter().find(|(n, _)| n == name).map(|(_, a)| a.shape().to_vec());
            on_host.or_else(|| {
                imported
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, i)| i.array.dims().to_vec())
            })
        };
        let extents: Vec<(String, Vec<usize>)> = (p.inputs.iter())
            .filter_map(|&v| Some((p.values[v].variable.clone(), dims_of(&p.values[v].variable)?)))
            .collect();
        let shapes: Vec<SizeSource> = (extents.iter())
            .map(|(name, dims)| SizeSource::Shape {
                input: name,
                dims,
                what: format!("argument `{name}`"),
            })
            .collect();
        let compiled = self.compiled(py, &self.bind(&shapes)?)?;
        let mut inputs = BTreeMap::new();
        for (name, array) in host {
            inputs.insert(name.clone(), compiled.upload(view(array)?).py_err()?);
        }
        let mut owners = Vec::with_capacity(imported.len());
        for (name, Imported { array, owner }) in imported {
            inputs.insert(name, array);
            owners.push(owner);
        }
        let (mut outputs, _) = py.detach(|| compiled.run_on_device(&mut inputs)).py_err()?;
        drop((inputs, owners)); // the producers' arrays are theirs again
        let result = PyDict::new(py);
        for name in self.outputs() {
            let Some(array) = outputs.remove(&name) else { continue };
            match array.dims().is_empty() {
                true => result.set_item(&name, to_python(py, array.to_host().py_err()?)?)?,
                false => result.set_item(&name, GpuArray::new(array)?)?,
            }
        }
        Ok(result)
    }

    /// Refuses a size symbol the script does not have, naming those it has (`how`: how the
    /// sizes were given). Checked here, where they are given, rather than at every later run.
    fn check_symbols(&self, sizes: &[(String, usize)], how: &str) -> PyResult<()> {
        let p = self.script.program();
        let Some((symbol, _)) = sizes.iter().find(|(symbol, _)| p.sizes.get(symbol).is_none()) else {
            return Ok(());
        };
        let known: Vec<&str> = p.sizes.iter().map(|(k, _)| k).collect();
        let known = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        Err(input_error(format!(
            "{how}: `{symbol}` is not a size of {} (its sizes: {known})",
            p.name
        )))
    }

    /// Copies of the inputs `views` for a backend that runs on a worker; memory the host
    /// cannot give is an error, not an abort.
    fn copies(&self, views: &Views<'_>) -> fuse::Result<Bindings> {
        let copy = |(name, array): (&String, &fuse::ArrayView<'_>)| {
            let what = || format!("a copy of input `{name}` for the {} backend", self.backend);
            let data = fuse::try_to_owned(array.data, what)?;
            Ok((
                name.clone(),
                HostArray {
                    dims: array.dims.clone(),
                    data,
                },
            ))
        };
        views.iter().map(copy).collect()
    }

    /// The sizes of a run: those given at compile time, then `sources`, then the defaults.
    fn bind(&self, sources: &[SizeSource<'_>]) -> PyResult<Sizes> {
        let given = self.given.iter().map(|(symbol, value)| SizeSource::Given {
            symbol,
            value: *value,
            what: format!("sizes={{'{symbol}': {value}}}"),
        });
        let all: Vec<SizeSource> = given.chain(sources.iter().cloned()).collect();
        fuse::bind_sizes(self.script.program(), &all).py_err()
    }

    /// The program compiled at `sizes`, compiled now (Ctrl-C answered) if it is not yet.
    fn compiled(&self, py: Python<'_>, sizes: &Sizes) -> PyResult<Arc<Compiled>> {
        let key = sizes.to_string();
        if let Some(compiled) = self.lock().get(&key) {
            return Ok(Arc::clone(compiled));
        }
        let (script, backend, options) = (Arc::clone(&self.script), self.backend.clone(), self.options.clone());
        let overrides: Vec<(String, usize)> = sizes.iter().map(|(k, v)| (k.to_string(), v)).collect();
        let note = format!(
            "compiling {} for {} at {sizes} (on a GPU the first compile of a program takes seconds; it is cached on disk)",
            self.name(),
            self.backend
        );
        let compiled = interruptible(py, &note, move || {
            let sizes = script.program().bind_sizes(&overrides)?;
            backend.compile_with(script.program(), &sizes, &options)
        })?
        .py_err()?;
        let compiled = Arc::new(compiled);
        self.lock().insert(key, Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The program the last call's shapes bound, where `given` are the same.
    fn recall(&self, given: &[(&str, &[usize])]) -> Option<Arc<Compiled>> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let (shapes, compiled) = last.as_ref()?;
        let same = shapes.len() == given.len() && shapes.iter().zip(given).all(|((n, d), (m, e))| n == m && d == e);
        same.then(|| Arc::clone(compiled))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Compiled>>> {
        // A panic while the map was held leaves it whole: entries are inserted complete.
        self.compiled.lock().unwrap_or_else(|e| e.into_inner())
    }
}
