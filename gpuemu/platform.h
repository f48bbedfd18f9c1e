// \file
// The CUDA platform on the host, as the GPU emulator compiles generated kernels against it:
// a C++ header that defines what a CUDA C file takes from the compiler and the runtime
// (__global__/__device__/__shared__/__launch_bounds__/__align__, threadIdx/blockIdx/blockDim/
// gridDim, __syncthreads(), float4/make_float4, __int_as_float and the libm functions), and
// the small C interface between a compiled kernel module and the emulator's runtime.
//
// How the semantics are kept:
// - threadIdx and friends read the state of the CUDA thread now running (a fiber), set by
//   the runtime at every switch (lathe_emu_set_current);
// - __shared__ variables are function-local statics placed in the section "lathe_shared", so
//   one block's threads share them; the runtime fills the section with NaN bytes before a
//   block runs (a read of shared memory no thread of the block wrote is a NaN, not a value
//   left by another block);
// - __syncthreads() calls into the runtime with its source line, which switches fibers and
//   checks that every thread of the block waits at the same barrier;
// - the module is compiled with -fsanitize=bounds: its handlers (defined here, not in
//   libubsan) report an index past a shared or per-thread array with the kernel's source line
//   to the runtime, which ends the launch;
// - float4 and float2 check the alignment of every copy to or from memory, and report a
//   misaligned one (a GPU faults on it) naming the buffer and the element;
// - the warp-level tensor-core helpers of codegen/cuda's prelude (lathe_mma_m16n8k8_tf32,
//   lathe_cvt_tf32) are defined here with PTX's semantics: cvt.rna.tf32.f32 rounds to 10
//   mantissa bits (nearest, ties away from zero); mma.sync.aligned.m16n8k8.row.col.f32.tf32
//   gathers the 32 lanes' fragments (the PTX ISA's layout: lane = 4 * groupID +
//   threadID_in_group) through a per-warp exchange area and a warp barrier (every lane of the
//   warp must reach the same mma, else the launch reports warp divergence), reads only the
//   tf32 bits of its inputs and accumulates in fp32;
// - cp.async (lathe_cp_async16/4, _commit, _wait(n): cp.async.cg/.ca, commit_group,
//   wait_group) queues each copy in the issuing thread, fills its shared destination with NaN
//   bytes at once and writes the data only when wait_group completes the copy's group (all
//   committed groups but the newest n), so a read before the wait, or of a stage refilled
//   under its readers, sees NaN; src-size below the copy's size zero-fills the rest; a copy
//   outside shared memory or misaligned is reported with its line;
// - dynamic shared memory (LATHE_DYNAMIC_SHARED(name, floats), extern __shared__ for NVRTC) is
//   a shared array of that size.
#ifndef LATHE_GPUEMU_PLATFORM_H_
#define LATHE_GPUEMU_PLATFORM_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lathe::gpuemu {

// The state of one emulated CUDA thread, as the module reads it. Layout shared with the
// header's C declarations: keep both in sync.
struct EmuThreadState {
  uint32_t thread_idx[3];
  uint32_t block_idx[3];
  uint32_t block_dim[3];
  uint32_t grid_dim[3];
};

// The runtime's entry points handed to a module (lathe_emu_init).
struct EmuRuntimeApi {
  void (*barrier)(int line);
  // The calling thread waits until every thread of its warp waits at the warp barrier of
  // `line` (mma.sync's convergence).
  void (*warp_barrier)(int line);
  // A sanitizer check failed in the module: `what` describes it (never returns).
  void (*report)(const char* what);
  // A vector access of `bytes` at `address`, which is not aligned to them (never returns).
  void (*misaligned)(const void* address, unsigned long bytes);
};

// The header's text: included first by the emulator's translation unit.
const std::string& PlatformHeader();

// One kernel of a module: its symbol and number of pointer arguments.
struct KernelSignature {
  std::string name;
  int num_args = 0;
};

// The translation unit the emulator compiles: the platform header, `#line 1` naming
// `file_name`, the CUDA text unchanged, then one entry wrapper per kernel
// (`lathe_emu_entry_<name>(float* const* args)`, which calls the kernel with its arguments).
std::string TranslationUnit(const std::string& cuda_text, const std::string& file_name,
                            const std::vector<KernelSignature>& kernels);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_PLATFORM_H_
