// cuda_emu.h — runs CUDA C++ kernels on the host so they can be tested without a GPU.
//
// Force-included (`c++ -include cuda_emu.h`) ahead of a kernel source that also compiles with
// NVRTC (there, cuda_prelude.h gives the same helper macros their GPU meaning).
//
// Execution model. One CUDA thread is one fiber with its own stack; all threads of a block run
// cooperatively on one OS thread, switching only at __syncthreads, __syncwarp, warp shuffles
// and votes, so a block of up to 1024 threads needs no OS threads and no locks. Blocks run one
// after another. A loaded module is used by one OS thread at a time: its globals (fibers,
// `__shared__` variables, threadIdx, ...) belong to that thread. To run blocks in parallel the
// host loads several copies of the module, one per worker, which pull block numbers from a
// shared counter; global memory is shared between copies, so atomics are real atomics.
//
// Checks. Every thread of a block must reach each __syncthreads (the CUDA rule), and all of
// them the same call site; a thread that returned, or one waiting at another barrier, is
// reported as an error naming the kernel, block, threads and lines, never a hang. Warp
// operations follow the _sync rules: each non-exited lane named in the mask must arrive at the
// same kind of operation with the same mask. When no thread can move, the waits are reported.
// Shared memory (static and dynamic) is filled with 0xFF bytes at the start of every block, so
// reads of unwritten shared memory give NaN (or -1).
//
// Limits: `extern __shared__` is not supported (use FUSE_DYNAMIC_SHARED); each thread has a
// FUSE_EMU_STACK_BYTES stack with a guard page (overflow crashes). Shared memory sizes are not
// checked here: the statics of all kernels share one section, so a kernel's own size is only
// known to ptxas (NVRTC's resource report); the host checks the dynamic size.

#pragma once
#define FUSE_EMULATION 1

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(FUSE_EMU_UCONTEXT) || !defined(__x86_64__)
#define FUSE_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

#ifndef FUSE_EMU_STACK_BYTES
#define FUSE_EMU_STACK_BYTES (256u * 1024u)
#endif

#define FUSE_EMU_API extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------------------------
// CUDA vocabulary
// ---------------------------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static shared memory: plain statics collected in one section so they can be poisoned per
// block. Statics are per module copy, and a copy runs one block at a time.
#define __shared__ __attribute__((section("fuse_emu_shared"))) static

// Dynamic shared memory: a pointer to this block's buffer (on the GPU, `extern __shared__`).
#define FUSE_DYNAMIC_SHARED(type, name) \
    type* name = reinterpret_cast<type*>(::fuse_emu::dynamic_shared())

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1) : x(x), y(y), z(z) {}
};

struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

// Launch geometry as passed by the host, by value.
struct FuseEmuDim3 {
    unsigned x, y, z;
};

// ---------------------------------------------------------------------------------------------
// Runtime
// ---------------------------------------------------------------------------------------------

extern "C" char __start_fuse_emu_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_fuse_emu_shared[] __attribute__((weak, visibility("hidden")));

