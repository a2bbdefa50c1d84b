//! The data graph of the shipped scripts: dependencies, shared inputs, SSA renaming.

use std::path::Path;

use fuse_core::{script, DataGraph, Edge, Library, Program, Shape};

fn load(name: &str) -> Program {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts").join(name);
    script::load(&path, &Library::builtin().unwrap()).unwrap()
}

/// Edges as `(from, to, kind, value name)`.
fn edges(p: &Program) -> Vec<(usize, usize, &'static str, String)> {
    DataGraph::build(p)
        .edges()
        .map(|(a, b, e)| {
            let kind = match e {
                Edge::Dependency { .. } => "dep",
                Edge::SharedInput { .. } => "shared",
            };
            (a, b, kind, p.values[e.value()].name.clone())
        })
        .collect()
}

#[test]
fn bicgk_calls_share_a() {
    assert_eq!(edges(&load("bicgk.yaml")), [(0, 1, "shared", "A".to_string())]);
}

#[test]
fn atax_depends_through_t_and_shares_a() {
    let mut e = edges(&load("atax.yaml"));
    e.sort();
    assert_eq!(e, [(0, 1, "dep", "t".to_string()), (0, 1, "shared", "A".to_string())]);
}

#[test]
fn gemver_graph() {
    let p = load("gemver.yaml");
    let mut e = edges(&p);
    e.sort();
    let want = [
        (0, 1, "dep", "B1"),
        (1, 2, "dep", "B"),
        (1, 3, "dep", "B"),
        (2, 3, "dep", "x"),
        (2, 3, "shared", "B"),
    ];
    let want: Vec<_> = want.iter().map(|&(a, b, k, v)| (a, b, k, v.to_string())).collect();
    assert_eq!(e, want);
    assert_eq!(DataGraph::build(&p).dependencies(3), [1, 2]);
    assert_eq!(p.values[p.calls[0].result].shape, Shape::Matrix("m".into(), "n".into()));
}

#[test]
fn reassignment_creates_a_new_value() {
    let p = load("sscal.yaml");
    let x_in = p.inputs[0];
    let x_out = p.outputs[0];
    assert_ne!(x_in, x_out);
    assert_eq!(p.values[x_in].name, "x");
    assert_eq!(p.values[x_out].name, "x.1");
    assert_eq!(p.values[x_out].variable, "x");
    assert_eq!(p.calls[0].reads(), [p.inputs[1], x_in]); // alpha, then x
}

#[test]
fn dot_marks_outputs_and_edge_styles() {
    let p = load("atax.yaml");
    let dot = DataGraph::build(&p).to_dot(&p);
    assert!(dot.starts_with("digraph \"atax\" {"), "{dot}");
    assert!(
        dot.contains("c1 [label=\"y = sgemtv(A, t)\\nnested_reduce · [n]\", peripheries=2];"),
        "{dot}"
    );
    assert!(dot.contains("c0 -> c1 [label=\"t [m]\"];"), "{dot}");
    assert!(
        dot.contains("c0 -> c1 [label=\"A [m, n]\", style=dashed, dir=none];"),
        "{dot}"
    );
}
