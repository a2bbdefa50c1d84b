//! Parsing and checking of scripts (the YAML language of design.md) into a [`Program`].
//!
//! The YAML is read with positions (`marked-yaml`) so that every error names the line and
//! column of the offending text. Checking resolves each name to the value that is current at
//! that point (re-assignment creates a new value), each call to a library form by arity, and
//! unifies the form's dimension symbols with the script's size symbols.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use marked_yaml::{loader::LoaderOptions, LoadError, Marker, Node};

use crate::error::{Diagnostic, Error, Location, Result};
use crate::formula::Param;
use crate::library::{Library, LookupError};
use crate::program::{Arg, Call, Program, Value, ValueId};
use crate::shape::{is_identifier, Precision, Shape, Sizes};
use crate::wording::list_or_none;

const TOP_LEVEL_KEYS: [&str; 6] = ["name", "precision", "sizes", "inputs", "outputs", "calls"];

/// Reads and checks the script at `path`.
pub fn load(path: &Path, library: &Library) -> Result<Program> {
    let text = crate::file::read_text(path, crate::file::SCRIPT_LIMIT).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(&path.display().to_string(), &text, library)
}

/// Parses and checks script `text`; `file` names it in messages. The program is then
/// rewritten ([`crate::rewrite`]) so that how the math is phrased does not decide its plan.
pub fn parse(file: &str, text: &str, library: &Library) -> Result<Program> {
    Ok(crate::rewrite::rewrite(parse_as_written(file, text, library)?, library))
}

/// [`parse`] without the rewrite stage: the calls exactly as the script writes them.
pub fn parse_as_written(file: &str, text: &str, library: &Library) -> Result<Program> {
    let root = parse_yaml(file, text)?;
    let mut checker = Checker {
        file,
        library,
        program: Program {
            name: default_name(file),
            file: file.to_string(),
            precision: Precision::F32,
            sizes: Sizes::default(),
            values: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            calls: Vec::new(),
            rewrites: Vec::new(),
        },
        chars: text.chars().collect(),
        current: HashMap::new(),
        versions: HashMap::new(),
    };
    checker.check(&root)?;
    Ok(checker.program)
}

fn default_name(file: &str) -> String {
    let stem = Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("script");
    let cleaned: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if is_identifier(&cleaned) {
        cleaned
    } else {
        format!("_{cleaned}")
    }
}

fn parse_yaml(file: &str, text: &str) -> Result<Node, Diagnostic> {
    // Quoted scalars are kept apart from plain ones: `"5"` is text, not a size.
    let options = LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    // A byte-order mark may open a YAML stream; it is no part of the first key.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    marked_yaml::parse_yaml_with_options(0, text, options).map_err(|e| {
        let at = |m: &Marker| Location::at(file, m.line(), m.column());
        match e {
            LoadError::TopLevelMustBeMapping(m) => Diagnostic::new(
                at(&m),
                format!("expected a mapping with keys {}", TOP_LEVEL_KEYS.join(", ")),
            ),
            LoadError::DuplicateKey(d) => {
                let first = d.prev_key.span().start().map(|m| m.line()).unwrap_or(0);
                let loc = d.key.span().start().map(at).unwrap_or_else(|| Location::file(file));
                let what = duplicate_context(text, &d.prev_key);
                Diagnostic::new(
                    loc,
                    format!("duplicate {what} `{}` (first defined on line {first})", d.key.as_str()),
                )
            }
            LoadError::ScanError(m, e) => Diagnostic::new(at(&m), format!("YAML syntax error: {}", e.info())),
            LoadError::UnexpectedAnchor(m) => Diagnostic::new(at(&m), "YAML anchors are not supported in scripts"),
            LoadError::UnexpectedTag(m) => Diagnostic::new(at(&m), "YAML tags are not supported in scripts"),
            LoadError::MappingKeyMustBeScalar(m) => Diagnostic::new(at(&m), "expected a name as mapping key"),
            other => Diagnostic::new(Location::file(file), format!("YAML error: {other}")),
        }
    })
}

/// What a duplicated key is, from the section that holds it: `input`, `size` or `key`.
fn duplicate_context(text: &str, first: &marked_yaml::types::MarkedScalarNode) -> &'static str {
    // Re-read permitting duplicates: the mapping keeps the first key, so find the section whose
    // mapping holds a key at the first occurrence's position.
    let Ok(root) = marked_yaml::parse_yaml(0, text) else {
        return "key";
    };
    let target = first.span().start();
    let holds = |node: &Node| {
        node.as_mapping()
            .is_some_and(|m| m.keys().any(|k| k.span().start() == target))
    };
    let Some(top) = root.as_mapping() else {
        return "key";
    };
    for (section, word) in [("inputs", "input"), ("sizes", "size")] {
        if top.get_node(section).is_some_and(holds) {
            return word;
        }
    }
    "top-level key"
}