namespace fuse_emu {

constexpr unsigned kWarp = 32;
constexpr unsigned char kPoison = 0xFF;         // NaN as float or double, -1 as integer
constexpr uint64_t kUndefined = ~uint64_t{0};   // shuffle from a lane that did not take part

// --- fiber contexts --------------------------------------------------------------------------

#ifdef FUSE_EMU_USE_UCONTEXT

struct Context {
    ucontext_t uc;
};

// makecontext passes only ints, so the argument travels as two halves.
inline void context_entry(unsigned hi, unsigned lo, unsigned fhi, unsigned flo) {
    auto arg = reinterpret_cast<void*>((uintptr_t(hi) << 32) | lo);
    auto fn = reinterpret_cast<void (*)(void*)>((uintptr_t(fhi) << 32) | flo);
    fn(arg);
}

inline void context_start(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    auto a = uintptr_t(arg), f = uintptr_t(fn);
    makecontext(&c.uc, reinterpret_cast<void (*)()>(context_entry), 4, unsigned(a >> 32),
                unsigned(a), unsigned(f >> 32), unsigned(f));
}

inline void context_switch(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }

#else

// x86-64 System V: save the callee-saved registers, MXCSR and the x87 control word on the
// current stack, swap stack pointers, restore. No signal mask syscall, unlike swapcontext.
extern "C" void fuse_emu_switch(void** save_sp, void* load_sp) __attribute__((visibility("hidden")));
extern "C" void fuse_emu_trampoline() __attribute__((visibility("hidden")));
asm(R"(
    .pushsection .text
    .p2align 4
    .hidden fuse_emu_switch
    .type fuse_emu_switch, @function
fuse_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size fuse_emu_switch, .-fuse_emu_switch

    .p2align 4
    .hidden fuse_emu_trampoline
    .type fuse_emu_trampoline, @function
fuse_emu_trampoline:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size fuse_emu_trampoline, .-fuse_emu_trampoline
    .popsection
)");

struct Context {
    void* sp = nullptr;
};

// Lays out a frame that fuse_emu_switch "returns" into: the trampoline then calls fn(arg)
// with a 16-byte aligned stack.
inline void context_start(Context& c, char* stack, size_t size, void (*fn)(void*), void* arg) {
    auto top = reinterpret_cast<uint64_t*>(uintptr_t(stack + size) & ~uintptr_t(15));
    uint64_t* sp = top - 8;
    sp[0] = 0x1F80 | (uint64_t{0x037F} << 32);  // default MXCSR, x87 control word
    sp[1] = sp[2] = 0;                          // r15, r14
    sp[3] = uint64_t(fn);                       // r13
    sp[4] = uint64_t(arg);                      // r12
    sp[5] = sp[6] = 0;                          // rbx, rbp
    sp[7] = uint64_t(&fuse_emu_trampoline);     // return address
    c.sp = sp;
}

inline void context_switch(Context& from, Context& to) { fuse_emu_switch(&from.sp, to.sp); }

#endif

// A fiber stack with a guard page below it; kept from launch to launch until the host gives it
// back (`fuse_emu_release_stacks`): each is two of the process's mappings, which the kernel caps.
struct Stack {
    char* base = nullptr;  // start of the usable part
    size_t size = 0;

    bool allocate() {
        size_t page = size_t(sysconf(_SC_PAGESIZE));
        size_t bytes = (FUSE_EMU_STACK_BYTES + page - 1) / page * page;
        void* p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) return false;
        mprotect(p, page, PROT_NONE);
        base = static_cast<char*>(p) + page;
        size = bytes;
        return true;
    }

    void release() {
        if (!base) return;
        size_t page = size_t(sysconf(_SC_PAGESIZE));
        munmap(base - page, size + page);
        base = nullptr;
    }
};

// --- per-thread state ------------------------------------------------------------------------

enum class State : unsigned char { Ready, AtBarrier, AtWarp, Done, Failed };
enum class WarpOp : unsigned char { Sync, Idx, Up, Down, Xor, Vote };

inline const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::Sync: return "__syncwarp";
        case WarpOp::Idx: return "__shfl_sync";
        case WarpOp::Up: return "__shfl_up_sync";
        case WarpOp::Down: return "__shfl_down_sync";
        case WarpOp::Xor: return "__shfl_xor_sync";
        case WarpOp::Vote: return "__ballot_sync/__any_sync/__all_sync";
    }
    return "?";
}

struct Fiber {
    Context context;
    Stack stack;
    uint3 tid{};
    State state = State::Ready;
    bool started = false;
    unsigned line = 0;  // source line of the barrier or warp operation it waits at
    // Warp operation in flight: inputs, then the result filled in by the scheduler.
    WarpOp op = WarpOp::Sync;
    unsigned mask = 0;
    int arg = 0;
    int width = 0;
    uint64_t in = 0, out = 0;
};

// The kernel with its unpacked parameters, called once per thread.
struct Kernel {
    const char* name = "";
    void (*call)(const void* bound) = nullptr;
    const void* bound = nullptr;
};

struct Runtime {
    Kernel kernel;
    unsigned threads = 0;  // per block
    std::vector<Fiber> fibers;
    Context scheduler;
    std::deque<unsigned> ready;
    unsigned current = 0;
    unsigned done = 0;
    unsigned first_done = 0;
    unsigned at_barrier = 0;
    unsigned first_at_barrier = 0;
    std::string error;
    std::vector<unsigned char> dynamic;  // dynamic shared memory, resized per launch
    size_t dynamic_bytes = 0;

    ~Runtime() {
        for (Fiber& f : fibers) f.stack.release();
    }
};

inline Runtime runtime;

inline void* dynamic_shared() { return runtime.dynamic.data(); }

