//! User errors are values of `fuse::Error` with messages that say what and where — never panics.

use fuse::{Backend, Error, Inputs, Precision, Script, Session};
use fuse_core::data::BindError;

const BICGK: &str = "
sizes: {m: 3, n: 2}
inputs: {A: [m, n], p: [n], r: [m]}
outputs: [q, s]
calls:
  - q = sgemv(A, p)
  - s = sgemtv(A, r)
";

fn session() -> Session<f64> {
    Session::new(Backend::Reference).unwrap()
}

#[test]
fn shape_mismatch_names_function_argument_and_shapes() {
    let s = session();
    let a = s.matrix(3, 2, vec![1.0; 6]).unwrap();
    let x3 = s.vector(vec![1.0; 3]).unwrap();
    let x2 = s.vector(vec![1.0; 2]).unwrap();
    let cases = [
        (
            s.dgemv(&a, &x3).map(drop),
            "dgemv: argument `x` has shape [3] but needs [2] (n = 2 from `A` [3, 2])",
        ),
        (
            s.dgemtv(&a, &x2).map(drop),
            "dgemtv: argument `x` has shape [2] but needs [3] (m = 3 from `A` [3, 2])",
        ),
        (
            s.ddot(&x2, &x3).map(drop),
            "ddot: argument `y` has shape [3] but needs [2] (n = 2 from `x` [2])",
        ),
        (
            s.dger(&x2, &x2, &a).map(drop),
            "dger: argument `A` has shape [3, 2] but needs [2, 2] (m = 2 from `x` [2])",
        ),
        (
            s.dgemv_ab(1.0, &a, &x2, 1.0, &x2).map(drop),
            "dgemv: argument `y` has shape [2] but needs [3] (m = 3 from `A` [3, 2])",
        ),
    ];
    for (result, message) in cases {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err:?}");
        assert_eq!(err.to_string(), message);
    }
    let b = s.matrix(2, 3, vec![1.0; 6]).unwrap();
    let err = s.dmadd(&a, &b).unwrap_err();
    assert_eq!(
        err.to_string(),
        "dmadd: argument `B` has shape [2, 3] but needs [3, 2] (m = 3 from `A` [3, 2])"
    );
    assert_eq!(s.pending_calls(), 0, "a rejected call records nothing");
}

#[test]
fn handles_from_another_session_are_rejected() {
    let (s1, s2) = (session(), session());
    let x1 = s1.vector(vec![1.0, 2.0]).unwrap();
    let x2 = s2.vector(vec![1.0, 2.0]).unwrap();
    let err = s2.daxpy(2.0, &x1, &x2).unwrap_err();
    assert!(matches!(err, Error::ForeignHandle { .. }), "{err:?}");
    let want = format!(
        "daxpy: argument `x` belongs to session #{}, not to this session #{}",
        s1.id(),
        s2.id()
    );
    assert_eq!(err.to_string(), want);
    let y1 = s1.dscal(2.0, &x1).unwrap();
    assert!(matches!(s2.read(&y1), Err(Error::ForeignHandle { .. })));
    let d1 = s1.ddot(&x1, &x1).unwrap();
    assert!(matches!(s2.dscal(&d1, &x2), Err(Error::ForeignHandle { .. })));
    assert!(matches!(s2.read_scalar(&d1), Err(Error::ForeignHandle { .. })));
    assert_eq!(s1.read(&y1).unwrap(), [2.0, 4.0], "the owner still reads it");
}

#[test]
fn host_data_of_the_wrong_length_is_an_error() {
    let s = session();
    let err = s.matrix(2, 3, vec![1.0; 5]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "matrix: 5 elements given for dimensions [2, 3], which need 6"
    );
    assert_eq!(
        s.vector(vec![]).unwrap_err().to_string(),
        "vector: 0 elements given for dimensions [0], which need 0 (a session holds no empty arrays)"
    );
    assert!(matches!(s.matrix(0, 3, vec![]), Err(Error::DataLength { .. })));
    assert!(matches!(s.vector(vec![]), Err(Error::DataLength { .. })));
    assert!(matches!(
        s.matrix(usize::MAX, 3, vec![1.0]),
        Err(Error::DataLength { .. })
    ));
    let err = Inputs::new().matrix("A", 3, 2, vec![1.0f32; 7]).unwrap_err();
    assert!(err.to_string().starts_with("matrix `A`: 7 elements"), "{err}");
    assert!(fuse::array(vec![2, 2], vec![1.0f32; 3]).is_err());
}