struct Checker<'a> {
    file: &'a str,
    library: &'a Library,
    program: Program,
    /// The text's characters, indexed as YAML markers count them.
    chars: Vec<char>,
    /// The current value of each script name.
    current: HashMap<String, ValueId>,
    /// How many values each script name has had.
    versions: HashMap<String, usize>,
}

/// A token of a call, with its character offset in the call text.
struct Token<'t> {
    text: &'t str,
    offset: usize,
}

impl<'a> Checker<'a> {
    fn loc(&self, node: &Node) -> Location {
        self.marker_loc(node.span().start())
    }

    fn marker_loc(&self, m: Option<&Marker>) -> Location {
        match m {
            Some(m) => Location::at(self.file, m.line(), m.column()),
            None => Location::file(self.file),
        }
    }

    fn err(&self, node: &Node, message: impl Into<String>) -> Error {
        Diagnostic::new(self.loc(node), message).into()
    }

    fn check(&mut self, root: &Node) -> Result<()> {
        let Some(top) = root.as_mapping() else {
            return Err(self.err(
                root,
                format!("expected a mapping with keys {}", TOP_LEVEL_KEYS.join(", ")),
            ));
        };
        for (key, _) in top.iter() {
            if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
                return Err(Diagnostic::new(
                    self.marker_loc(key.span().start()),
                    format!(
                        "unknown top-level key `{}`; expected one of {}",
                        key.as_str(),
                        TOP_LEVEL_KEYS.join(", ")
                    ),
                )
                .into());
            }
        }
        let section = |name: &str| top.get_node(name);
        if let Some(node) = section("name") {
            self.program.name = self.identifier(node, "script name")?;
        }
        if let Some(node) = section("precision") {
            self.precision(node)?;
        }
        if let Some(node) = section("sizes") {
            self.sizes(node)?;
        }
        let file = self.file;
        let required = |name: &str, expected: &str| {
            top.get_node(name).ok_or_else(|| {
                Error::from(Diagnostic::new(
                    Location::at(file, 1, 1),
                    format!("missing `{name}`: expected {expected}"),
                ))
            })
        };
        let inputs = required("inputs", "a mapping of input names to shapes")?;
        let calls = required("calls", "a list of calls like `q = sgemv(A, p)`")?;
        let outputs = required("outputs", "a list of the names to return")?;
        self.inputs(inputs)?;
        self.calls(calls)?;
        self.outputs(outputs)
    }

    fn scalar<'n>(&self, node: &'n Node, what: &str) -> Result<&'n str> {
        node.as_scalar()
            .map(|s| s.as_str())
            .ok_or_else(|| self.err(node, format!("expected {what}, found a {}", node_kind(node))))
    }

    fn identifier(&self, node: &Node, what: &str) -> Result<String> {
        let s = self.scalar(node, what)?;
        if is_identifier(s) {
            Ok(s.to_string())
        } else {
            Err(self.err(
                node,
                format!(
                    "{what} `{s}` is not an identifier: expected letters, digits and `_`, not starting with a digit"
                ),
            ))
        }
    }

    fn precision(&mut self, node: &Node) -> Result<()> {
        self.program.precision = match self.scalar(node, "a precision")? {
            "f32" => Precision::F32,
            "f64" => Precision::F64,
            other => {
                return Err(self.err(
                    node,
                    format!("precision `{other}` is not supported: expected f32 or f64"),
                ))
            }
        };
        Ok(())
    }

    fn mapping<'n>(
        &self,
        node: &'n Node,
        what: &str,
    ) -> Result<Vec<(&'n marked_yaml::types::MarkedScalarNode, &'n Node)>> {
        match node {
            Node::Mapping(m) => Ok(m.iter().collect()),
            Node::Scalar(s) if s.is_empty() => Ok(Vec::new()),
            _ => Err(self.err(node, format!("expected {what}, found a {}", node_kind(node)))),
        }
    }

    fn sizes(&mut self, node: &Node) -> Result<()> {
        for (key, value) in self.mapping(node, "a mapping of size names to values, like {m: 4096}")? {
            let key_node = Node::Scalar(key.clone());
            let symbol = self.identifier(&key_node, "size name")?;
            let text = self.scalar(value, "a positive integer")?;
            if value.as_scalar().is_some_and(|s| !s.may_coerce()) {
                return Err(self.err(
                    value,
                    format!("size `{symbol}` is the quoted text \"{text}\": write the number unquoted"),
                ));
            }
            let size = match text.parse::<u64>() {
                Ok(0) => return Err(self.err(value, format!("size `{symbol}` is 0: sizes must be positive integers"))),
                Ok(v) if v > usize::MAX as u64 => None,
                Ok(v) => Some(v as usize),
                Err(_) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => None,
                Err(_) => {
                    return Err(self.err(
                        value,
                        format!("size `{symbol}` is `{text}`: expected a positive integer"),
                    ))
                }
            };
            let size = size.ok_or_else(|| self.err(value, format!("size `{symbol}` = {text} is absurdly large")))?;
            self.program.sizes.set(&symbol, size);
        }
        Ok(())
    }

    fn inputs(&mut self, node: &Node) -> Result<()> {
        for (key, value) in self.mapping(
            node,
            "a mapping of input names to shapes, like {A: [m, n], alpha: scalar}",
        )? {
            let key_node = Node::Scalar(key.clone());
            let name = self.identifier(&key_node, "input name")?;
            let shape = self.shape(value)?;
            self.check_bytes(&shape, value, &name)?;
            let id = self.define(&name, shape, None);
            self.program.inputs.push(id);
        }
        Ok(())
    }

    /// `scalar`, `[n]` or `[m, n]`, with every symbol declared in `sizes`.
    fn shape(&self, node: &Node) -> Result<Shape> {
        let expected = "a shape: `scalar`, `[n]` or `[m, n]`";
        if let Some(s) = node.as_scalar() {
            return match s.as_str() {
                "scalar" => Ok(Shape::Scalar),
                other => Err(self.err(node, format!("shape `{other}` is not {expected}"))),
            };
        }
        let Some(seq) = node.as_sequence() else {
            return Err(self.err(node, format!("expected {expected}, found a {}", node_kind(node))));
        };
        let mut dims = Vec::new();
        for dim in seq.iter() {
            let symbol = self.scalar(dim, "a size name")?;
            if self.program.sizes.get(symbol).is_none() {
                let known: Vec<&str> = self.program.sizes.iter().map(|(k, _)| k).collect();
                return Err(self.err(
                    dim,
                    format!(
                        "unknown size symbol `{symbol}`: `sizes` defines {}",
                        list_or_none(&known)
                    ),
                ));
            }
            dims.push(symbol.to_string());
        }
        match dims.as_slice() {
            [n] => Ok(Shape::Vector(n.clone())),
            [m, n] => Ok(Shape::Matrix(m.clone(), n.clone())),
            _ => Err(self.err(
                node,
                format!(
                    "a shape has 1 or 2 dimensions, found {}: expected {expected}",
                    dims.len()
                ),
            )),
        }
    }

    fn check_bytes(&self, shape: &Shape, node: &Node, name: &str) -> Result<()> {
        self.program
            .sizes
            .array_bytes(shape, self.program.precision)
            .map(|_| ())
            .map_err(|e| self.err(node, format!("`{name}`: {e}")))
    }

    /// Creates a new value for script name `name` and makes it current.
    fn define(&mut self, name: &str, shape: Shape, producer: Option<usize>) -> ValueId {
        let count = self.versions.entry(name.to_string()).or_insert(0);
        let versions = *count;
        *count += 1;
        let unique = if versions == 0 {
            name.to_string()
        } else {
            format!("{name}.{versions}")
        };
        self.program.values.push(Value {
            name: unique,
            variable: name.to_string(),
            shape,
            producer,
        });
        let id = self.program.values.len() - 1;
        self.current.insert(name.to_string(), id);
        id
    }

    fn outputs(&mut self, node: &Node) -> Result<()> {
        let items: Vec<&Node> = match node {
            Node::Sequence(s) => s.iter().collect(),
            Node::Scalar(_) => vec![node],
            Node::Mapping(_) => return Err(self.err(node, "expected a list of output names, like [q, s]")),
        };
        if items.is_empty() {
            return Err(self.err(node, "no outputs: expected a list of output names, like [q, s]"));
        }
        for item in items {
            let name = self.identifier(item, "output name")?;
            let assigned = self
                .program
                .calls
                .iter()
                .any(|c| self.program.values[c.result].variable == name);
            let id = match self.current.get(&name) {
                Some(&id) if assigned => id,
                Some(_) => {
                    return Err(self.err(
                        item,
                        format!("output `{name}` is an input that no call assigns: expected the result of a call"),
                    ))
                }
                None => {
                    return Err(self.err(
                        item,
                        format!("output `{name}` is never assigned: no call has `{name} = ...`"),
                    ))
                }
            };
            if self.program.outputs.contains(&id) {
                return Err(self.err(item, format!("output `{name}` is listed twice")));
            }
            self.program.outputs.push(id);
        }
        Ok(())
    }

    fn calls(&mut self, node: &Node) -> Result<()> {
        let seq = match node {
            Node::Sequence(s) => s,
            Node::Scalar(s) if s.is_empty() => {
                return Err(self.err(
                    node,
                    "empty call list: expected at least one call like `q = sgemv(A, p)`",
                ))
            }
            _ => return Err(self.err(node, format!("expected a list of calls, found a {}", node_kind(node)))),
        };
        if seq.is_empty() {
            return Err(self.err(
                node,
                "empty call list: expected at least one call like `q = sgemv(A, p)`",
            ));
        }
        for item in seq.iter() {
            let text = self.scalar(item, "a call like `q = sgemv(A, p)`")?;
            let mut location = self.loc(item);
            if self.is_quoted(item) {
                location = location.shifted(1);
            }
            self.call(text, location)?;
        }
        Ok(())
    }

    fn is_quoted(&self, node: &Node) -> bool {
        let start = node.span().start().map(|m| m.character()).unwrap_or(0);
        matches!(self.chars.get(start), Some('"' | '\''))
    }

    /// Checks one call `target = function(args)` written at `at`.
    fn call(&mut self, text: &str, at: Location) -> Result<()> {
        let tokens = tokenize(text);
        let here = |t: &Token, msg: String| -> Error { Diagnostic::new(at.shifted(t.offset), msg).into() };
        let shape_err = format!("`{text}` is not a call: expected `name = function(arguments)`");
        let texts: Vec<&str> = tokens.iter().map(|t| t.text).collect();
        let (target, func, args) = match texts.as_slice() {
            [_, "=", _, "(", .., ")"] => (&tokens[0], &tokens[2], split_args(&tokens[4..tokens.len() - 1])),
            _ => return Err(Diagnostic::new(at.clone(), shape_err).into()),
        };
        let args = args
            .ok_or_else(|| Diagnostic::new(at.clone(), format!("`{text}`: expected arguments separated by commas")))?;
        if !is_identifier(target.text) {
            return Err(here(
                target,
                format!("`{}` is not an identifier: expected a name to assign", target.text),
            ));
        }
        let precision = self.program.precision;
        let library = self.library;
        let function = library
            .lookup(func.text, precision)
            .map_err(|e| here(func, lookup_message(func.text, precision, e)))?;
        let form = function.form(args.len()).ok_or_else(|| {
            here(
                func,
                format!(
                    "wrong number of arguments: {} takes {}, got {}",
                    func.text,
                    function.arities(),
                    args.len()
                ),
            )
        })?;
        let mut unifier = Unifier::default();
        let mut resolved = Vec::new();
        for (k, (arg, param)) in args.iter().zip(&form.signature.params).enumerate() {
            let a = self.argument(arg, param).map_err(|m| here(arg, m))?;
            if let Arg::Value(v) = a {
                let value = &self.program.values[v];
                unifier
                    .unify(&param.shape, &value.shape, &value.variable)
                    .map_err(|m| {
                        here(
                            arg,
                            format!("shape mismatch in argument {} of {}: {m}", k + 1, func.text),
                        )
                    })?;
            }
            resolved.push(a);
        }
        let result_shape = unifier.apply(&form.signature.result);
        let normalized = format!(
            "{} = {}({})",
            target.text,
            func.text,
            args.iter().map(|a| a.text).collect::<Vec<_>>().join(", ")
        );
        let call_id = self.program.calls.len();
        let result = self.define(target.text, result_shape, Some(call_id));
        self.program.calls.push(Call {
            function: function.name.clone(),
            callee: func.text.to_string(),
            kind: function.kind,
            form: Arc::clone(form),
            args: resolved,
            result,
            location: at,
            text: normalized,
        });
        Ok(())
    }

    /// Resolves one argument token against its parameter.
    fn argument(&self, token: &Token, param: &Param) -> Result<Arg, String> {
        if let Ok(v) = token.text.parse::<f64>() {
            if !v.is_finite() {
                return Err(format!("literal `{}` is not a finite number", token.text));
            }
            // Every backend must read the same number: one that f32 cannot hold is refused.
            if self.program.precision == Precision::F32 && !(v as f32).is_finite() {
                return Err(format!(
                    "literal `{}` is out of range of f32 (at most {:e} in magnitude): write a smaller one or use precision: f64",
                    token.text,
                    f32::MAX
                ));
            }
            return match param.shape {
                Shape::Scalar => Ok(Arg::Literal(v)),
                ref s => Err(format!(
                    "literal `{}` given for parameter `{}`, which is a {} {s}",
                    token.text,
                    param.name,
                    s.kind_name()
                )),
            };
        }
        if !is_identifier(token.text) {
            return Err(format!("argument `{}` is neither a name nor a number", token.text));
        }
        let v = *self.current.get(token.text).ok_or_else(|| {
            format!(
                "`{}` is used before it is assigned: it is not an input and no earlier call assigns it",
                token.text
            )
        })?;
        let shape = &self.program.values[v].shape;
        if shape.rank() != param.shape.rank() {
            return Err(format!(
                "`{}` is {} but parameter `{}` is {}",
                token.text,
                shape.described(),
                param.name,
                param.shape.described(),
            ));
        }
        Ok(Arg::Value(v))
    }
}