template <class... A>
std::string format(const char* fmt, A... args) {
    int n = snprintf(nullptr, 0, fmt, args...);
    std::string s(size_t(n > 0 ? n : 0), '\0');
    snprintf(s.data(), s.size() + 1, fmt, args...);
    return s;
}

inline std::string thread_name(unsigned i) {
    uint3 t = runtime.fibers[i].tid;
    return format("(%u,%u,%u)", t.x, t.y, t.z);
}

inline Fiber& current() { return runtime.fibers[runtime.current]; }

// Hands control back to the scheduler; returns when the scheduler resumes this thread.
inline void yield(State state, unsigned line) {
    Fiber& f = current();
    f.state = state;
    f.line = line;
    context_switch(f.context, runtime.scheduler);
}

// Stops the block with `message`; the calling thread is never resumed.
[[noreturn]] inline void fail(const std::string& message) {
    runtime.error = message;
    yield(State::Failed, 0);
    __builtin_trap();
}

[[noreturn]] inline void fiber_main(void*) {
    runtime.kernel.call(runtime.kernel.bound);
    yield(State::Done, 0);
    __builtin_trap();
}

// --- scheduler -------------------------------------------------------------------------------

inline void release(unsigned i) {
    runtime.fibers[i].state = State::Ready;
    runtime.ready.push_back(i);
}

inline void fail_barrier_after_exit(unsigned waiting) {
    Runtime& rt = runtime;
    rt.error = format(
        "thread %s waits at __syncthreads() on line %u but thread %s has returned; "
        "every thread of a block must reach each __syncthreads()",
        thread_name(waiting).c_str(), rt.fibers[waiting].line,
        thread_name(rt.first_done).c_str());
}

inline void arrive_at_barrier(unsigned i) {
    Runtime& rt = runtime;
    if (rt.done) return fail_barrier_after_exit(i);
    if (rt.at_barrier && rt.fibers[i].line != rt.fibers[rt.first_at_barrier].line) {
        rt.error = format(
            "threads wait at different __syncthreads(): thread %s on line %u, thread %s on "
            "line %u",
            thread_name(rt.first_at_barrier).c_str(), rt.fibers[rt.first_at_barrier].line,
            thread_name(i).c_str(), rt.fibers[i].line);
        return;
    }
    if (rt.at_barrier++ == 0) rt.first_at_barrier = i;
    if (rt.at_barrier < rt.threads) return;
    rt.at_barrier = 0;
    for (unsigned t = 0; t < rt.threads; ++t) release(t);
}

// Lane that `lane` reads in a shuffle, per the CUDA definitions (width is a power of two).
inline unsigned source_lane(WarpOp op, unsigned lane, int arg, int width) {
    unsigned w = unsigned(width), in_group = lane % w, group_start = lane - in_group;
    switch (op) {
        case WarpOp::Idx: return group_start + (unsigned(arg) & (w - 1));
        case WarpOp::Up: return in_group >= unsigned(arg) ? lane - unsigned(arg) : lane;
        case WarpOp::Down: return in_group + unsigned(arg) < w ? lane + unsigned(arg) : lane;
        case WarpOp::Xor: {
            unsigned src = lane ^ unsigned(arg);
            return src < group_start + w ? src : lane;
        }
        default: return lane;
    }
}

// Finishes the warp operation that lanes `group` (bits) of warp starting at `base` wait at.
inline void complete_warp_op(unsigned base, uint32_t group) {
    Runtime& rt = runtime;
    const Fiber& first = rt.fibers[base + __builtin_ctz(group)];
    uint32_t votes = 0;
    for (uint32_t g = group; g; g &= g - 1) {
        const Fiber& f = rt.fibers[base + __builtin_ctz(g)];
        if (f.op != first.op) {
            rt.error = format(
                "lanes of warp %u wait at different warp operations with mask 0x%08x: %s on "
                "line %u and %s on line %u",
                base / kWarp, first.mask, op_name(first.op), first.line, op_name(f.op), f.line);
            return;
        }
        if (f.in) votes |= 1u << __builtin_ctz(g);
    }
    for (uint32_t g = group; g; g &= g - 1) {
        unsigned lane = __builtin_ctz(g);
        Fiber& f = rt.fibers[base + lane];
        if (f.op == WarpOp::Vote) {
            f.out = votes | uint64_t{group} << 32;
        } else {
            unsigned src = source_lane(f.op, lane, f.arg, f.width);
            f.out = src < kWarp && (group >> src & 1) ? rt.fibers[base + src].in : kUndefined;
        }
    }
    for (uint32_t g = group; g; g &= g - 1) release(base + __builtin_ctz(g));
}

