// \file
// The host C++ compiler the GPU emulator builds kernel modules with: found once per process
// ($LATHE_EMU_CXX, else c++, g++ or clang++ on $PATH) and run as a child process
// (posix_spawn, never a fork of the calling, possibly threaded, process) whose output is kept
// for the error message.
//
// Thread-safety: all functions may be called concurrently.
#ifndef LATHE_GPUEMU_HOST_COMPILER_H_
#define LATHE_GPUEMU_HOST_COMPILER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::gpuemu {

// The path of the host compiler. FailedPrecondition, saying what to install or set, when
// there is none ($LATHE_EMU_CXX naming a missing or non-executable file is an error too).
absl::StatusOr<std::string> FindHostCompiler();

// How much the host compiler optimises a module: kFast compiles fastest (tests that emulate
// many small schedules), kOptimized runs fastest (workers, `lathe verify`).
enum class OptLevel { kFast, kOptimized };

// The flags a module is compiled with (after the compiler, before the input and output):
// a shared object at `opt`, with the sanitizer checks whose handlers the platform header
// defines.
std::vector<std::string> ModuleCompileFlags(OptLevel opt = OptLevel::kOptimized);

// Compiles the C++ file `source_path` into the shared object `output_path`. InvalidArgument
// carrying the compiler's messages (at most the first 8 KiB) when it fails; FailedPrecondition
// without a compiler; Internal when it cannot be started.
absl::Status CompileModule(const std::string& source_path, const std::string& output_path,
                           OptLevel opt = OptLevel::kOptimized);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_HOST_COMPILER_H_
