// Test kernels. The same text is run by the emulator (tests/emulate.rs) and compiled by NVRTC
// for sm_90 (tests/nvrtc.rs), behind CUDA_PRELUDE.

extern "C" __global__ void vadd(const float* __restrict__ x, const float* __restrict__ y,
                                float* __restrict__ z, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = x[i] + y[i];
}
FUSE_EMU_EXPORT(vadd)

// Tree reduction of one block's values in shared memory; every thread must call it.
template <class T>
__device__ __forceinline__ T block_reduce(T* partial, T value) {
    partial[threadIdx.x] = value;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    return partial[0];
}

// Sum of x into *sum (zeroed by the caller); blocks of 256 threads.
extern "C" __global__ void sum_f32(const float* x, float* sum, int n) {
    __shared__ float partial[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float total = block_reduce(partial, i < n ? x[i] : 0.0f);
    if (threadIdx.x == 0) atomicAdd(sum, total);
}
FUSE_EMU_EXPORT(sum_f32)

extern "C" __global__ void sum_f64(const double* x, double* sum, int n) {
    __shared__ double partial[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    double total = block_reduce(partial, i < n ? x[i] : 0.0);
    if (threadIdx.x == 0) atomicAdd(sum, total);
}
FUSE_EMU_EXPORT(sum_f64)

// Dot product with a warp-shuffle reduction; each warp adds its part to *dot.
extern "C" __global__ void dot_warp(const float* x, const float* y, float* dot, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] * y[i] : 0.0f;
    for (int offset = warpSize / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    if (threadIdx.x % warpSize == 0) atomicAdd(dot, v);
}
FUSE_EMU_EXPORT(dot_warp)

// y = A x (A m×n, row-major; y zeroed by the caller). Blocks of 32×8 threads: threadIdx.y
// picks one of 8 rows, blockIdx.y the row group, blockIdx.x a chunk of 256 columns, whose x
// values are staged through a shared tile of 32. Partial row sums meet in shared memory.
extern "C" __global__ void matvec(const float* A, const float* x, float* y, int m, int n) {
    __shared__ float tile[32];
    __shared__ float partial[8][33];
    int row = blockIdx.y * 8 + threadIdx.y;
    int chunk = blockIdx.x * 256;
    float acc = 0.0f;
    for (int t = 0; t < 256; t += 32) {
        int col = chunk + t + threadIdx.x;
        if (threadIdx.y == 0) tile[threadIdx.x] = col < n ? x[col] : 0.0f;
        __syncthreads();
        if (row < m && col < n) acc += A[(size_t)row * n + col] * tile[threadIdx.x];
        __syncthreads();
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x == 0 && row < m) {
        float s = 0.0f;
        for (int k = 0; k < 32; ++k) s += partial[threadIdx.y][k];
        atomicAdd(&y[row], s);
    }
}
FUSE_EMU_EXPORT(matvec)

// Reverses each block's chunk of x through dynamic shared memory (blockDim.x floats).
extern "C" __global__ void reverse_chunks(const float* x, float* y, int n) {
    FUSE_DYNAMIC_SHARED(float, buffer);
    int base = blockIdx.x * blockDim.x;
    int i = base + threadIdx.x;
    buffer[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    int from = base + blockDim.x - 1 - threadIdx.x;  // reversed within the full chunk
    if (i < n) y[i] = from < n ? buffer[blockDim.x - 1 - threadIdx.x] : -1.0f;
}
FUSE_EMU_EXPORT(reverse_chunks)

// Copies a shared array in which only element blockIdx.x was written.
extern "C" __global__ void read_unwritten_shared(float* out) {
    __shared__ float s[32];
    if (threadIdx.x == blockIdx.x) s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = s[threadIdx.x];
}
FUSE_EMU_EXPORT(read_unwritten_shared)

// Barrier first, then threads past the end return early: valid.
extern "C" __global__ void scale_after_barrier(float* x, float a, int n) {
    __shared__ float s[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    s[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i >= n) return;
    x[i] = a * s[threadIdx.x];
}
FUSE_EMU_EXPORT(scale_after_barrier)

// Threads past the end return before a barrier the others reach: invalid.
extern "C" __global__ void return_before_barrier(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __syncthreads();
    x[i] = 1.0f;
}
FUSE_EMU_EXPORT(return_before_barrier)

// Odd and even threads wait at different barriers: invalid.
extern "C" __global__ void split_barriers(float* x) {
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}
FUSE_EMU_EXPORT(split_barriers)

// Half a warp shuffles while the other half waits at a block barrier: a deadlock.
extern "C" __global__ void shuffle_deadlock(float* x) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 16) {
        v = __shfl_xor_sync(0xffffffffu, v, 1);
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = v;
}
FUSE_EMU_EXPORT(shuffle_deadlock)

// Writes one element past the end (no tail guard).
extern "C" __global__ void write_past_end(float* x) {
    x[blockIdx.x * blockDim.x + threadIdx.x] = 2.0f;
}
FUSE_EMU_EXPORT(write_past_end)

// Shuffle variants and votes within half-warps, and integer/double shuffles and atomics.
extern "C" __global__ void warp_ops(const int* in, int* out, double* dout, unsigned* votes) {
    int lane = threadIdx.x % warpSize;
    int v = in[threadIdx.x];
    out[threadIdx.x * 4 + 0] = __shfl_sync(0xffffffffu, v, 3, 16);
    out[threadIdx.x * 4 + 1] = __shfl_up_sync(0xffffffffu, v, 2, 16);
    out[threadIdx.x * 4 + 2] = __shfl_xor_sync(0xffffffffu, v, 5);
    out[threadIdx.x * 4 + 3] = __shfl_down_sync(0xffffffffu, v, 7, 8);
    dout[threadIdx.x] = __shfl_sync(0xffffffffu, (double)v * 0.5, 31 - lane);
    unsigned ballot = __ballot_sync(0xffffffffu, v % 3 == 0);
    int all = __all_sync(0xffffffffu, v >= 0);
    int any = __any_sync(0xffffffffu, v > 1000);
    if (lane == 0) {
        votes[0] = ballot;
        votes[1] = all;
        votes[2] = any;
        atomicMax(&votes[3], 7u);
        atomicAdd(&votes[4], 1u);
    }
    __syncwarp();
}
FUSE_EMU_EXPORT(warp_ops)
