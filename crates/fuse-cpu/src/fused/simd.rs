//! The instruction set the CPU kernels run in: the widest this CPU has, or a narrower one that
//! `FUSE_SIMD` asks for — to see how fuse runs on a CPU without AVX-512 on one that has it, or
//! to rule out a vector unit. Every kernel dispatches through [`arch`], which reads the
//! setting once a process (the streaming stores follow: they are as wide as the vectors of
//! the dispatch, see `loops::stream_vector`).

use std::env::VarError;
use std::fmt;
use std::sync::OnceLock;

use pulp::Arch;

use super::CpuError;

/// The environment variable that narrows the kernels' instruction set.
pub const SIMD_VAR: &str = "FUSE_SIMD";

/// An instruction set the kernels are built for, as `FUSE_SIMD` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimdLevel {
    /// Plain code, one element at a time (what the compiler vectorizes for the build's target).
    Scalar,
    /// AVX2 with FMA (pulp's x86-64 V3): 256-bit vectors.
    Avx2,
    /// AVX-512 F/BW/CD/DQ/VL (pulp's x86-64 V4): 512-bit vectors.
    Avx512,
    /// NEON (aarch64): 128-bit vectors.
    Neon,
}

impl SimdLevel {
    /// Every level, narrowest first on each architecture.
    const ALL: [SimdLevel; 4] = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512, SimdLevel::Neon];

    /// The name `FUSE_SIMD` takes.
    pub fn name(self) -> &'static str {
        match self {
            SimdLevel::Scalar => "scalar",
            SimdLevel::Avx2 => "avx2",
            SimdLevel::Avx512 => "avx512",
            SimdLevel::Neon => "neon",
        }
    }

    /// pulp's dispatch to this level, where this CPU has it.
    pub(crate) fn arch(self) -> Option<Arch> {
        match self {
            SimdLevel::Scalar => Some(Arch::Scalar),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            SimdLevel::Avx2 => pulp::x86::V3::try_new().map(Arch::V3),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            SimdLevel::Avx512 => pulp::x86::V4::try_new().map(Arch::V4),
            #[cfg(target_arch = "aarch64")]
            SimdLevel::Neon => pulp::aarch64::Neon::try_new().map(Arch::Neon),
            _ => None,
        }
    }

    /// The levels this CPU has, narrowest first.
    pub fn available() -> Vec<SimdLevel> {
        Self::ALL.into_iter().filter(|l| l.arch().is_some()).collect()
    }

    /// The widest level this CPU has.
    pub fn widest() -> SimdLevel {
        *Self::available().last().expect("scalar code runs anywhere")
    }

    /// The level the kernels of this process run in: [`SIMD_VAR`]'s, else the widest (a bad
    /// setting is an error every time it is asked for).
    pub fn shared() -> Result<SimdLevel, CpuError> {
        static SHARED: OnceLock<Result<SimdLevel, CpuError>> = OnceLock::new();
        SHARED.get_or_init(from_env).clone()
    }

    /// The level in words, with the widest where it is narrower: "avx512 (the widest this CPU
    /// has)", "avx2 (FUSE_SIMD; this CPU has avx512)".
    pub fn describe(self) -> String {
        match Self::widest() {
            widest if widest == self => format!("{self} (the widest this CPU has)"),
            widest => format!("{self} ({SIMD_VAR}; this CPU has {widest})"),
        }
    }

    /// The level `value` names, where it is one of `available` (the levels of a CPU).
    fn chosen(value: &str, available: &[SimdLevel]) -> Result<SimdLevel, String> {
        let names = || available.iter().rev().map(|l| l.name()).collect::<Vec<_>>().join(", ");
        let wanted = value.trim().to_ascii_lowercase();
        match Self::ALL.into_iter().find(|l| l.name() == wanted) {
            Some(level) if available.contains(&level) => Ok(level),
            Some(level) => Err(format!(
                "{SIMD_VAR}={value}: this CPU has no {level}; it has {} (set one of them, or unset {SIMD_VAR} for the widest)",
                names()
            )),
            None => Err(format!(
                "{SIMD_VAR}={value:?} is not an instruction set: set it to one this CPU has ({}), or unset it for the widest",
                names()
            )),
        }
    }
}

impl fmt::Display for SimdLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The level [`SIMD_VAR`] asks for (unset or empty: the widest this CPU has).
fn from_env() -> Result<SimdLevel, CpuError> {
    let value = match std::env::var(SIMD_VAR) {
        Err(VarError::NotPresent) => return Ok(SimdLevel::widest()),
        Err(VarError::NotUnicode(value)) => value.to_string_lossy().into_owned(),
        Ok(value) if value.trim().is_empty() => return Ok(SimdLevel::widest()),
        Ok(value) => value,
    };
    SimdLevel::chosen(&value, &SimdLevel::available()).map_err(CpuError::Setting)
}

/// The dispatch every kernel goes through: [`SimdLevel::shared`]'s level, read once. A plan
/// checks the setting when it is made ([`super::FusedPlan::new`]), so a bad one never gets
/// here; were it to, the kernels run in the widest level rather than not at all.
pub(crate) fn arch() -> Arch {
    static ARCH: OnceLock<Arch> = OnceLock::new();
    *ARCH.get_or_init(|| {
        let level = SimdLevel::shared().unwrap_or_else(|_| SimdLevel::widest());
        level.arch().expect("a level this CPU has")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_above_the_cpu_or_unknown_is_refused_naming_what_it_has() {
        use SimdLevel::*;
        let avx2_cpu = [Scalar, Avx2];
        assert_eq!(SimdLevel::chosen("avx2", &avx2_cpu), Ok(Avx2));
        assert_eq!(SimdLevel::chosen(" Scalar ", &avx2_cpu), Ok(Scalar));
        let above = SimdLevel::chosen("avx512", &avx2_cpu).unwrap_err();
        assert!(
            above.contains("FUSE_SIMD=avx512") && above.contains("no avx512"),
            "{above}"
        );
        assert!(above.contains("it has avx2, scalar"), "{above}");
        let neon = SimdLevel::chosen("neon", &[Scalar, Avx2, Avx512]).unwrap_err();
        assert!(
            neon.contains("no neon") && neon.contains("avx512, avx2, scalar"),
            "{neon}"
        );
        let unknown = SimdLevel::chosen("sse9", &avx2_cpu).unwrap_err();
        assert!(unknown.contains("\"sse9\" is not an instruction set"), "{unknown}");
    }

    #[test]
    fn every_level_this_cpu_has_dispatches_and_scalar_always_does() {
        let levels = SimdLevel::available();
        assert_eq!(levels[0], SimdLevel::Scalar);
        assert!(levels.iter().all(|l| l.arch().is_some()));
        assert_eq!(SimdLevel::widest(), *levels.last().unwrap());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            levels.contains(&SimdLevel::Avx512),
            std::arch::is_x86_feature_detected!("avx512f"),
            "{levels:?}"
        );
    }
}