fn lookup_message(name: &str, precision: Precision, e: LookupError) -> String {
    match e {
        LookupError::WrongPrecision { called, use_instead } => format!(
            "`{name}` is the {called} variant but this script is {precision}: expected `{use_instead}` (or set `precision: {called}`)"
        ),
        LookupError::Unknown { suggestion: Some(s) } => format!("unknown function `{name}`: did you mean `{s}`?"),
        LookupError::Unknown { suggestion: None } => {
            format!("unknown function `{name}`: expected a library function such as `{}gemv` (see `fuse functions`)", precision.prefix())
        }
    }
}

/// Binds a form's dimension symbols to the script's size symbols.
#[derive(Default)]
struct Unifier {
    /// Form symbol → (script symbol, the argument that bound it and its shape).
    bound: BTreeMap<String, (String, (String, Shape))>,
}

impl Unifier {
    fn unify(&mut self, param: &Shape, actual: &Shape, arg: &str) -> Result<(), String> {
        for (formal, real) in param.dims().iter().zip(actual.dims()) {
            match self.bound.get(*formal) {
                Some((bound, by)) if bound != real => {
                    let (by, by_shape) = by.clone();
                    return Err(format!(
                        "`{arg}` is {actual} but must be {} to match `{by}` {by_shape}",
                        self.apply(param)
                    ));
                }
                Some(_) => {}
                None => {
                    let by = (arg.to_string(), actual.clone());
                    self.bound.insert(formal.to_string(), (real.to_string(), by));
                }
            }
        }
        Ok(())
    }

