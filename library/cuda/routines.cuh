// routines.cuh — the load, store and partial-reduction routines that generated kernels glue
// together (paper §4.3). Every elementary function's element-level compute routine is
// generated from its formula in library/<name>.yaml; the data movement lives here, written once
// and generic over the element type. Generated sources paste this file after cuda_prelude.h,
// so NVRTC needs no include path.
//
// Thread-to-data mapping, shared by every routine below so that elements passed between fused
// routines stay in registers (paper §3.2.3):
// - vectors (BLAS-1): element i ↔ thread (block * serial + iteration) * blockDim.x + threadIdx.x;
// - matrices (BLAS-2): a block covers a strip of 32·w columns (w tiles across); each warp takes
//   whole rows of the strip in turn, and lane l holds columns (g·32 + l)·V + e of each row, for
//   groups g < w/V and e < V: V consecutive elements, one 16-byte load (f32: V = 4, f64: V = 2;
//   V = 1 for the paper's one-tile strips), and w/V loads in flight per row.

__device__ __forceinline__ float fuse_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double fuse_abs(double x) { return fabs(x); }
// max(a, b) and min(a, b) of the formula language, exactly as every backend computes them: `a`
// where it wins or `b` is NaN, else `b` (a NaN argument gives the other; of +0 and -0, `b`).
template <typename T> __device__ __forceinline__ T fuse_max(T a, T b) { return (a > b || b != b) ? a : b; }
template <typename T> __device__ __forceinline__ T fuse_min(T a, T b) { return (a < b || b != b) ? a : b; }
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

// Euclidean norm as BLAS computes it (Blue's algorithm, LAPACK's dnrm2): squares of
// magnitudes below `small` are accumulated scaled up by `up`, above `big` scaled down by `down`,
// the rest as they are — three additive sums, so that no square overflows or underflows where
// the norm itself is representable. The powers of two are LAPACK's for each precision.
template <typename T> struct fuse_norm_scale;
template <> struct fuse_norm_scale<float> {
    static constexpr float small = 0x1p-63f, big = 0x1p52f, up = 0x1p75f, down = 0x1p-76f;
};
template <> struct fuse_norm_scale<double> {
    static constexpr double small = 0x1p-511, big = 0x1p486, up = 0x1p537, down = 0x1p-538;
};

// The three sums of a norm; a partial norm is added to memory as three numbers in this order.
template <typename T> struct fuse_norm {
    T small, medium, big;
};

// Compute routine of a norm: one term added. A NaN goes to the medium sum, so it propagates.
// The magnitude is chosen before it is scaled, so that no product is needlessly subnormal.
template <typename T> __device__ __forceinline__ void fuse_norm_add(fuse_norm<T>& n, T x) {
    typedef fuse_norm_scale<T> S;
    const T m = fuse_abs(x);
    const bool small = m < S::small, big = m > S::big;
    const T up = (small ? m : T(0)) * S::up, medium = (small || big) ? T(0) : m;
    const T down = (big ? m : T(0)) * S::down;
    n.small += up * up;
    n.medium += medium * medium;
    n.big += down * down;
}

// The norm of the three sums: the big sum where there is one (the small one is then below its
// rounding), else the small and medium ones combined without squaring either root again.
template <typename T> __device__ __forceinline__ T fuse_norm_value(fuse_norm<T> n) {
    typedef fuse_norm_scale<T> S;
    if (n.big > T(0)) {
        if (n.medium != T(0)) n.big += (n.medium * S::down) * S::down;  // positive or NaN
        return fuse_sqrt(n.big) / S::down;
    }
    if (n.small > T(0) && n.medium != T(0)) {
        const T medium = fuse_sqrt(n.medium), small = fuse_sqrt(n.small) / S::up;
        const T high = small > medium ? small : medium, low = small > medium ? medium : small;
        return high * fuse_sqrt(T(1) + (low / high) * (low / high));
    }
    if (n.small > T(0)) return fuse_sqrt(n.small) / S::up;
    return fuse_sqrt(n.medium);
}

// The three sums of the whole block, valid in thread 0. All threads of the block must call it.
template <typename T> __device__ __forceinline__ fuse_norm<T> fuse_block_norm(fuse_norm<T> n) {
    return fuse_norm<T>{fuse_block_sum(n.small), fuse_block_sum(n.medium), fuse_block_sum(n.big)};
}

// Partial-reduction store of a norm: the block's three sums added to sums[0..3] with three
// atomics. All threads of the block must call it.
template <typename T> __device__ __forceinline__ void fuse_block_norm_atomic(fuse_norm<T> n, T* sums) {
    n = fuse_block_norm(n);
    if (threadIdx.x + threadIdx.y * blockDim.x == 0) {
        atomicAdd(sums, n.small);
        atomicAdd(sums + 1, n.medium);
        atomicAdd(sums + 2, n.big);
    }
}

// V consecutive elements of a matrix row or a vector, held by one thread.
template <typename T, int V> struct fuse_vec {
    T e[V];
};

// Whether V elements of T at p can move as one vector access (16 bytes for float4/double2).
template <typename T, int V> __device__ __forceinline__ bool fuse_vector_ok(const T* p) {
    return V > 1 && V * sizeof(T) <= 16 && reinterpret_cast<unsigned long long>(p) % (V * sizeof(T)) == 0;
}

