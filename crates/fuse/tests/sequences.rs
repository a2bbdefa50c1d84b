//! The 11 sequences of `scripts/`, in f32 and f64, through the script API and through the same
//! calls recorded on a lazy session, against the f64 reference interpreter on the same random
//! inputs at awkward sizes. The session's recorded program must also have the script's graph.

use std::path::Path;

use fuse::{Backend, Element, Inputs, Matrix, Scalar, Script, Session, Vector};
use fuse_core::data::{fill_random_inputs, relative_error};
use fuse_core::reference::evaluate;
use fuse_core::{Bindings, DataGraph, Edge, Library, Program};

const SEQUENCES: [&str; 11] = [
    "axpydot", "atax", "bicgk", "sgemv", "sgemvt", "sscal", "gemver", "gesummv", "madd", "vadd", "waxpby",
];

/// The script text of sequence `name` in precision `T` (the files are f32).
fn script_text<T: Element>(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../scripts/{name}.yaml"));
    let text = std::fs::read_to_string(path).unwrap();
    match T::PRECISION {
        fuse::Precision::F32 => text,
        fuse::Precision::F64 => text.replace("precision: f32", "precision: f64").replace("= s", "= d"),
    }
}

/// Awkward sizes: not multiples of 32, m ≠ n.
fn sizes(program: &Program) -> Vec<(&'static str, usize)> {
    let matrix = program.sizes.get("m").is_some();
    let pick = |symbol: &str| match (symbol, matrix) {
        ("m", _) => ("m", 67),
        (_, true) => ("n", 45),
        _ => ("n", 301),
    };
    program.sizes.iter().map(|(k, _)| pick(k)).collect()
}

/// The session's handles to the named inputs.
#[derive(Clone, Copy)]
struct Lazy<'a, T: Element> {
    s: &'a Session<T>,
    inputs: &'a Bindings,
}

impl<T: Element> Lazy<'_, T> {
    fn data(&self, name: &str) -> Vec<T> {
        T::values(&self.inputs[name]).unwrap().to_vec()
    }

    fn m(&self, name: &str) -> Matrix<T> {
        let dims = &self.inputs[name].dims;
        self.s.matrix(dims[0], dims[1], self.data(name)).unwrap()
    }

    fn v(&self, name: &str) -> Vector<T> {
        self.s.vector(self.data(name)).unwrap()
    }

    fn a(&self, name: &str) -> Scalar<T> {
        self.s.scalar(self.data(name)[0])
    }

    fn read(&self, handle: &impl fuse::Handle<T>) -> Vec<f64> {
        self.s.read(handle).unwrap().into_iter().map(T::to_f64).collect()
    }
}

