// read-vs-copy.c — the ceiling of a kernel that only reads, against the copy `fuse bench` uses.
//
// Times, alternately, a parallel read-only AVX2 stream and a parallel copy with streaming
// stores (what the copy probe of `fuse bench --backend cpu` does), over 256 MiB arrays, with
// 4 KiB pages and with transparent huge pages (madvise), and prints the medians of 21 runs.
// GB/s count bytes read + written, as `fuse bench` does.
//
//   gcc -O3 -march=native -fopenmp benches/probes/read-vs-copy.c -o /tmp/read-vs-copy
//   OMP_NUM_THREADS=2 /tmp/read-vs-copy
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define RUNS 21

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static float *alloc(size_t bytes, int huge) {
    float *p = aligned_alloc(2 << 20, bytes);
    if (huge) madvise(p, bytes, MADV_HUGEPAGE);
    memset(p, 1, bytes);
    return p;
}

// Sums the array, so the loads cannot be dropped.
static double read_only(const float *a, size_t n) {
    double s = 0;
#pragma omp parallel for reduction(+ : s)
    for (size_t b = 0; b < n; b += 1 << 16) {
        __m256 x0 = _mm256_setzero_ps(), x1 = x0, x2 = x0, x3 = x0;
        for (size_t i = b; i < b + (1 << 16); i += 32) {
            x0 = _mm256_add_ps(x0, _mm256_load_ps(a + i));
            x1 = _mm256_add_ps(x1, _mm256_load_ps(a + i + 8));
            x2 = _mm256_add_ps(x2, _mm256_load_ps(a + i + 16));
            x3 = _mm256_add_ps(x3, _mm256_load_ps(a + i + 24));
        }
        float t[8];
        _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)));
        for (int k = 0; k < 8; k++) s += t[k];
    }
    return s;
}

static void streaming_copy(float *d, const float *a, size_t n) {
#pragma omp parallel for
    for (size_t i = 0; i < n; i += 8) _mm256_stream_ps(d + i, _mm256_load_ps(a + i));
    _mm_sfence();
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    size_t bytes = 256 << 20, n = bytes / 4;
    float *small[2] = {alloc(bytes, 0), alloc(bytes, 0)}, *huge[2] = {alloc(bytes, 1), alloc(bytes, 1)};
    double t[4][RUNS], sink = 0;
    for (int r = 0; r < RUNS; r++) {
        double start = now();
        sink += read_only(small[0], n);
        t[0][r] = now() - start;
        start = now();
        sink += read_only(huge[0], n);
        t[1][r] = now() - start;
        start = now();
        streaming_copy(small[1], small[0], n);
        t[2][r] = (now() - start) / 2;  // bytes read + written
        start = now();
        streaming_copy(huge[1], huge[0], n);
        t[3][r] = (now() - start) / 2;
    }
    for (int k = 0; k < 4; k++) qsort(t[k], RUNS, sizeof(double), by_value);
    double gbps[4];
    for (int k = 0; k < 4; k++) gbps[k] = bytes / t[k][RUNS / 2] / 1e9;
    printf("read-only: 4 KiB pages %.1f GB/s, huge pages %.1f | streaming copy: 4 KiB pages %.1f, huge pages %.1f"
           " | read / copy %.0f%%, %.0f%% (sink %g)\n",
           gbps[0], gbps[1], gbps[2], gbps[3], 100 * gbps[0] / gbps[2], 100 * gbps[1] / gbps[3], sink);
    return 0;
}
