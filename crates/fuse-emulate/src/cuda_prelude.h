// cuda_prelude.h — the fuse helper macros with their GPU meaning.
//
// Generated sources start with this text so that one source compiles both with NVRTC and,
// under emulation, with the host compiler: there cuda_emu.h is force-included first, defines
// FUSE_EMULATION and gives the same macros their host meaning, and this block is skipped.
#ifndef FUSE_EMULATION
// Dynamic shared memory of the block, sized at launch.
#define FUSE_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
// Makes a kernel launchable by the emulator; nothing to do on the GPU.
#define FUSE_EMU_EXPORT(kernel)
#endif