/// Records sequence `name` on a session of precision `$t` with the given method names, drops
/// its temporaries, and returns the session's pending script and the outputs it reads.
macro_rules! lazy_sequences {
    ($run:ident, $t:ty, $scal:ident, $axpy:ident, $axpby:ident, $add:ident, $dot:ident, $gemv:ident,
     $gemv_a:ident, $gemv_ab:ident, $gemtv:ident, $gemtv_ab:ident, $ger:ident, $madd:ident) => {
        fn $run(name: &str, s: &Session<$t>, inputs: &Bindings) -> (String, Vec<(&'static str, Vec<f64>)>) {
            let l = Lazy { s, inputs };
            let held: Vec<(&'static str, Box<dyn Fn() -> Vec<f64> + '_>)>;
            let (a, x, y) = (|n: &str| l.m(n), |n: &str| l.v(n), |n: &str| l.a(n));
            match name {
                "axpydot" => {
                    let t = s.$scal(&y("alpha"), &x("v")).unwrap();
                    let z = s.$axpy(-1.0, &t, &x("w")).unwrap();
                    let r = s.$dot(&z, &x("u")).unwrap();
                    held = vec![
                        ("z", Box::new(move || l.read(&z))),
                        ("r", Box::new(move || l.read(&r))),
                    ];
                }
                "atax" => {
                    let m = a("A");
                    let t = s.$gemv(&m, &x("x")).unwrap();
                    let out = s.$gemtv(&m, &t).unwrap();
                    held = vec![("y", Box::new(move || l.read(&out)))];
                }
                "bicgk" => {
                    let m = a("A");
                    let q = s.$gemv(&m, &x("p")).unwrap();
                    let t = s.$gemtv(&m, &x("r")).unwrap();
                    held = vec![
                        ("q", Box::new(move || l.read(&q))),
                        ("s", Box::new(move || l.read(&t))),
                    ];
                }
                "sgemv" => {
                    let z = s
                        .$gemv_ab(&y("alpha"), &a("A"), &x("x"), &y("beta"), &x("y"))
                        .unwrap();
                    held = vec![("z", Box::new(move || l.read(&z)))];
                }
                "sgemvt" => {
                    let m = a("A");
                    let v = s.$gemtv_ab(&y("beta"), &m, &x("y"), 1.0, &x("z")).unwrap();
                    let w = s.$gemv_a(&y("alpha"), &m, &v).unwrap();
                    held = vec![
                        ("x", Box::new(move || l.read(&v))),
                        ("w", Box::new(move || l.read(&w))),
                    ];
                }
                "sscal" => {
                    let v = s.$scal(&y("alpha"), &x("x")).unwrap();
                    held = vec![("x", Box::new(move || l.read(&v)))];
                }
                "gemver" => {
                    let b1 = s.$ger(&x("u1"), &x("v1"), &a("A")).unwrap();
                    let b = s.$ger(&x("u2"), &x("v2"), &b1).unwrap();
                    let v = s.$gemtv_ab(&y("beta"), &b, &x("y"), 1.0, &x("z")).unwrap();
                    let w = s.$gemv_a(&y("alpha"), &b, &v).unwrap();
                    held = vec![
                        ("B", Box::new(move || l.read(&b))),
                        ("x", Box::new(move || l.read(&v))),
                        ("w", Box::new(move || l.read(&w))),
                    ];
                }
                "gesummv" => {
                    let v = x("x");
                    let t = s.$gemv_a(&y("alpha"), &a("A"), &v).unwrap();
                    let out = s.$gemv_ab(&y("beta"), &a("B"), &v, 1.0, &t).unwrap();
                    held = vec![("y", Box::new(move || l.read(&out)))];
                }
                "madd" => {
                    let c = s.$madd(&a("A"), &a("B")).unwrap();
                    held = vec![("C", Box::new(move || l.read(&c)))];
                }
                "vadd" => {
                    let t = s.$add(&x("w"), &x("y")).unwrap();
                    let v = s.$add(&t, &x("z")).unwrap();
                    held = vec![("x", Box::new(move || l.read(&v)))];
                }
                "waxpby" => {
                    let w = s.$axpby(&y("alpha"), &x("x"), &y("beta"), &x("y")).unwrap();
                    held = vec![("w", Box::new(move || l.read(&w)))];
                }
                other => panic!("no lazy version of {other}"),
            }
            // Temporaries (t, b1, …) are dropped by now; only `held` keeps handles.
            let script = s.pending_script().expect("something to run");
            (script, held.iter().map(|(n, read)| (*n, read())).collect())
        }
    };
}

lazy_sequences!(
    run_f32, f32, sscal, saxpy, saxpby, sadd, sdot, sgemv, sgemv_a, sgemv_ab, sgemtv, sgemtv_ab, sger, smadd
);
lazy_sequences!(
    run_f64, f64, dscal, daxpy, daxpby, dadd, ddot, dgemv, dgemv_a, dgemv_ab, dgemtv, dgemtv_ab, dger, dmadd
);

/// Edges as (from, to, is a dependency), sorted: the graph up to value numbering.
fn edges(program: &Program) -> Vec<(usize, usize, bool)> {
    let mut e: Vec<_> = DataGraph::build(program)
        .edges()
        .map(|(a, b, e)| (a, b, matches!(e, Edge::Dependency { .. })))
        .collect();
    e.sort();
    e
}

fn check_sequence<T: Element>(
    name: &str,
    tol: f64,
    lazy: impl Fn(&str, &Session<T>, &Bindings) -> (String, Vec<(&'static str, Vec<f64>)>),
) {
    let library = Library::builtin().unwrap();
    let script = Script::from_str(&format!("{name}.yaml"), &script_text::<T>(name)).unwrap();
    let program = script.program();
    let overrides = sizes(program);
    let compiled = script.compile(&Backend::Reference, &overrides).unwrap();
    let mut inputs = Bindings::new();
    fill_random_inputs(program, compiled.sizes(), 7, &mut inputs);
    let want = evaluate(program, compiled.sizes(), &inputs).unwrap();

    let got = compiled.run(&Inputs::from(inputs.clone())).unwrap();
    for (out, array) in &want {
        let err = relative_error(&got.array(out).unwrap().to_f64(), &array.to_f64());
        assert!(
            err < tol,
            "{name} ({}): script API output {out}: relative error {err:e}",
            T::PRECISION
        );
    }

    let session = Session::<T>::new(Backend::Reference).unwrap();
    let (recorded, outputs) = lazy(name, &session, &inputs);
    assert_eq!(outputs.len(), want.len(), "{name}: outputs");
    for (out, values) in outputs {
        let err = relative_error(&values, &want[out].to_f64());
        assert!(
            err < tol,
            "{name} ({}): lazy output {out}: relative error {err:e}",
            T::PRECISION
        );
    }
    let stats = session.stats();
    assert_eq!((stats.flushes, stats.compilations), (1, 1), "{name}: one fused run");
    assert_eq!(stats.calls as usize, program.calls.len(), "{name}: calls run");

    let recorded = fuse_core::script::parse("session.yaml", &recorded, &library).unwrap();
    assert_eq!(edges(&recorded), edges(program), "{name}: data graph\n{recorded:#?}");
    let callees = |p: &Program| p.calls.iter().map(|c| c.callee.clone()).collect::<Vec<_>>();
    assert_eq!(callees(&recorded), callees(program), "{name}: calls");
    assert_eq!(recorded.outputs.len(), program.outputs.len(), "{name}: outputs");
}

#[test]
fn all_sequences_f64_match_the_reference() {
    for name in SEQUENCES {
        check_sequence::<f64>(name, 1e-12, run_f64);
    }
}

#[test]
fn all_sequences_f32_match_the_reference() {
    for name in SEQUENCES {
        check_sequence::<f32>(name, 1e-5, run_f32);
    }
}
