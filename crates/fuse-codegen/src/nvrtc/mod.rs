//! CUDA C++ → PTX with NVRTC, plus the `ptxas` resource report (registers, spills, shared
//! memory), on a machine with or without a GPU.
//!
//! # Getting libnvrtc
//!
//! NVRTC is a host library; the PyPI wheel is enough (the GPU machines run CUDA 13.0):
//!
//! ```text
//! pip install 'nvidia-cuda-nvrtc==13.0.*'
//! export FUSE_NVRTC_LIB=$(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))')
//! ```
//!
//! `FUSE_NVRTC_LIB` may name the folder or the `libnvrtc.so.13` file in it. Without it, each
//! folder of `LD_LIBRARY_PATH` is searched, then the system loader is asked for cudarc's
//! usual names, then the wheel's folder is looked for in the site-packages of `python3` (or
//! `$PYTHON`), so that the wheel works without the variable. When nothing loads, every entry point returns [`NvrtcError::NotFound`] listing
//! what was tried; none of them panics (cudarc would, so it is never reached before the
//! library is known to load — see [`load`]).
//!
//! # Example
//!
//! ```no_run
//! use fuse_codegen::nvrtc::{compile, Arch, CompileOptions};
//!
//! let source = r#"extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }"#;
//! let opts = CompileOptions { arch: Arch::SM_90, ..CompileOptions::default() };
//! let compiled = compile(source, &opts)?;
//! assert_eq!(compiled.resources[0].kernel, "k");
//! assert_eq!(compiled.resources[0].spill_stores_bytes, 0);
//! # Ok::<(), fuse_codegen::nvrtc::NvrtcError>(())
//! ```

mod load;
mod report;

pub use load::LIB_ENV;
pub use report::{FunctionFrame, KernelResources};

use cudarc::nvrtc::{result, sys};
use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::str::FromStr;

use crate::dynlib::ProbeError;

/// What can go wrong when loading NVRTC or compiling with it.
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    /// No libnvrtc could be loaded.
    #[error(
        "libnvrtc not found (searched: {}). Install it with `pip install 'nvidia-cuda-nvrtc==13.0.*'` \
         and set {LIB_ENV} (or LD_LIBRARY_PATH, before the process starts) to the wheel's \
         `nvidia/cu13/lib` folder",
        searched.join("; ")
    )]
    NotFound {
        /// Each path or name tried, with the loader's reason where known.
        searched: Vec<String>,
    },
    /// The library we found is not the one cudarc would use, nor of the same release.
    #[error(
        "libnvrtc {wanted} loads, but cudarc resolves libnvrtc to {}; cudarc opens only bare \
         names (libnvrtc.so, libnvrtc.so.13, ...), so put the wanted folder first in \
         LD_LIBRARY_PATH before the process starts, or remove the other copy",
        loaded.as_deref().unwrap_or("nothing (its soname is not among those names)")
    )]
    Conflict {
        /// The library chosen by `FUSE_NVRTC_LIB` or `LD_LIBRARY_PATH`, with its version.
        wanted: String,
        /// The file cudarc loaded instead, with its version, if it loaded one.
        loaded: Option<String>,
    },
    /// A source, name, define or architecture that cannot be passed to NVRTC.
    #[error("invalid NVRTC input: {0}")]
    InvalidInput(String),
    /// The loaded NVRTC cannot generate code for the requested architecture.
    #[error("NVRTC {version} cannot target {arch}; supported: {}", supported.join(", "))]
    UnsupportedArch {
        /// Requested target.
        arch: Arch,
        /// NVRTC version as `major.minor`.
        version: String,
        /// Targets this NVRTC supports.
        supported: Vec<String>,
    },
    /// The source did not compile; `log` holds NVRTC's diagnostics.
    #[error("NVRTC compilation failed:\n{log}")]
    Compile {
        /// Full program log (compiler and ptxas messages).
        log: String,
    },
    /// An NVRTC call failed for a reason other than the source.
    #[error("{call} failed: {code}\n{log}")]
    Api {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's result code.
        code: String,
        /// Program log where there is one (e.g. which file NVRTC could not open).
        log: String,
    },
}

/// Makes sure libnvrtc is loaded (once per process) and returns the file it came from.
///
/// Search order: `FUSE_NVRTC_LIB` (a file or a folder; when set it is the only place looked
/// at, so a wrong setting is an error rather than silently ignored), then each folder of
/// `LD_LIBRARY_PATH`, then cudarc's own bare names through the system loader, then the pip
/// wheel in Python's site-packages.
pub fn load() -> Result<&'static str, NvrtcError> {
    load::library().map_err(|e| match e {
        ProbeError::NotFound { searched } => NvrtcError::NotFound { searched },
        ProbeError::Conflict { wanted, loaded } => NvrtcError::Conflict { wanted, loaded },
    })
}

/// A real GPU architecture (`sm_XY`), so that ptxas runs and reports resources.
///
/// Virtual targets (`compute_XY`) would stop at PTX and produce no report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arch(u32);

