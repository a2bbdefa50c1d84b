//! Parsing the `ptxas -v` report that NVRTC appends to the program log.
//!
//! The report looks like this (NVRTC 13.0, `sm_90`):
//!
//! ```text
//! ptxas info    : Compiling entry function 'axpy' for 'sm_90'
//! ptxas info    : Function properties for axpy
//! ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//! ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem
//! ptxas info    : Function properties for _Z6helperPfi
//! ptxas         .     0 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
//! ```
//!
//! Entry functions get a "Compiling entry function" header; non-inlined device functions only
//! get "Function properties", which is why they are reported apart.

/// Resources ptxas reports for one entry function (kernel).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelResources {
    /// Kernel name as in the PTX (mangled unless declared `extern "C"`).
    pub kernel: String,
    /// Target the report is for, e.g. `sm_90`.
    pub arch: String,
    /// Registers per thread.
    pub registers: u32,
    /// Named barriers used (`__syncthreads` uses barrier 0).
    pub barriers: u32,
    /// Static shared memory per block; dynamic shared memory is not included.
    pub shared_bytes: u64,
    /// Constant memory per bank, summed (kernel parameters live in `cmem[0]`).
    pub constant_bytes: u64,
    /// Local-memory stack frame per thread.
    pub stack_bytes: u64,
    /// Bytes of registers spilled to local memory (stores).
    pub spill_stores_bytes: u64,
    /// Bytes reloaded from spilled registers.
    pub spill_loads_bytes: u64,
}

/// Stack and spills of a device function that was not inlined into a kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionFrame {
    /// Function name as in the PTX (usually mangled).
    pub function: String,
    /// Local-memory stack frame per thread.
    pub stack_bytes: u64,
    /// Bytes of registers spilled to local memory (stores).
    pub spill_stores_bytes: u64,
    /// Bytes reloaded from spilled registers.
    pub spill_loads_bytes: u64,
}

/// Everything found in one log.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub kernels: Vec<KernelResources>,
    pub functions: Vec<FunctionFrame>,
}

/// Reads the ptxas report out of an NVRTC log; lines it does not know are skipped.
pub(crate) fn parse(log: &str) -> Report {
    let mut parser = Parser::default();
    log.lines().filter_map(body).for_each(|line| parser.line(line));
    parser.finish()
}

#[derive(Default)]
struct Parser {
    report: Report,
    current: Option<KernelResources>,
    /// Name from the last "Function properties for X" line, waiting for its frame line.
    properties_of: Option<String>,
}

impl Parser {
    fn line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("Compiling entry function ") {
            self.start_kernel(rest);
        } else if let Some(name) = line.strip_prefix("Function properties for ") {
            self.properties_of = Some(name.trim().to_owned());
        } else if line.contains("bytes stack frame") {
            self.frame(line);
        } else if let Some(usage) = line.strip_prefix("Used ") {
            self.usage(usage);
        }
    }

    /// `'axpy' for 'sm_90'`
    fn start_kernel(&mut self, rest: &str) {
        self.flush();
        let mut quoted = rest.split('\'').skip(1).step_by(2);
        self.current = Some(KernelResources {
            kernel: quoted.next().unwrap_or_default().to_owned(),
            arch: quoted.next().unwrap_or_default().to_owned(),
            ..KernelResources::default()
        });
    }

    /// `512 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`
    fn frame(&mut self, line: &str) {
        let Some(name) = self.properties_of.take() else {
            return;
        };
        let mut frame = FunctionFrame {
            function: name,
            ..FunctionFrame::default()
        };
        for (value, unit) in items(line) {
            match unit {
                "bytes stack frame" => frame.stack_bytes = value,
                "bytes spill stores" => frame.spill_stores_bytes = value,
                "bytes spill loads" => frame.spill_loads_bytes = value,
                _ => {}
            }
        }
        match &mut self.current {
            Some(kernel) if kernel.kernel == frame.function => {
                kernel.stack_bytes = frame.stack_bytes;
                kernel.spill_stores_bytes = frame.spill_stores_bytes;
                kernel.spill_loads_bytes = frame.spill_loads_bytes;
            }
            _ => self.report.functions.push(frame),
        }
    }

    /// `10 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]`
    fn usage(&mut self, usage: &str) {
        let Some(kernel) = &mut self.current else {
            return;
        };
        for (value, unit) in items(usage) {
            match unit {
                "registers" => kernel.registers = u32::try_from(value).unwrap_or(u32::MAX),
                "barriers" => kernel.barriers = u32::try_from(value).unwrap_or(u32::MAX),
                "bytes smem" => kernel.shared_bytes = value,
                unit if unit.starts_with("bytes cmem") => kernel.constant_bytes += value,
                _ => {}
            }
        }
    }

    fn flush(&mut self) {
        self.report.kernels.extend(self.current.take());
    }

    fn finish(mut self) -> Report {
        self.flush();
        self.report
    }
}