// Completes every group of lanes in warp `warp` whose whole (non-exited) mask has arrived.
inline void settle_warp(unsigned warp) {
    Runtime& rt = runtime;
    unsigned base = warp * kWarp;
    unsigned lanes = rt.threads - base < kWarp ? rt.threads - base : kWarp;
    uint32_t alive = 0, waiting = 0;
    for (unsigned l = 0; l < lanes; ++l) {
        State s = rt.fibers[base + l].state;
        if (s != State::Done) alive |= 1u << l;
        if (s == State::AtWarp) waiting |= 1u << l;
    }
    while (waiting && rt.error.empty()) {
        unsigned mask = rt.fibers[base + __builtin_ctz(waiting)].mask;
        uint32_t group = 0;
        for (uint32_t w = waiting; w; w &= w - 1) {
            unsigned l = __builtin_ctz(w);
            if (rt.fibers[base + l].mask == mask) group |= 1u << l;
        }
        waiting &= ~group;
        if (group == (mask & alive)) complete_warp_op(base, group);
    }
}

inline void after_switch(unsigned i) {
    Runtime& rt = runtime;
    switch (rt.fibers[i].state) {
        case State::Done:
            if (rt.done++ == 0) rt.first_done = i;
            if (rt.at_barrier) return fail_barrier_after_exit(rt.first_at_barrier);
            return settle_warp(i / kWarp);
        case State::AtBarrier: return arrive_at_barrier(i);
        case State::AtWarp: return settle_warp(i / kWarp);
        case State::Ready:
        case State::Failed: return;
    }
}

// "no thread can make progress: 16 thread(s) from (0,0,0) wait at __syncthreads() on line 9; ..."
inline std::string describe_deadlock() {
    Runtime& rt = runtime;
    std::string text = "no thread can make progress:";
    std::vector<bool> told(rt.threads, false);
    for (unsigned i = 0; i < rt.threads; ++i) {
        const Fiber& f = rt.fibers[i];
        if (told[i] || f.state == State::Done) continue;
        unsigned count = 0;
        for (unsigned j = i; j < rt.threads; ++j) {
            const Fiber& g = rt.fibers[j];
            bool same = g.state == f.state && g.line == f.line &&
                        (f.state != State::AtWarp ||
                         (g.op == f.op && g.mask == f.mask && j / kWarp == i / kWarp));
            if (same && !told[j]) {
                told[j] = true;
                ++count;
            }
        }
        std::string what =
            f.state == State::AtBarrier
                ? "__syncthreads()"
                : format("%s (mask 0x%08x, warp %u)", op_name(f.op), f.mask, i / kWarp);
        text += format(" %u thread(s) from %s wait at %s on line %u;", count,
                       thread_name(i).c_str(), what.c_str(), f.line);
    }
    if (rt.done) text += format(" %u thread(s) returned;", rt.done);
    text.pop_back();  // the last ';'
    return text;
}

inline void poison_shared() {
    size_t bytes = size_t(__stop_fuse_emu_shared - __start_fuse_emu_shared);
    if (bytes) memset(__start_fuse_emu_shared, kPoison, bytes);
    if (runtime.dynamic_bytes) memset(runtime.dynamic.data(), kPoison, runtime.dynamic_bytes);
}

// Runs every thread of block `index` to completion; false with runtime.error set otherwise.
inline bool run_block(uint3 index) {
    Runtime& rt = runtime;
    poison_shared();
    blockIdx = index;
    rt.done = rt.at_barrier = 0;
    rt.error.clear();
    rt.ready.clear();
    for (unsigned i = 0; i < rt.threads; ++i) {
        rt.fibers[i].started = false;
        release(i);
    }
    while (!rt.ready.empty() && rt.error.empty()) {
        unsigned i = rt.ready.front();
        rt.ready.pop_front();
        Fiber& f = rt.fibers[i];
        rt.current = i;
        threadIdx = f.tid;
        if (!f.started) {
            context_start(f.context, f.stack.base, f.stack.size, fiber_main, nullptr);
            f.started = true;
        }
        context_switch(rt.scheduler, f.context);
        after_switch(i);
    }
    if (rt.error.empty() && rt.done != rt.threads) rt.error = describe_deadlock();
    return rt.error.empty();
}