impl Arch {
    /// Ampere A100.
    pub const SM_80: Arch = Arch(80);
    /// Ampere consumer parts (RTX 30xx, A40).
    pub const SM_86: Arch = Arch(86);
    /// Ada (RTX 40xx, L4, L40).
    pub const SM_89: Arch = Arch(89);
    /// Hopper H100/H200.
    pub const SM_90: Arch = Arch(90);
    /// Blackwell B200.
    pub const SM_100: Arch = Arch(100);
    /// Blackwell consumer parts (RTX 50xx).
    pub const SM_120: Arch = Arch(120);

    /// The architecture of a device with compute capability `major.minor`.
    pub fn new(major: u32, minor: u32) -> Result<Arch, NvrtcError> {
        if (1..100).contains(&major) && minor < 10 {
            Ok(Arch(major * 10 + minor))
        } else {
            Err(NvrtcError::InvalidInput(format!(
                "compute capability {major}.{minor} is not of the form X.Y"
            )))
        }
    }

    /// Compute capability as NVRTC numbers it, e.g. 90 for `sm_90`.
    pub fn number(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sm_{}", self.0)
    }
}

impl FromStr for Arch {
    type Err = NvrtcError;

    /// Parses `sm_90`, `sm_120`, ….
    fn from_str(s: &str) -> Result<Arch, NvrtcError> {
        let number: u32 = s
            .strip_prefix("sm_")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| NvrtcError::InvalidInput(format!("`{s}` is not an sm_XY target")))?;
        Arch::new(number / 10, number % 10)
    }
}

/// How to compile one program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// Target GPU.
    pub arch: Arch,
    /// Preprocessor definitions, passed as `-DNAME=VALUE`.
    pub defines: Vec<(String, String)>,
    /// Program (file) name shown in diagnostics.
    pub name: String,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            arch: Arch::SM_90,
            defines: Vec::new(),
            name: "fuse.cu".to_owned(),
        }
    }
}

impl CompileOptions {
    /// NVRTC command line; `-v` for ptxas is what puts the resource report in the log. Caches
    /// of compiled code key on it.
    pub fn args(&self) -> Result<Vec<String>, NvrtcError> {
        let mut args = vec![
            format!("--gpu-architecture={}", self.arch),
            "-std=c++17".to_owned(),
            "--ptxas-options=-v".to_owned(),
        ];
        for (name, value) in &self.defines {
            check_define(name, value)?;
            args.push(format!("-D{name}={value}"));
        }
        Ok(args)
    }
}

/// A define name must be an identifier; NUL bytes cannot cross the C API.
fn check_define(name: &str, value: &str) -> Result<(), NvrtcError> {
    let mut chars = name.chars();
    let identifier = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier || value.contains('\0') {
        return Err(NvrtcError::InvalidInput(format!(
            "define `{name}={}`: name must be an identifier and neither may contain NUL",
            value.escape_debug()
        )));
    }
    Ok(())
}

/// Output of a successful compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// PTX text (without the trailing NUL).
    pub ptx: String,
    /// The cubin for `arch` (NVRTC assembles one for every real architecture): what a driver
    /// loads without compiling anything.
    pub cubin: Vec<u8>,
    /// Full program log: warnings and the ptxas report.
    pub log: String,
    /// Per-kernel resources from the ptxas report, in log order.
    pub resources: Vec<KernelResources>,
    /// Non-inlined device functions with their own stack frame or spills.
    pub device_functions: Vec<FunctionFrame>,
}

/// Compiles CUDA C++ `source` to PTX for `opts.arch`, with the ptxas resource report.
pub fn compile(source: &str, opts: &CompileOptions) -> Result<Compiled, NvrtcError> {
    load()?;
    check_arch(opts.arch)?;
    let args = opts.args()?;
    let source = c_string("source", source)?;
    let name = c_string("program name", &opts.name)?;
    let program = Program::new(&source, &name)?;
    // SAFETY: `program` is live, and `args` holds no NUL (checked above) so cudarc's
    // `CString::new(..).unwrap()` cannot panic.
    let status = unsafe { result::compile_program(program.0, &args) };
    let log = program.log()?;
    match status {
        Ok(()) => {}
        Err(err) if err.0 == sys::nvrtcResult::NVRTC_ERROR_COMPILATION => return Err(NvrtcError::Compile { log }),
        Err(err) => {
            return Err(NvrtcError::Api {
                call: "nvrtcCompileProgram",
                code: format!("{:?}", err.0),
                log,
            })
        }
    }
    let report = report::parse(&log);
    Ok(Compiled {
        ptx: program.ptx()?,
        cubin: program.cubin()?,
        log,
        resources: report.kernels,
        device_functions: report.functions,
    })
}

/// NVRTC's version as `(major, minor)`, e.g. `(13, 0)`.
pub fn version() -> Result<(i32, i32), NvrtcError> {
    load()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: both pointers are valid for writes; the library is loaded.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(api("nvrtcVersion"))?;
    Ok((major, minor))
}

