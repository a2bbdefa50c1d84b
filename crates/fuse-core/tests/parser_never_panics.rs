//! The parser must turn any text into a program or a diagnostic, never a panic: arbitrary
//! strings, and valid scripts mutated at random (the way a user's typos mutate them).

use std::path::Path;

use fuse_core::{script, DataGraph, Library};
use proptest::prelude::*;

fn shipped_scripts() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts");
    let mut texts: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    texts.sort();
    texts
}

/// Parses `text`; when it is accepted, also exercises the later stages on it.
fn parse_fully(library: &Library, text: &str) {
    if let Ok(program) = script::parse("fuzz.yaml", text, library) {
        let _ = program.bind_sizes(&[]);
        let _ = DataGraph::build(&program).to_dot(&program);
        assert!(!program.calls.is_empty() && !program.outputs.is_empty());
    }
}

/// One edit at a position given as a fraction of the text's length.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(f64, usize),
    Insert(f64, String),
    DuplicateLine(f64),
    SwapLines(f64, f64),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let piece = prop::sample::select(vec![
        ":", "[", "]", "{", "}", ",", "-", "=", "(", ")", " ", "\n", "\t", "\"", "'", "#", "&a", "*a", "!!", "0", "-1",
        "1e400", "m", "n", "x", "sgemv", "dgemv", "scalar", "inputs:", "calls:", "- ", "é", "\u{0}",
    ]);
    prop_oneof![
        (0.0..1.0f64, 1usize..20).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (0.0..1.0f64, prop::collection::vec(piece, 1..4)).prop_map(|(at, p)| Mutation::Insert(at, p.concat())),
        (0.0..1.0f64).prop_map(Mutation::DuplicateLine),
        (0.0..1.0f64, 0.0..1.0f64).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
    ]
}

fn apply(text: &str, m: &Mutation) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = |f: f64, len: usize| ((f * len as f64) as usize).min(len);
    let mut lines: Vec<&str> = text.lines().collect();
    match m {
        Mutation::Delete(f, n) => {
            let start = at(*f, chars.len());
            let end = (start + n).min(chars.len());
            chars[..start].iter().chain(&chars[end..]).collect()
        }
        Mutation::Insert(f, piece) => {
            let pos = at(*f, chars.len());
            let mut s: String = chars[..pos].iter().collect();
            s.push_str(piece);
            s.extend(&chars[pos..]);
            s
        }
        Mutation::DuplicateLine(f) if !lines.is_empty() => {
            let k = at(*f, lines.len() - 1);
            lines.insert(k, lines[k]);
            lines.join("\n")
        }
        Mutation::SwapLines(a, b) if !lines.is_empty() => {
            let (i, j) = (at(*a, lines.len() - 1), at(*b, lines.len() - 1));
            lines.swap(i, j);
            lines.join("\n")
        }
        _ => text.to_string(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        parse_fully(&Library::builtin().unwrap(), &text);
    }

    #[test]
    fn yaml_shaped_text_never_panics(text in "(name|sizes|inputs|outputs|calls|precision|[a-z]{1,3}): ?(\\{[a-z: ,0-9\\[\\]]{0,30}\\}|\\[[a-z, ]{0,12}\\]|f32|f64|\\n  - [a-z]{1,2} = [sd][a-z]{2,5}\\([A-Za-z0-9., -]{0,12}\\)){0,3}\\n"){
        parse_fully(&Library::builtin().unwrap(), &text);
    }

    #[test]
    fn mutated_scripts_never_panic(which in 0usize..11, edits in prop::collection::vec(mutation(), 1..5)) {
        let scripts = shipped_scripts();
        let mut text = scripts[which % scripts.len()].clone();
        for m in &edits {
            text = apply(&text, m);
        }
        parse_fully(&Library::builtin().unwrap(), &text);
    }
}

#[test]
fn every_shipped_script_parses() {
    let library = Library::builtin().unwrap();
    let scripts = shipped_scripts();
    assert_eq!(scripts.len(), 13, "the 11 sequences, bicgstab and normalize");
    for text in scripts {
        script::parse("s.yaml", &text, &library).unwrap();
    }
}