#[test]
fn non_finite_literals_are_rejected() {
    let s = session();
    let x = s.vector(vec![1.0]).unwrap();
    let err = s.dscal(f64::NAN, &x).unwrap_err();
    assert_eq!(
        err.to_string(),
        "dscal: argument `a` is the literal NaN, which is not a finite number"
    );
    // As data, NaN is just a value.
    let nan = s.scalar(f64::NAN);
    assert!(s.read(&s.dscal(&nan, &x).unwrap()).unwrap()[0].is_nan());
}

#[test]
fn script_bindings_that_do_not_fit_are_errors() {
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    let compiled = script.compile(&Backend::Reference, &[]).unwrap();
    let good = Inputs::new()
        .matrix("A", 3, 2, vec![1.0f32; 6])
        .unwrap()
        .vector("p", vec![1.0f32; 2])
        .unwrap()
        .vector("r", vec![1.0f32; 3])
        .unwrap();
    let out = compiled.run(&good).unwrap();
    assert_eq!(out.get::<f32>("q").unwrap(), [2.0, 2.0, 2.0]);
    assert!(matches!(
        out.get::<f64>("q"),
        Err(Error::Precision {
            got: Precision::F32,
            ..
        })
    ));
    assert!(matches!(out.get::<f32>("z"), Err(Error::UnknownOutput { .. })));

    let shape = good.clone().vector("p", vec![1.0f32; 3]).unwrap();
    let err = compiled.run(&shape).unwrap_err();
    assert!(matches!(err, Error::Bind(BindError::Shape { .. })), "{err:?}");
    assert_eq!(
        err.to_string(),
        "input `p` has shape [3] but bicgk.yaml declares it [n] = [2]"
    );
    let precision = good.clone().vector("p", vec![1.0f64; 2]).unwrap();
    let err = compiled.run(&precision).unwrap_err();
    assert_eq!(err.to_string(), "input `p` is f64 but the script is f32");
    let unknown = good.clone().scalar("alpha", 1.0f32);
    let err = compiled.run(&unknown).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`alpha` is not an input of bicgk (its inputs are `A`, `p` and `r`)"
    );
    let missing = Inputs::new().matrix("A", 3, 2, vec![1.0f32; 6]).unwrap();
    assert!(matches!(
        compiled.run(&missing),
        Err(Error::Bind(BindError::Missing(_)))
    ));
}

#[test]
fn a_size_of_0_runs_as_blas_runs_it_on_every_backend() {
    // m = 0: A has no rows, so q = A·p is empty and s = Aᵀ·r, a sum over no rows, is 0.
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    for backend in [Backend::Reference, Backend::Cpu, Backend::Emulate] {
        let compiled = script.compile(&backend, &[("m", 0)]).unwrap();
        let inputs = Inputs::new()
            .matrix("A", 0, 2, Vec::<f32>::new())
            .unwrap()
            .vector("p", vec![1.0f32, 2.0])
            .unwrap()
            .vector("r", Vec::<f32>::new())
            .unwrap();
        let out = compiled.run(&inputs).unwrap();
        assert_eq!(out.get::<f32>("q").unwrap(), [0.0f32; 0], "{backend}");
        assert_eq!(out.get::<f32>("s").unwrap(), [0.0, 0.0], "{backend}");
        let ran_alone = compiled
            .notes()
            .iter()
            .any(|n| n.contains("m = 0 (an empty dimension)"));
        assert_eq!(
            ran_alone,
            backend != Backend::Reference,
            "{backend}: {:?}",
            compiled.notes()
        );
    }
}

#[test]
fn script_and_size_errors_carry_the_front_end_message() {
    let err = Script::from_str(
        "bad.yaml",
        "sizes: {n: 4}\ninputs: {x: [n]}\noutputs: [y]\ncalls:\n  - y = sgemv(x)\n",
    )
    .unwrap_err();
    assert!(matches!(err, Error::Script(_)), "{err:?}");
    assert!(err.to_string().starts_with("bad.yaml:5:"), "{err}");
    let script = Script::from_str("bicgk.yaml", BICGK).unwrap();
    let err = script.compile(&Backend::Reference, &[("k", 3)]).unwrap_err();
    assert!(err.to_string().contains("`k` is not a size of bicgk.yaml"), "{err}");
    let err = Script::from_file("no/such/script.yaml").unwrap_err();
    assert!(err.to_string().starts_with("cannot read no/such/script.yaml"), "{err}");
    let err = "gpu".parse::<Backend>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown backend `gpu` (known: `reference`, `cpu`, `emulate` and `cuda[:N]`)"
    );
}
