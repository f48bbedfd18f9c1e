// \file
// Running one kernel of a compiled module with CUDA's execution model on the calling thread:
// blocks one after another; within a block, every CUDA thread a fiber (ucontext) with its own
// stack, run until it waits at __syncthreads() or returns, the block's threads released from
// a barrier only when all of them wait at the same one. Faults are caught and reported as a
// GPU would report them, without taking the process down:
// - a SIGSEGV/SIGBUS on a guard page of an emulated buffer (buffer.h) is an illegal address
//   naming the buffer, the element, the access (read or write), the block and the thread;
// - a sanitizer check in the module (platform.h) is reported with its source line;
// - barrier divergence (threads waiting at different __syncthreads(), or some returning while
//   others wait) is reported naming both, where a GPU would hang or misbehave;
// - a fiber that overflows its stack, or any other fault, is reported as an illegal address.
// Shared memory is filled with NaN bytes before each block (see platform.h), so reading what
// no thread of the block wrote yields NaN; threads run in ascending order up to the first
// barrier and in alternating order after each, so a missing barrier lets a thread read
// another's data too early (or too late) and the output check fails.
//
// Kernels whose text has no __syncthreads() run their threads as plain calls (no fibers).
//
// Thread-safety: a launch uses process-wide signal handlers (installed on first use, chaining
// to the previous ones for faults outside a launch); launches may run on several threads at
// once, each on its own module.
#ifndef LATHE_GPUEMU_LAUNCH_H_
#define LATHE_GPUEMU_LAUNCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gpuemu/platform.h"

namespace lathe::gpuemu {

// The module's entry points a launch needs (resolved by EmuModule).
struct ModuleEntries {
  void (*set_current)(const EmuThreadState*) = nullptr;
  char* shared_begin = nullptr;  // the module's shared memory section
  char* shared_end = nullptr;
};

struct LaunchSpec {
  std::string kernel;                      // for reports
  void (*entry)(float* const*) = nullptr;  // lathe_emu_entry_<kernel>
  bool uses_barriers = true;               // false: threads run as plain calls
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
  // Stack of each fiber; per-thread arrays live there.
  int64_t stack_bytes = 256 * 1024;
};

// Installs the runtime's entry points into a freshly loaded module (its lathe_emu_init).
void InitModule(void (*init)(const EmuRuntimeApi*));

// Runs `spec` over its grid with `args` and returns when every block is done. Aborted with
// the report of the first fault, sanitizer check or barrier divergence (the launch stops
// there); InvalidArgument for an empty grid or block or one over 1024 threads.
absl::Status RunKernel(const ModuleEntries& module, const LaunchSpec& spec,
                       const std::vector<float*>& args);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_LAUNCH_H_