/// Text after the `ptxas info    :` or `ptxas         .` prefix.
fn body(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("ptxas")?.trim_start();
    let rest = rest.strip_prefix("info").unwrap_or(rest).trim_start();
    let rest = rest.strip_prefix(':').or_else(|| rest.strip_prefix('.'))?;
    Some(rest.trim())
}

/// `N unit` items of a comma-separated list; a leading `used` is dropped.
fn items(list: &str) -> impl Iterator<Item = (u64, &str)> {
    list.split(',').filter_map(|item| {
        let item = item.trim();
        let item = item.strip_prefix("used ").unwrap_or(item);
        let (value, unit) = item.split_once(' ')?;
        Some((value.parse().ok()?, unit.trim()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Verbatim NVRTC 13.0.88 log for two kernels (one C++-mangled) on sm_80.
    const SM80_LOG: &str = "\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z5otherPd' for 'sm_80'
ptxas info    : Function properties for _Z5otherPd
ptxas         .     512 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 512 bytes cumulative stack size, 360 bytes cmem[0]
ptxas info    : Compile time = 5.742 ms
ptxas info    : Compiling entry function 'axpy' for 'sm_80'
ptxas info    : Function properties for axpy
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 1.909 ms
  ";

    /// Verbatim NVRTC 13.0.88 log on sm_90 with `--maxrregcount=32`: spills in a kernel and
    /// in a `__noinline__` device function.
    const SPILL_LOG: &str = "\
ptxas info    : Overriding maximum register limit 256 for 'heavy' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'dyn' for 'sm_90'
ptxas info    : Function properties for dyn
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers
ptxas info    : Compile time = 2.537 ms
ptxas info    : Compiling entry function 'heavy' for 'sm_90'
ptxas info    : Function properties for heavy
ptxas         .     1816 bytes stack frame, 2128 bytes spill stores, 2684 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 1816 bytes cumulative stack size
ptxas info    : Compile time = 68.862 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     0 bytes stack frame, 24 bytes spill stores, 32 bytes spill loads
  ";

    #[test]
    fn parses_kernels_with_smem_and_cmem() {
        let report = parse(SM80_LOG);
        assert!(report.functions.is_empty());
        assert_eq!(
            report.kernels,
            vec![
                KernelResources {
                    kernel: "_Z5otherPd".into(),
                    arch: "sm_80".into(),
                    registers: 40,
                    constant_bytes: 360,
                    stack_bytes: 512,
                    ..KernelResources::default()
                },
                KernelResources {
                    kernel: "axpy".into(),
                    arch: "sm_80".into(),
                    registers: 10,
                    barriers: 1,
                    shared_bytes: 1024,
                    constant_bytes: 380,
                    ..KernelResources::default()
                },
            ]
        );
    }

    #[test]
    fn parses_spills_of_kernels_and_device_functions() {
        let report = parse(SPILL_LOG);
        let names: Vec<_> = report.kernels.iter().map(|k| k.kernel.as_str()).collect();
        assert_eq!(names, ["dyn", "heavy"]);
        let heavy = &report.kernels[1];
        assert_eq!((heavy.registers, heavy.stack_bytes), (32, 1816), "{heavy:?}");
        assert_eq!((heavy.spill_stores_bytes, heavy.spill_loads_bytes), (2128, 2684));
        assert_eq!(
            report.functions,
            vec![FunctionFrame {
                function: "_Z6helperPfi".into(),
                stack_bytes: 0,
                spill_stores_bytes: 24,
                spill_loads_bytes: 32,
            }]
        );
    }

    #[test]
    fn ignores_compiler_errors_and_garbage() {
        let log = "fuse.cu(1): error: expected a \";\"\nptxas info    : Used x registers\n\
                   ptxas         .     7 bytes stack frame\n";
        assert_eq!(parse(log), Report::default());
    }
}