/// Rejects targets this NVRTC does not know, with the list it does.
fn check_arch(arch: Arch) -> Result<(), NvrtcError> {
    let supported = supported_archs()?;
    if supported.contains(&arch.number()) {
        return Ok(());
    }
    let (major, minor) = version()?;
    Err(NvrtcError::UnsupportedArch {
        arch,
        version: format!("{major}.{minor}"),
        supported: supported.iter().map(|n| format!("sm_{n}")).collect(),
    })
}

fn supported_archs() -> Result<Vec<u32>, NvrtcError> {
    let mut count: c_int = 0;
    // SAFETY: NVRTC writes `count` entries into a buffer of exactly that size.
    let archs = unsafe {
        sys::nvrtcGetNumSupportedArchs(&mut count)
            .result()
            .map_err(api("nvrtcGetNumSupportedArchs"))?;
        let mut archs: Vec<c_int> = vec![0; usize::try_from(count).unwrap_or(0)];
        sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
            .result()
            .map_err(api("nvrtcGetSupportedArchs"))?;
        archs
    };
    Ok(archs.into_iter().filter_map(|a| a.try_into().ok()).collect())
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Program {
    /// NVRTC may keep pointers into `source` and `name`: the caller keeps them alive longer.
    fn new(source: &CString, name: &CString) -> Result<Program, NvrtcError> {
        result::create_program(source, Some(name))
            .map(Program)
            .map_err(api("nvrtcCreateProgram"))
    }

    fn log(&self) -> Result<String, NvrtcError> {
        // SAFETY: the program is live until drop.
        let log = unsafe { result::get_program_log(self.0) }.map_err(api("nvrtcGetProgramLog"))?;
        Ok(text(&log).trim_end().to_owned())
    }

    fn ptx(&self) -> Result<String, NvrtcError> {
        // SAFETY: the program is live and compiled.
        let ptx = unsafe { result::get_ptx(self.0) }.map_err(api("nvrtcGetPTX"))?;
        Ok(text(&ptx))
    }

    fn cubin(&self) -> Result<Vec<u8>, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: the program is live and compiled for a real architecture; NVRTC writes
        // exactly `size` bytes into a buffer of that size.
        unsafe {
            sys::nvrtcGetCUBINSize(self.0, &mut size)
                .result()
                .map_err(api("nvrtcGetCUBINSize"))?;
            let mut cubin = vec![0 as c_char; size];
            sys::nvrtcGetCUBIN(self.0, cubin.as_mut_ptr())
                .result()
                .map_err(api("nvrtcGetCUBIN"))?;
            Ok(cubin.into_iter().map(|c| c as u8).collect())
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `create_program` and destroyed only here. A failure to free
        // cannot be reported from drop and leaks only the program.
        let _ = unsafe { result::destroy_program(self.0) };
    }
}

/// NVRTC's NUL-terminated buffers as Rust text.
fn text(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn c_string(what: &str, text: &str) -> Result<CString, NvrtcError> {
    CString::new(text).map_err(|_| NvrtcError::InvalidInput(format!("{what} contains a NUL byte")))
}

fn api(call: &'static str) -> impl Fn(result::NvrtcError) -> NvrtcError {
    move |err| NvrtcError::Api {
        call,
        code: format!("{:?}", err.0),
        log: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arch_round_trips_through_text() {
        let arch: Arch = "sm_90".parse().unwrap();
        assert_eq!(arch, Arch::SM_90);
        assert_eq!(Arch::SM_120.to_string(), "sm_120");
        assert_eq!(Arch::new(8, 6).unwrap(), Arch::SM_86);
    }

    #[test]
    fn bad_arch_text_is_an_error() {
        for text in ["compute_90", "sm_", "sm_x", "90", "sm_2000"] {
            assert!(
                matches!(text.parse::<Arch>(), Err(NvrtcError::InvalidInput(_))),
                "{text}"
            );
        }
        assert!(Arch::new(9, 10).is_err());
    }

    #[test]
    fn args_request_real_arch_and_ptxas_report() {
        let opts = CompileOptions {
            arch: Arch::SM_80,
            defines: vec![("TILE".into(), "32".into())],
            ..CompileOptions::default()
        };
        let args = opts.args().unwrap();
        assert_eq!(
            args,
            [
                "--gpu-architecture=sm_80",
                "-std=c++17",
                "--ptxas-options=-v",
                "-DTILE=32"
            ]
        );
    }

    #[test]
    fn bad_defines_are_rejected() {
        for (name, value) in [("1X", "1"), ("A B", "1"), ("", "1"), ("X", "a\0b")] {
            assert!(check_define(name, value).is_err(), "{name:?}={value:?}");
        }
        assert!(check_define("_Tile2", "a b").is_ok());
    }

    #[test]
    fn nvrtc_text_stops_at_nul() {
        let buffer: Vec<c_char> = b"ok\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(text(&buffer), "ok");
    }
}
