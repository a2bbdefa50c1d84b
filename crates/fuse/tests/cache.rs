//! The plan cache: a flush of a graph already compiled in the session compiles nothing.

use fuse::{Backend, Session, Stats};

fn bicgk(s: &Session<f32>, m: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
    let a = s.matrix(m, n, (0..m * n).map(|k| k as f32).collect()).unwrap();
    let p = s.vector(vec![1.0; n]).unwrap();
    let r = s.vector(vec![1.0; m]).unwrap();
    let q = s.sgemv(&a, &p).unwrap();
    let t = s.sgemtv(&a, &r).unwrap();
    s.flush().unwrap();
    (s.read(&q).unwrap(), s.read(&t).unwrap())
}

#[test]
fn the_second_flush_of_the_same_graph_compiles_nothing() {
    let s = Session::<f32>::new(Backend::Reference).unwrap();
    let first = bicgk(&s, 3, 2);
    let after_first = s.stats();
    assert_eq!(after_first.compilations, 1);
    let second = bicgk(&s, 3, 2);
    assert_eq!(first, second);
    let after_second = s.stats();
    assert_eq!(
        after_second.compilations, 1,
        "no exploration or compilation: {after_second:?}"
    );
    assert_eq!(after_second.cache_hits, 1);
    assert_eq!(after_second.flushes, 2);
}

#[test]
fn other_sizes_outputs_or_a_literal_compile_anew() {
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let x = s.vector(vec![1.0, 2.0, 3.0]).unwrap();
    let run = |f: &dyn Fn() -> fuse::Vector<f64>| {
        let y = f();
        s.read(&y).unwrap()
    };
    run(&|| s.dscal(&s.scalar(2.0), &x).unwrap());
    run(&|| s.dscal(&s.scalar(5.0), &x).unwrap()); // another run-time value: same program
    assert_eq!(s.stats().compilations, 1);
    assert_eq!(run(&|| s.dscal(3.0, &x).unwrap()), [3.0, 6.0, 9.0]); // a literal is compiled in
    assert_eq!(s.stats().compilations, 2);
    // Another literal in its place: passed as a run-time value from now on, which is the
    // program of the run-time scalars above.
    assert_eq!(run(&|| s.dscal(4.0, &x).unwrap()), [4.0, 8.0, 12.0]);
    assert_eq!(run(&|| s.dscal(3.0, &x).unwrap()), [3.0, 6.0, 9.0]);
    assert_eq!(s.stats().compilations, 2);
    let longer = s.vector(vec![1.0; 4]).unwrap();
    let y = s.dscal(&s.scalar(2.0), &longer).unwrap();
    s.read(&y).unwrap();
    assert_eq!(s.stats().compilations, 3, "other sizes");
    let t = s.dscal(&s.scalar(2.0), &x).unwrap();
    let u = s.dadd(&t, &x).unwrap();
    s.read(&u).unwrap(); // t is held: an output
    drop(t);
    let t = s.dscal(&s.scalar(2.0), &x).unwrap();
    let u2 = s.dadd(&t, &x).unwrap();
    drop(t); // now a temporary: another program
    s.read(&u2).unwrap();
    assert_eq!(s.stats().compilations, 5);
    assert_eq!(s.read(&u).unwrap(), s.read(&u2).unwrap());
}

#[test]
fn nothing_held_nothing_run() {
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let x = s.vector(vec![1.0, 2.0]).unwrap();
    let y = s.dscal(2.0, &x).unwrap();
    let _dropped = s.dnrm2(&y).unwrap();
    drop(y);
    drop(_dropped);
    assert_eq!(s.pending_calls(), 2);
    assert_eq!(s.pending_script(), None);
    s.flush().unwrap();
    assert_eq!(s.stats(), Stats::default());
    assert_eq!(s.pending_calls(), 0);
    // A flush with nothing recorded is free, and reading an input runs nothing.
    s.flush().unwrap();
    assert_eq!(s.read(&x).unwrap(), [1.0, 2.0]);
    assert_eq!(s.stats(), Stats::default());
}
