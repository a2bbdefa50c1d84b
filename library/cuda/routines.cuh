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

// x, kept in a register where it is made: ptxas otherwise rebuilds it where it is used — a
// row's address from the kernel parameter for each (predicated) load (a constant load and two
// address instructions where one register with an immediate offset per load does), a tile's
// steady bits from their comparisons in every row.
template <typename T> __device__ __forceinline__ const T* fuse_in_register(const T* p) {
#ifdef __CUDA_ARCH__
    asm("mov.b64 %0, %0;" : "+l"(p));
#endif
    return p;
}
__device__ __forceinline__ unsigned fuse_in_register(unsigned x) {
#ifdef __CUDA_ARCH__
    asm("mov.b32 %0, %0;" : "+r"(x));
#endif
    return x;
}

// Whole-row blocks on a band of diagonals (column − row; a triangle bounds one side). A block
// walks its rows in tiles of a few rows. In one tile each of a thread's G vector groups (thread
// rt of R holds vectors g·R + rt of a row) is either steady — inside every call's band in every
// row of the tile: loaded and summed as on a full matrix, under bit g of `steady` — or never read
// as a vector. The tile's ragged columns, where the band's edges cross its rows (at most
// rows + V − 1 of them beside each edge, plus how far the calls' bands differ there), are
// spread over the threads one column per slot — slot s of thread rt takes the (rt + s·R)-th —
// and read and summed element by element, each tested by its diagonal. The band comes twice:
// the union of the calls' bands (what may be read) and their intersection (what every call
// sums); an unbounded side is ±kFuseUnbounded.
constexpr long long kFuseUnbounded = 1LL << 40;

// The tile of rows first..last in rows of n columns (fewer than 2³¹): where its steady vectors
// begin and end, and its ragged columns, [lower, lower_end) beside the band's first diagonal
// and [upper, upper_end) beside its last.
template <int V> struct fuse_band_edges {
    long long steady_lo, steady_hi;
    int lower, lower_end, upper, upper_end;
    int dead;  // a diagonal outside every band

    __device__ __forceinline__ fuse_band_edges(long long first, long long last, long long n, long long from,
                                               long long to, long long inner_from, long long inner_to) {
        const auto clamp = [n](long long c) { return (int)(c < 0 ? 0 : c > n ? n : c); };
        const auto max = [](int a, int b) { return a > b ? a : b; };
        // From the first vector at or past the last row's first inner diagonal to the last one
        // ending at or before the first row's last inner diagonal.
        steady_lo = (last + inner_from + V - 1) & -(long long)V;
        steady_hi = (first + inner_to + 1) & -(long long)V;
        lower = clamp(first + from);
        lower_end = max(lower, clamp(steady_lo));
        upper = max(lower_end, clamp(steady_hi));
        upper_end = max(upper, clamp(last + to + 1));
        dead = from > -kFuseUnbounded ? -(1 << 30) : 1 << 30;
    }

    // The ragged columns, one after the other: how many, the k-th, and which one col is (or -1).
    __device__ __forceinline__ int columns() const { return lower_end - lower + upper_end - upper; }
    __device__ __forceinline__ int column(int k) const {
        return k < lower_end - lower ? lower + k : upper + k - (lower_end - lower);
    }
    __device__ __forceinline__ int slot(int col) const {
        if ((unsigned)(col - lower) < (unsigned)(lower_end - lower)) return col - lower;
        if ((unsigned)(col - upper) < (unsigned)(upper_end - upper)) return lower_end - lower + col - upper;
        return -1;
    }
};

template <int V, int R, int G, int S> struct fuse_band_tile {
    unsigned steady;
    // Slot s's column, from the thread's first (col0 + rt·V): where its element lies from the
    // thread's vectors.
    int offset[S];
    // Slot s's column − the tile's first row; an empty slot's lies outside every band.
    int diagonal[S];

    // The tile from row `first` with edges `edges`, its rows n columns from col0 (a multiple of V).
    __device__ __forceinline__ fuse_band_tile(const fuse_band_edges<V>& edges, long long first, long long col0,
                                              long long n, int rt) {
        steady = 0;
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const long long col = col0 + (long long)(g * R + rt) * V;
            if (col >= edges.steady_lo && col + V <= edges.steady_hi && col < n) steady |= 1u << g;
        }
        steady = fuse_in_register(steady);
#pragma unroll
        for (int s = 0; s < S; ++s) {
            const int k = rt + s * R;
            const bool used = k < edges.columns();
            offset[s] = used ? edges.column(k) - (int)col0 - rt * V : 0;
            diagonal[s] = used ? (int)(edges.column(k) - first) : edges.dead;
        }
    }
};

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