// Sizes fibers, stacks and dynamic shared memory for a launch; false if memory ran out.
inline bool prepare(FuseEmuDim3 block, size_t dynamic_bytes) {
    Runtime& rt = runtime;
    rt.threads = block.x * block.y * block.z;
    if (rt.fibers.size() < rt.threads) rt.fibers.resize(rt.threads);
    for (unsigned i = 0; i < rt.threads; ++i) {
        Fiber& f = rt.fibers[i];
        if (!f.stack.base && !f.stack.allocate()) return false;
        f.tid = {i % block.x, i / block.x % block.y, i / (block.x * block.y)};
    }
    if (rt.dynamic.size() < dynamic_bytes) rt.dynamic.resize(dynamic_bytes);
    rt.dynamic_bytes = dynamic_bytes;
    return true;
}

inline int report(char* err, size_t err_len, const std::string& message) {
    if (err_len) snprintf(err, err_len, "%s", message.c_str());
    return 1;
}

// Runs blocks numbered from the shared counter `next_block` until the grid is used up.
inline int run_grid(Kernel kernel, FuseEmuDim3 grid, FuseEmuDim3 block, size_t dynamic_bytes,
                    unsigned long long* next_block, char* err, size_t err_len) {
    if (!prepare(block, dynamic_bytes)) {
        return report(err, err_len, format("out of memory for %u thread stacks",
                                           block.x * block.y * block.z));
    }
    runtime.kernel = kernel;
    gridDim = dim3(grid.x, grid.y, grid.z);
    blockDim = dim3(block.x, block.y, block.z);
    unsigned long long total = 1ull * grid.x * grid.y * grid.z;
    for (;;) {
        unsigned long long b = __atomic_fetch_add(next_block, 1, __ATOMIC_RELAXED);
        if (b >= total) return 0;
        uint3 index{unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                    unsigned(b / grid.x / grid.y)};
        if (!run_block(index)) {
            __atomic_store_n(next_block, total, __ATOMIC_RELAXED);  // stop the other workers
            return report(err, err_len,
                          format("kernel `%s`, block (%u,%u,%u): %s", kernel.name, index.x,
                                 index.y, index.z, runtime.error.c_str()));
        }
    }
}

// --- warp operations -------------------------------------------------------------------------

inline uint64_t warp_op(WarpOp op, unsigned mask, uint64_t in, int arg, int width,
                        unsigned line) {
    unsigned lane = runtime.current % kWarp;
    if (!(mask >> lane & 1)) {
        fail(format("thread %s calls %s on line %u with mask 0x%08x, which leaves out its "
                    "own lane %u",
                    thread_name(runtime.current).c_str(), op_name(op), line, mask, lane));
    }
    if (width < 1 || width > int(kWarp) || (width & (width - 1))) {
        fail(format("%s on line %u: width %d is not a power of two up to 32", op_name(op),
                    line, width));
    }
    Fiber& f = current();
    f.op = op;
    f.mask = mask;
    f.in = in;
    f.arg = arg;
    f.width = width;
    yield(State::AtWarp, line);
    return f.out;
}

template <class T>
T shuffle(WarpOp op, unsigned mask, T value, int arg, int width, unsigned line) {
    static_assert(std::is_arithmetic_v<T> && sizeof(T) <= 8, "shuffle of an unsupported type");
    uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = warp_op(op, mask, bits, arg, width, line);
    memcpy(&value, &bits, sizeof(T));
    return value;
}

// --- atomics: real ones, since module copies run blocks in parallel --------------------------

template <class T>
T atomic_update(T* address, T (*update)(T, T), T operand) {
    std::atomic_ref<T> ref(*address);
    T old = ref.load(std::memory_order_relaxed);
    while (!ref.compare_exchange_weak(old, update(old, operand))) {
    }
    return old;
}

// --- launch ABI ------------------------------------------------------------------------------

// Parameter type codes, matched against the host's arguments: f32, f64, i32, u64, ...;
// pointers as "f32*" or "const f32*".
template <class T>
std::string type_code() {
    if constexpr (std::is_pointer_v<T>) {
        using E = std::remove_pointer_t<T>;
        return (std::is_const_v<E> ? "const " : "") + type_code<std::remove_cv_t<E>>() + "*";
    } else if constexpr (std::is_floating_point_v<T>) {
        return format("f%zu", sizeof(T) * 8);
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        return format("%c%zu", std::is_signed_v<T> ? 'i' : 'u', sizeof(T) * 8);
    } else {
        return "?";
    }
}

