// routines.cuh — the load, store and partial-reduction routines that generated kernels glue
// together (paper §4.3). Every elementary function's element-level compute routine is
// generated from its formula in library/<name>.yaml; the data movement lives here, written once
// and generic over the element type. Generated sources paste this file after cuda_prelude.h,
// so NVRTC needs no include path.
//
// Thread-to-data mapping, shared by every routine below so that elements passed between fused
// routines stay in registers (paper §3.2.3):
// - vectors (BLAS-1): element i ↔ thread (block * serial + iteration) * blockDim.x + threadIdx.x;
// - matrices (BLAS-2): 32×32 tiles, a block of 32×8 threads, thread (tx, ty) holds rows
//   ty, ty+8, ty+16, ty+24 of column tx; serial iterations walk down a column of tiles.

#define FUSE_TILE 32
#define FUSE_TILE_ROWS 8

template <typename T> __device__ __forceinline__ T fuse_abs(T x) { return x < T(0) ? -x : x; }
__device__ __forceinline__ float fuse_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double fuse_sqrt(double x) { return sqrt(x); }

// Load routine: one element, or zero outside the array (tails of sizes not a multiple of 32).
template <typename T>
__device__ __forceinline__ T fuse_load(const T* __restrict__ p, long long index, bool inside) {
    return inside ? p[index] : T(0);
}

// Store routine: one element, skipped outside the array.
template <typename T>
__device__ __forceinline__ void fuse_store(T* __restrict__ p, long long index, bool inside, T value) {
    if (inside) p[index] = value;
}

// Sum of `value` over the 32 lanes of a warp, left in every lane.
template <typename T> __device__ __forceinline__ T fuse_warp_sum(T value) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// Sum of `value` over the whole block, valid in thread 0. All threads of the block must call it.
template <typename T> __device__ __forceinline__ T fuse_block_sum(T value) {
    __shared__ T warp_sums[32];
    const int thread = threadIdx.x + threadIdx.y * blockDim.x;
    const int warps = (blockDim.x * blockDim.y + 31) / 32;
    value = fuse_warp_sum(value);
    if (thread % 32 == 0) warp_sums[thread / 32] = value;
    __syncthreads();
    if (thread < 32) value = fuse_warp_sum(thread < warps ? warp_sums[thread] : T(0));
    __syncthreads();  // warp_sums may be reused by the next call
    return value;
}

// Partial-reduction store of a whole block: the block's total is added to *out with one
// atomic. All threads of the block must call it.
template <typename T> __device__ __forceinline__ void fuse_block_sum_atomic(T value, T* out) {
    value = fuse_block_sum(value);
    if (threadIdx.x + threadIdx.y * blockDim.x == 0) atomicAdd(out, value);
}

// Sum of thread (tx, ty)'s `value` over the block's 8 rows of threads, for column tx; valid in
// the threads with ty == 0. All threads of the block must call it.
template <typename T> __device__ __forceinline__ T fuse_column_sum(T value) {
    __shared__ T rows[FUSE_TILE_ROWS][FUSE_TILE + 1];  // +1: no bank conflicts down a column
    rows[threadIdx.y][threadIdx.x] = value;
    __syncthreads();
    if (threadIdx.y == 0) {
        value = T(0);
#pragma unroll
        for (int r = 0; r < FUSE_TILE_ROWS; ++r) value += rows[r][threadIdx.x];
    }
    __syncthreads();  // rows may be reused by the next call
    return value;
}

// Partial-reduction store along tile columns: the column's total is added to out[column] with
// one atomic. All threads of the block must call it.
template <typename T>
__device__ __forceinline__ void fuse_column_sum_atomic(T value, T* out, long long column, bool inside) {
    value = fuse_column_sum(value);
    if (threadIdx.y == 0 && inside) atomicAdd(out + column, value);
}

// Partial-reduction store along tile rows: the 32 lanes of a warp hold one row's partial sums;
// lane 0 adds their total to out[row] with one atomic. All lanes of the warp must call it.
template <typename T>
__device__ __forceinline__ void fuse_row_sum_atomic(T value, T* out, long long row, bool inside) {
    value = fuse_warp_sum(value);
    if (threadIdx.x == 0 && inside) atomicAdd(out + row, value);
}
