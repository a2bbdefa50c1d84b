//! The data-dependency graph (paper §4.2): one node per call; an edge for every value one call
//! computes and another reads (a true dependency), and one for every value two calls both read
//! (a shared input, which is what lets BiCGK read A once).

use std::fmt::Write;

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::program::{CallId, Program, ValueId};

/// Why two calls are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// The source call computes `value`, the target reads it.
    Dependency {
        /// The value passed.
        value: ValueId,
    },
    /// Both calls read `value`; the edge goes from the earlier call to the later.
    SharedInput {
        /// The value read by both.
        value: ValueId,
    },
}

impl Edge {
    /// The value the edge is about.
    pub fn value(self) -> ValueId {
        match self {
            Edge::Dependency { value } | Edge::SharedInput { value } => value,
        }
    }
}

/// The data-dependency graph of a [`Program`]. Node weights are call ids, and
/// `NodeIndex::new(c)` is the node of call `c`.
#[derive(Debug, Clone)]
pub struct DataGraph {
    /// The graph itself.
    pub graph: DiGraph<CallId, Edge>,
}

impl DataGraph {
    /// Builds the graph of `program`.
    pub fn build(program: &Program) -> DataGraph {
        let mut graph = DiGraph::new();
        for c in 0..program.calls.len() {
            graph.add_node(c);
        }
        // Who has read each value so far, to link later readers to earlier ones.
        let mut readers: Vec<Vec<CallId>> = vec![Vec::new(); program.values.len()];
        for (c, call) in program.calls.iter().enumerate() {
            for v in call.reads() {
                if let Some(p) = program.values[v].producer {
                    graph.add_edge(NodeIndex::new(p), NodeIndex::new(c), Edge::Dependency { value: v });
                }
                for &earlier in &readers[v] {
                    graph.add_edge(
                        NodeIndex::new(earlier),
                        NodeIndex::new(c),
                        Edge::SharedInput { value: v },
                    );
                }
                readers[v].push(c);
            }
        }
        DataGraph { graph }
    }

    /// The calls whose results `call` reads, in call order.
    pub fn dependencies(&self, call: CallId) -> Vec<CallId> {
        let mut deps: Vec<CallId> = self
            .graph
            .edges_directed(NodeIndex::new(call), petgraph::Direction::Incoming)
            .filter(|e| matches!(e.weight(), Edge::Dependency { .. }))
            .map(|e| e.source().index())
            .collect();
        deps.sort_unstable();
        deps
    }

    /// All edges as `(from, to, edge)` in insertion order.
    pub fn edges(&self) -> impl Iterator<Item = (CallId, CallId, Edge)> + '_ {
        self.graph
            .edge_references()
            .map(|e| (e.source().index(), e.target().index(), *e.weight()))
    }

    /// Graphviz DOT: calls as boxes (double border when they produce an output), dependencies
    /// as solid arrows, shared inputs as dashed lines, each labelled with the value and its shape.
    pub fn to_dot(&self, program: &Program) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "digraph {} {{", quote(&program.name));
        let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
        for node in self.graph.node_indices() {
            let call = &program.calls[self.graph[node]];
            let periphery = if program.is_output(call.result) {
                ", peripheries=2"
            } else {
                ""
            };
            let label = format!(
                "{}\\n{} · {}",
                escape(&call.text),
                call.kind,
                program.values[call.result].shape
            );
            let _ = writeln!(out, "  c{} [label=\"{label}\"{periphery}];", node.index());
        }
        for (from, to, edge) in self.edges() {
            let value = &program.values[edge.value()];
            let label = escape(&format!("{} {}", value.name, value.shape));
            let style = match edge {
                Edge::Dependency { .. } => String::new(),
                Edge::SharedInput { .. } => ", style=dashed, dir=none".to_string(),
            };
            let _ = writeln!(out, "  c{from} -> c{to} [label=\"{label}\"{style}];");
        }
        out.push_str("}\n");
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn quote(s: &str) -> String {
    format!("\"{}\"", escape(s))
}