template <class... P>
const char* signature(void (*)(P...)) {
    static const std::string text = [] {
        std::string s;
        ((s += (s.empty() ? "" : ",") + type_code<std::decay_t<P>>()), ...);
        return s;
    }();
    return text.c_str();
}

// Reads each parameter from args[i] (a pointer to the value, as in cuLaunchKernel) with the
// kernel's own parameter type, then runs the grid.
template <class... P, size_t... I>
int launch_indexed(std::index_sequence<I...>, const char* name, void (*kernel)(P...),
                   FuseEmuDim3 grid, FuseEmuDim3 block, size_t dynamic_bytes, void** args,
                   unsigned long long* next_block, char* err, size_t err_len) {
    struct Bound {
        void (*kernel)(P...);
        std::tuple<std::decay_t<P>...> params;
    };
    const Bound bound{kernel, {*static_cast<std::decay_t<P>*>(args[I])...}};
    auto call = [](const void* b) {
        auto* self = static_cast<const Bound*>(b);
        std::apply(self->kernel, self->params);
    };
    return run_grid(Kernel{name, call, &bound}, grid, block, dynamic_bytes, next_block, err,
                    err_len);
}

template <class... P>
int launch(const char* name, void (*kernel)(P...), FuseEmuDim3 grid, FuseEmuDim3 block,
           size_t dynamic_bytes, void** args, unsigned long long* next_block, char* err,
           size_t err_len) {
    return launch_indexed(std::index_sequence_for<P...>{}, name, kernel, grid, block,
                          dynamic_bytes, args, next_block, err, err_len);
}

inline std::string& exported() {
    static std::string names;
    return names;
}

inline int export_kernel(const char* name) {
    std::string& names = exported();
    names += (names.empty() ? "" : ",") + std::string(name);
    return 0;
}

}  // namespace fuse_emu

// Comma-separated names of the kernels marked with FUSE_EMU_EXPORT.
FUSE_EMU_API const char* fuse_emu_kernels() { return fuse_emu::exported().c_str(); }

// Unmaps every fiber stack of this copy (the next launch maps them again).
FUSE_EMU_API void fuse_emu_release_stacks() {
    for (fuse_emu::Fiber& f : fuse_emu::runtime.fibers) f.stack.release();
}

// Makes `kernel` launchable from the host:
//   const char* fuse_emu_signature_<kernel>(void): parameter type codes, comma-separated.
//   int fuse_emu_launch_<kernel>(grid, block, dynamic_shared_bytes, args, next_block, err,
//       err_len): args[i] points to parameter i; next_block is a block counter shared by all
//       workers of one launch, starting at 0. Returns 0, or 1 with a message in err.
// The caller validates the launch geometry (block size 1..1024, grid dims non-zero).
#define FUSE_EMU_EXPORT(kernel)                                                              \
    FUSE_EMU_API const char* fuse_emu_signature_##kernel() {                                 \
        return ::fuse_emu::signature(&kernel);                                               \
    }                                                                                        \
    FUSE_EMU_API int fuse_emu_launch_##kernel(                                               \
        FuseEmuDim3 grid, FuseEmuDim3 block, size_t dynamic_shared_bytes, void** args,       \
        unsigned long long* next_block, char* err, size_t err_len) {                         \
        return ::fuse_emu::launch(#kernel, &kernel, grid, block, dynamic_shared_bytes, args, \
                                  next_block, err, err_len);                                 \
    }                                                                                        \
    [[maybe_unused]] static const int fuse_emu_exported_##kernel =                           \
        ::fuse_emu::export_kernel(#kernel);

// ---------------------------------------------------------------------------------------------
// Device functions
// ---------------------------------------------------------------------------------------------

inline void __syncthreads(unsigned line = __builtin_LINE()) {
    fuse_emu::yield(fuse_emu::State::AtBarrier, line);
}

inline void __syncwarp(unsigned mask = 0xffffffffu, unsigned line = __builtin_LINE()) {
    fuse_emu::warp_op(fuse_emu::WarpOp::Sync, mask, 0, 0, warpSize, line);
}

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              unsigned line = __builtin_LINE()) {
    return fuse_emu::shuffle(fuse_emu::WarpOp::Idx, mask, var, src_lane, width, line);
}