// Whole-row blocks on a triangle. Thread rt of R holds the V-element vectors g·R + rt of a row,
// element e of vector g its element g·V + e: how many of them lie before column col (≥ 0).
template <int V, int R> __device__ __forceinline__ int fuse_elements_before(int col, int rt) {
    const int d = col / V - rt;  // vectors of the row before col's, past the thread's first
    if (d < 0) return 0;
    return (d + R - 1) / R * V + (d % R == 0 ? col % V : 0);
}

// The thread's elements of a row that lie in columns [lo, hi) (clamped to the row's n), one
// bit each: computed once per row, so that the hot loop loads only the vectors with a bit set
// and tests one bit per element (kGroups·V ≤ 32).
template <int V, int R>
__device__ __forceinline__ unsigned fuse_row_mask(long long lo, long long hi, long long n, int rt) {
    const auto below = [rt, n](long long col) {
        const int k = fuse_elements_before<V, R>((int)(col < 0 ? 0 : col > n ? n : col), rt);
        return k >= 32 ? ~0u : (1u << k) - 1;
    };
    return below(hi) & ~below(lo);
}

// Whether p is 16-byte aligned: with it, rows of a multiple of V elements start aligned.
template <typename T> __device__ __forceinline__ bool fuse_aligned(const T* p) {
    return reinterpret_cast<unsigned long long>(p) % 16 == 0;
}

// Load routine of a strip: elements col .. col+V-1 of a row (or vector) of n elements, zero
// past the end. One 16-byte read-only load where the address is aligned and the run is inside
// the row; element by element otherwise (odd row lengths, the tail), so every size is correct.
// Unchecked, the caller has made sure of both: a plain vector load, no branch.
template <typename T, int V, bool Checked = true>
__device__ __forceinline__ fuse_vec<T, V> fuse_load_vec(const T* __restrict__ row, long long col, long long n) {
    fuse_vec<T, V> out;
    const T* p = row + col;
    if (!Checked || (col + V <= n && fuse_vector_ok<T, V>(p))) {
        if constexpr (V == 4 && sizeof(T) == 4) {
            const float4 q = __ldg(reinterpret_cast<const float4*>(p));
            out.e[0] = q.x, out.e[1] = q.y, out.e[2] = q.z, out.e[3] = q.w;
            return out;
        } else if constexpr (V == 2 && sizeof(T) == 8) {
            const double2 q = __ldg(reinterpret_cast<const double2*>(p));
            out.e[0] = q.x, out.e[1] = q.y;
            return out;
        }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) out.e[e] = !Checked || col + e < n ? p[e] : T(0);
    return out;
}

// Store routine of a strip: the same elements, skipped past the end of the row.
template <typename T, int V, bool Checked = true>
__device__ __forceinline__ void fuse_store_vec(T* __restrict__ row, long long col, long long n, const fuse_vec<T, V>& v) {
    T* p = row + col;
    if (!Checked || (col + V <= n && fuse_vector_ok<T, V>(p))) {
        // The store intrinsic, not an assignment: in a long unrolled body NVVM split assigned
        // float4 stores into four scalar ones.
        if constexpr (V == 4 && sizeof(T) == 4) {
            __stwb(reinterpret_cast<float4*>(p), make_float4(v.e[0], v.e[1], v.e[2], v.e[3]));
            return;
        } else if constexpr (V == 2 && sizeof(T) == 8) {
            __stwb(reinterpret_cast<double2*>(p), make_double2(v.e[0], v.e[1]));
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < V; ++e)
        if (!Checked || col + e < n) p[e] = v.e[e];
}

// Sums of K values over a whole block of Warps warps (blockDim.y == 1), left in every thread:
// all of a row's block sums through one exchange and one barrier. The exchange has two halves
// that calls take in turn (`turn`, counted by the caller from 0): a warp that writes the next
// call's sums has passed its barrier, which every warp reaches only after reading this call's,
// so no second barrier is needed. All threads of the block must call it.
template <int Warps, typename T, int K>
__device__ __forceinline__ fuse_vec<T, K> fuse_block_sums(fuse_vec<T, K> v, int& turn) {
    __shared__ T exchange[2][K][Warps];
    const int half = turn++ & 1;
#pragma unroll
    for (int k = 0; k < K; ++k) v.e[k] = fuse_warp_sum(v.e[k]);
    if (threadIdx.x % 32 == 0) {
#pragma unroll
        for (int k = 0; k < K; ++k) exchange[half][k][threadIdx.x / 32] = v.e[k];
    }
    __syncthreads();
    fuse_vec<T, K> total = {};
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int w = 0; w < Warps; ++w) total.e[k] += exchange[half][k][w];
    }
    return total;
}

// Atomic-add routine of a strip: elements col .. col+V-1 of `row` (n elements) each get the
// matching element of `v` added. On sm_90 four floats go in one 16-byte atomic where aligned.
template <typename T, int V>
__device__ __forceinline__ void fuse_atomic_add_vec(T* __restrict__ row, long long col, long long n, const fuse_vec<T, V>& v) {
    T* p = row + col;
#if defined(FUSE_EMULATION) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
    if constexpr (V == 4 && sizeof(T) == 4) {
        if (col + V <= n && fuse_vector_ok<T, V>(p)) {
            atomicAdd(reinterpret_cast<float4*>(p), make_float4(v.e[0], v.e[1], v.e[2], v.e[3]));
            return;
        }
    }
#endif
#pragma unroll
    for (int e = 0; e < V; ++e)
        if (col + e < n) atomicAdd(p + e, v.e[e]);
}
