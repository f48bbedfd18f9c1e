// \file
// A kernel module for the GPU emulator: the CUDA C text lathe generates (the same text NVRTC
// compiles, unchanged) compiled by the host C++ compiler against the platform header
// (platform.h) into a shared object in a private temporary directory, loaded with dlopen, its
// kernels launched with CUDA's execution model (launch.h).
//
// Thread-safety: a module runs one launch at a time (its __shared__ variables are its
// own statics); distinct modules may launch concurrently from distinct threads.
#ifndef LATHE_GPUEMU_MODULE_H_
#define LATHE_GPUEMU_MODULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/launch.h"
#include "gpuemu/platform.h"

namespace lathe::gpuemu {

class EmuModule {
 public:
  // Compiles and loads `cuda_text` with entry points for `kernels`. FailedPrecondition when
  // there is no host compiler; InvalidArgument with the compiler's messages when the text
  // does not compile; Internal when the module cannot be loaded.
  static absl::StatusOr<std::unique_ptr<EmuModule>> Build(
      const std::string& cuda_text, const std::vector<KernelSignature>& kernels,
      OptLevel opt = OptLevel::kOptimized);
  ~EmuModule();
  EmuModule(const EmuModule&) = delete;
  EmuModule& operator=(const EmuModule&) = delete;

  // Runs kernel `name` over `grid` x `block` with `args` (one pointer per parameter) and
  // waits; fails as RunKernel does, or NotFound for an unknown kernel, InvalidArgument for a
  // wrong number of arguments.
  absl::Status Launch(const std::string& name, const int64_t grid[3], const int64_t block[3],
                      const std::vector<float*>& args);

  // Wall-clock milliseconds the host compiler took.
  double compile_ms() const { return compile_ms_; }

 private:
  struct Kernel {
    void (*entry)(float* const*) = nullptr;
    int num_args = 0;
    bool uses_barriers = true;
  };
  EmuModule() = default;

  std::string dir_;
  void* handle_ = nullptr;
  ModuleEntries entries_;
  std::map<std::string, Kernel> kernels_;
  double compile_ms_ = 0;
};

// Whether the kernel `name` defined in `cuda_text` calls __syncthreads() (looked up in the
// text from its definition to the next `extern "C"`); true when it cannot be told.
bool KernelUsesBarriers(const std::string& cuda_text, const std::string& name);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_MODULE_H_
