//! Small hand-written kernels the runtime itself needs: flushing the L2 cache between timed
//! runs, an empty kernel for the launch overhead, and multiply-add chains for the arithmetic
//! peak. Compiled with NVRTC through the module cache like generated code.

use crate::cache::ModuleCache;
use crate::device::Device;
use crate::error::CudaError;
use crate::module::CudaModuleSet;

/// Reads a buffer end to end so that the L2 cache holds only clean lines of it afterwards
/// (a memset would leave dirty lines that the next timed kernel pays to write back).
pub const FLUSH: &str = "fuse_flush_l2";
/// Does nothing: its back-to-back launches measure the launch overhead.
pub const EMPTY: &str = "fuse_empty";
/// Independent multiply-add chains in f32.
pub const FMA_F32: &str = "fuse_fma_f32";
/// Independent multiply-add chains in f64.
pub const FMA_F64: &str = "fuse_fma_f64";

/// Multiply-add chains per thread in the peak kernels: enough independent work to hide the
/// pipeline latency.
pub const FMA_CHAINS: u32 = 8;

/// The CUDA source of the runtime kernels.
pub const SOURCE: &str = r#"
// fuse runtime kernels
extern "C" __global__ void fuse_flush_l2(const uint4* __restrict__ data, long long n, unsigned int* sink) {
    unsigned int acc = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const uint4 v = data[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    // Never true for the zeroed buffer, but the compiler cannot know: the loads stay.
    if (acc == 0x9e3779b9u) *sink = acc;
}

extern "C" __global__ void fuse_empty() {}

template <typename T>
__device__ void fma_chains(T* out, int iterations) {
    T a[8];
    for (int k = 0; k < 8; ++k) a[k] = T(threadIdx.x + k);
    const T b = T(0.999999), c = T(1e-7);
    for (int i = 0; i < iterations; ++i) {
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] = a[k] * b + c;
    }
    T s = 0;
    for (int k = 0; k < 8; ++k) s += a[k];
    if (s == T(-1.2345)) out[0] = s;  // keeps the chains alive
}

extern "C" __global__ void fuse_fma_f32(float* out, int iterations) { fma_chains(out, iterations); }
extern "C" __global__ void fuse_fma_f64(double* out, int iterations) { fma_chains(out, iterations); }
"#;

/// The runtime kernels, loaded on `device`.
pub fn load(device: &Device, cache: &ModuleCache) -> Result<CudaModuleSet, CudaError> {
    CudaModuleSet::load(SOURCE, &[FLUSH, EMPTY, FMA_F32, FMA_F64], device, cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_named_is_in_the_source() {
        for name in [FLUSH, EMPTY, FMA_F32, FMA_F64] {
            assert!(SOURCE.contains(&format!("void {name}(")), "{name}");
        }
        assert!(SOURCE.contains(&format!("T a[{FMA_CHAINS}]")));
    }
}