template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 unsigned line = __builtin_LINE()) {
    return fuse_emu::shuffle(fuse_emu::WarpOp::Up, mask, var, int(delta), width, line);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   unsigned line = __builtin_LINE()) {
    return fuse_emu::shuffle(fuse_emu::WarpOp::Down, mask, var, int(delta), width, line);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  unsigned line = __builtin_LINE()) {
    return fuse_emu::shuffle(fuse_emu::WarpOp::Xor, mask, var, lane_mask, width, line);
}

inline unsigned __ballot_sync(unsigned mask, int predicate, unsigned line = __builtin_LINE()) {
    return unsigned(fuse_emu::warp_op(fuse_emu::WarpOp::Vote, mask, predicate != 0, 0, warpSize,
                                      line));
}

inline int __any_sync(unsigned mask, int predicate, unsigned line = __builtin_LINE()) {
    return __ballot_sync(mask, predicate, line) != 0;
}

inline int __all_sync(unsigned mask, int predicate, unsigned line = __builtin_LINE()) {
    uint64_t r = fuse_emu::warp_op(fuse_emu::WarpOp::Vote, mask, predicate != 0, 0, warpSize,
                                   line);
    return unsigned(r) == unsigned(r >> 32);
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Overloads rather than templates, so that `atomicAdd(float_ptr, 1)` converts like CUDA's.
#define FUSE_EMU_ATOMIC_ARITH(T)                                                         \
    inline T atomicAdd(T* a, T v) { return std::atomic_ref<T>(*a).fetch_add(v); }        \
    inline T atomicExch(T* a, T v) { return std::atomic_ref<T>(*a).exchange(v); }
#define FUSE_EMU_ATOMIC_INT(T)                                                           \
    FUSE_EMU_ATOMIC_ARITH(T)                                                             \
    inline T atomicSub(T* a, T v) { return std::atomic_ref<T>(*a).fetch_sub(v); }        \
    inline T atomicCAS(T* a, T compare, T v) {                                           \
        std::atomic_ref<T>(*a).compare_exchange_strong(compare, v);                      \
        return compare;                                                                  \
    }                                                                                    \
    inline T atomicMax(T* a, T v) {                                                      \
        return fuse_emu::atomic_update<T>(a, [](T x, T y) { return x > y ? x : y; }, v); \
    }                                                                                    \
    inline T atomicMin(T* a, T v) {                                                      \
        return fuse_emu::atomic_update<T>(a, [](T x, T y) { return x < y ? x : y; }, v); \
    }
FUSE_EMU_ATOMIC_ARITH(float)
FUSE_EMU_ATOMIC_ARITH(double)
FUSE_EMU_ATOMIC_INT(int)
FUSE_EMU_ATOMIC_INT(unsigned)
FUSE_EMU_ATOMIC_INT(unsigned long long)
#undef FUSE_EMU_ATOMIC_INT
#undef FUSE_EMU_ATOMIC_ARITH

// sm_90's vector atomic: each of the four floats is added atomically (CUDA guarantees no more).
inline float4 atomicAdd(float4* a, float4 v) {
    float* p = &a->x;
    return {atomicAdd(p, v.x), atomicAdd(p + 1, v.y), atomicAdd(p + 2, v.z), atomicAdd(p + 3, v.w)};
}

template <class T>
T __ldg(const T* address) {
    return *address;
}

template <class T>
void __stwb(T* address, T value) {
    *address = value;
}

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }
inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
inline unsigned __float_as_uint(float x) { return __builtin_bit_cast(unsigned, x); }
inline float __uint_as_float(unsigned x) { return __builtin_bit_cast(float, x); }
inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }

#define FUSE_EMU_MIN_MAX(T)                          \
    inline T min(T a, T b) { return a < b ? a : b; } \
    inline T max(T a, T b) { return a > b ? a : b; }
FUSE_EMU_MIN_MAX(int)
FUSE_EMU_MIN_MAX(unsigned)
FUSE_EMU_MIN_MAX(long long)
FUSE_EMU_MIN_MAX(unsigned long long)
FUSE_EMU_MIN_MAX(float)
FUSE_EMU_MIN_MAX(double)
#undef FUSE_EMU_MIN_MAX
