//! A compiled kernel's machine code (SASS), read where a memory-bound kernel's speed is decided:
//! its steady-state loop. NVRTC assembles a cubin for a real architecture on any machine;
//! `nvdisasm` (the `nvidia-cuda-nvdisasm` wheel) prints it as text, which is parsed here.
//!
//! The hot loop of a kernel is the loop (a backward branch and the label it goes to) holding
//! the most 128-bit global loads, the smallest such. It is counted over all its paths: every
//! instruction between the label and the branch, whichever way the branches inside go — a
//! scalar fallback behind a branch costs issue slots and registers even when it is not taken.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde::Serialize;

/// Environment variable naming the `nvdisasm` to run.
pub const NVDISASM_ENV: &str = "FUSE_NVDISASM";

/// Why a cubin could not be disassembled.
#[derive(Debug, thiserror::Error)]
pub enum SassError {
    /// No `nvdisasm` here.
    #[error(
        "nvdisasm not found (searched {}): pip install nvidia-cuda-nvdisasm, or set {NVDISASM_ENV}",
        searched.join(", ")
    )]
    NotFound { searched: Vec<String> },
    /// It ran and failed.
    #[error("nvdisasm {path}: {message}")]
    Failed { path: String, message: String },
}

/// One instruction: its opcode with modifiers (`LDG.E.128.CONSTANT`), its operands, and its
/// guard predicate if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Instruction {
    pub opcode: String,
    pub operands: String,
    pub predicated: bool,
}

/// One kernel's code: instructions in address order and the labels among them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Function {
    pub name: String,
    pub instructions: Vec<Instruction>,
    /// (label, index of the instruction it stands before).
    pub labels: Vec<(String, usize)>,
}

/// What one trip of a kernel's hot loop issues.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HotLoop {
    /// Instructions, over all paths (NOPs left out).
    pub instructions: u32,
    /// 128-bit global loads (`LDG.E.128`).
    pub wide_loads: u32,
    /// Narrower global loads: a scalar fallback shows as about four per wide load.
    pub narrow_loads: u32,
    /// Block barriers (`BAR`).
    pub barriers: u32,
    /// 128-bit loads issued before the first instruction that reads a loaded register: the
    /// loads a thread keeps in flight.
    pub loads_before_use: u32,
}

impl HotLoop {
    /// Instructions per 128-bit load.
    pub fn per_wide_load(&self) -> f64 {
        self.instructions as f64 / self.wide_loads.max(1) as f64
    }
}