    fn apply(&self, shape: &Shape) -> Shape {
        map_shape(shape, |d| {
            self.bound
                .get(d)
                .map(|(s, _)| s.clone())
                .unwrap_or_else(|| d.to_string())
        })
    }
}

fn map_shape(shape: &Shape, f: impl Fn(&str) -> String) -> Shape {
    match shape {
        Shape::Scalar => Shape::Scalar,
        Shape::Vector(n) => Shape::Vector(f(n)),
        Shape::Matrix(m, n) => Shape::Matrix(f(m), f(n)),
    }
}

/// Splits a call into names, numbers and punctuation, with character offsets.
fn tokenize(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut iter = text.char_indices().peekable();
    let mut column = 0;
    while let Some((byte, c)) = iter.next() {
        let start_col = column;
        column += 1;
        if c.is_whitespace() {
            continue;
        }
        let mut end = byte + c.len_utf8();
        if !"=(),".contains(c) {
            while let Some(&(b, d)) = iter.peek() {
                if d.is_whitespace() || "=(),".contains(d) {
                    break;
                }
                end = b + d.len_utf8();
                column += 1;
                iter.next();
            }
        }
        tokens.push(Token {
            text: &text[byte..end],
            offset: start_col,
        });
    }
    tokens
}

/// Arguments between the parentheses: single tokens separated by commas.
fn split_args<'t>(tokens: &'t [Token<'t>]) -> Option<Vec<&'t Token<'t>>> {
    if tokens.is_empty() {
        return Some(Vec::new());
    }
    let mut args = Vec::new();
    for chunk in tokens.split(|t| t.text == ",") {
        match chunk {
            [one] if !"=()".contains(one.text) => args.push(one),
            _ => return None,
        }
    }
    Some(args)
}

fn node_kind(node: &Node) -> &'static str {
    match node {
        Node::Scalar(_) => "scalar",
        Node::Sequence(_) => "list",
        Node::Mapping(_) => "mapping",
    }
}