/// The SASS of `cubin`, from `nvdisasm`.
pub fn disassemble(cubin: &[u8]) -> Result<String, SassError> {
    let path = nvdisasm()?;
    let failed = |message: String| SassError::Failed {
        path: path.display().to_string(),
        message,
    };
    // A private temporary file: nvdisasm reads a path, and no other user may swap it.
    let mut file = tempfile::Builder::new()
        .suffix(".cubin")
        .tempfile()
        .map_err(|e| failed(format!("temporary cubin: {e}")))?;
    std::io::Write::write_all(&mut file, cubin).map_err(|e| failed(format!("temporary cubin: {e}")))?;
    let out = Command::new(&path)
        .arg("-c")
        .arg(file.path())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| failed(e.to_string()))?;
    if !out.status.success() {
        return Err(failed(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    String::from_utf8(out.stdout).map_err(|e| failed(e.to_string()))
}

/// `nvdisasm`: `$FUSE_NVDISASM` if set (then the only place looked at), else beside the NVRTC
/// wheel's library (`nvidia/cu13/bin`), else in Python's site-packages, else on `PATH`.
fn nvdisasm() -> Result<PathBuf, SassError> {
    if let Some(named) = std::env::var_os(NVDISASM_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(named);
        return match path.is_file() {
            true => Ok(path),
            false => Err(SassError::NotFound {
                searched: vec![format!("{NVDISASM_ENV}={}", path.display())],
            }),
        };
    }
    let beside_nvrtc = crate::nvrtc::load()
        .ok()
        .and_then(|lib| PathBuf::from(lib).parent()?.parent().map(|wheel| wheel.join("bin")))
        .filter(|bin| fuse_core::cache::trusted(bin).is_ok());
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let folders: Vec<PathBuf> = beside_nvrtc
        .into_iter()
        .chain(crate::dynlib::wheel_dirs("nvidia/cu13/bin"))
        .chain(on_path)
        .collect();
    let found = folders.iter().map(|f| f.join("nvdisasm")).find(|p| p.is_file());
    found.ok_or_else(|| SassError::NotFound {
        searched: folders.iter().map(|f| f.display().to_string()).collect(),
    })
}

/// The functions of an `nvdisasm` listing.
pub fn parse(sass: &str) -> Vec<Function> {
    let mut functions: Vec<Function> = Vec::new();
    for line in sass.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix(".text.").and_then(|l| l.strip_suffix(':')) {
            functions.push(Function {
                name: name.to_string(),
                ..Function::default()
            });
            continue;
        }
        let Some(function) = functions.last_mut() else { continue };
        if let Some(label) = line.strip_suffix(':').filter(|l| l.starts_with(".L")) {
            function.labels.push((label.to_string(), function.instructions.len()));
        } else if let Some(instruction) = instruction(line) {
            function.instructions.push(instruction);
        }
    }
    functions
}

/// `/*0160*/  @!P1 LDG.E.128.CONSTANT R36, desc[UR10][R2.64] ;` as an instruction.
fn instruction(line: &str) -> Option<Instruction> {
    let rest = line.strip_prefix("/*")?;
    let (_, text) = rest.split_once("*/")?;
    let text = text.trim().trim_end_matches(';').trim();
    let (predicated, text) = match text.strip_prefix('@') {
        Some(guarded) => (true, guarded.split_once(char::is_whitespace)?.1.trim()),
        None => (false, text),
    };
    let (opcode, operands) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    Some(Instruction {
        opcode: opcode.to_string(),
        operands: operands.trim().to_string(),
        predicated,
    })
}

impl Function {
    /// The instruction index of `label`.
    fn label(&self, label: &str) -> Option<usize> {
        self.labels.iter().find(|(l, _)| l == label).map(|&(_, at)| at)
    }

    /// Every loop: (first instruction, the branch back to it).
    fn loops(&self) -> Vec<(usize, usize)> {
        (self.instructions.iter().enumerate())
            .filter(|(_, i)| i.opcode == "BRA")
            .filter_map(|(at, i)| {
                let target = i.operands.split('(').nth(1)?.split(')').next()?;
                self.label(target).filter(|&start| start <= at).map(|start| (start, at))
            })
            .collect()
    }

    /// The hot loop: of the innermost loops with 128-bit loads (holding no other such loop: a
    /// loop around the interior and edge bodies of a kernel is not its steady state), the one
    /// with the most, the smallest of those.
    pub fn hot_loop(&self) -> Option<HotLoop> {
        let count = |&(s, e): &(usize, usize)| self.instructions[s..=e].iter().filter(|i| is_wide_load(i)).count();
        let loading: Vec<(usize, usize)> = self.loops().into_iter().filter(|l| count(l) > 0).collect();
        let holds =
            |outer: &(usize, usize), inner: &(usize, usize)| outer != inner && outer.0 <= inner.0 && inner.1 <= outer.1;
        let (start, end) = (loading.iter())
            .filter(|outer| !loading.iter().any(|inner| holds(outer, inner)))
            .max_by_key(|l| (count(l), std::cmp::Reverse(l.1 - l.0)))?;
        Some(measure(&self.instructions[*start..=*end]))
    }
}

fn is_wide_load(i: &Instruction) -> bool {
    i.opcode.starts_with("LDG") && i.opcode.contains(".128")
}

fn measure(body: &[Instruction]) -> HotLoop {
    let instructions = body.iter().filter(|i| i.opcode != "NOP").count() as u32;
    let loads = |wide: bool| {
        (body.iter())
            .filter(|i| i.opcode.starts_with("LDG") && is_wide_load(i) == wide)
            .count() as u32
    };
    HotLoop {
        instructions,
        wide_loads: loads(true),
        narrow_loads: loads(false),
        barriers: body.iter().filter(|i| i.opcode.starts_with("BAR")).count() as u32,
        loads_before_use: loads_before_use(body),
    }
}

/// The 128-bit loads issued before any instruction reads a register one of them wrote.
fn loads_before_use(body: &[Instruction]) -> u32 {
    let mut loaded: HashSet<u32> = HashSet::new();
    let mut issued = 0;
    for i in body {
        if is_wide_load(i) {
            let reads = registers(i.operands.split_once(',').map_or("", |(_, sources)| sources));
            if reads.iter().any(|r| loaded.contains(r)) {
                break;
            }
            let first = registers(i.operands.split(',').next().unwrap_or(""));
            loaded.extend(first.iter().flat_map(|&r| r..r + 4));
            issued += 1;
            continue;
        }
        // Every operand may be read: the first is the destination of most instructions, but the
        // address or value of a store or atomic.
        let read = match i.opcode.starts_with("ST") || i.opcode.starts_with("RED") || i.opcode.starts_with("ATOM") {
            true => registers(&i.operands),
            false => registers(i.operands.split_once(',').map_or("", |(_, sources)| sources)),
        };
        if read.iter().any(|r| loaded.contains(r)) {
            break;
        }
    }
    issued
}

/// The general registers named in `operands` (`R12`, `R2.64` as R2 and R3).
fn registers(operands: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let bytes = operands.as_bytes();
    let mut k = 0;
    while k < bytes.len() {
        let starts = bytes[k] == b'R' && (k == 0 || !bytes[k - 1].is_ascii_alphanumeric());
        if !starts {
            k += 1;
            continue;
        }
        let digits: String = operands[k + 1..].chars().take_while(char::is_ascii_digit).collect();
        k += 1 + digits.len();
        if let Ok(r) = digits.parse::<u32>() {
            out.push(r);
            if operands[k..].starts_with(".64") {
                out.push(r + 1);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
//--------------------- .text.k       --------------------------
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.128.CONSTANT R8, desc[UR4][R2.64+0x200] ;
        /*0030*/              @!P0 LDG.E R12, desc[UR4][R2.64+0x400] ;
        /*0040*/                   FFMA R20, R4, R16, R20 ;
        /*0050*/                   FFMA R20, R9, R17, R20 ;
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0070*/                   NOP ;
        /*0080*/               @P1 BRA `(.L_x_1) ;
        /*0090*/                   EXIT ;
.L_x_2:
        /*00a0*/                   BRA `(.L_x_2);
";

    #[test]
    fn the_hot_loop_is_counted_over_all_paths() {
        let functions = parse(LISTING);
        assert_eq!(functions.len(), 1);
        assert_eq!(functions[0].name, "k");
        let hot = functions[0].hot_loop().unwrap();
        let expected = HotLoop {
            instructions: 7,
            wide_loads: 2,
            narrow_loads: 1,
            barriers: 1,
            loads_before_use: 2,
        };
        assert_eq!(hot, expected);
        assert_eq!(hot.per_wide_load(), 3.5);
    }

    #[test]
    fn a_loop_around_two_bodies_is_not_the_hot_loop() {
        let listing = "\
.text.k:
.L_x_0:
.L_x_1:
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   FADD R8, R4, R5 ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0030*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0040*/                   LDG.E R9, desc[UR4][R2.64] ;
        /*0050*/                   FADD R8, R4, R9 ;
        /*0060*/               @P1 BRA `(.L_x_2) ;
        /*0070*/               @P2 BRA `(.L_x_0) ;
";
        let hot = parse(listing)[0].hot_loop().unwrap();
        assert_eq!((hot.instructions, hot.wide_loads, hot.narrow_loads), (3, 1, 0));
    }

    #[test]
    fn registers_of_64_bit_operands_are_pairs() {
        assert_eq!(registers("desc[UR4][R2.64+0x10], R12"), vec![2, 3, 12]);
        assert_eq!(registers("RZ, R7, UR5"), vec![7]);
    }
}
