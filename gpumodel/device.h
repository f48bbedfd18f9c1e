// \file
// Where a compiled model runs on a GPU: the real device through the CUDA driver (loaded with
// dlopen, codegen/cuda/cuda_driver.h), or the GPU emulator (gpuemu/), which runs the same
// generated CUDA C on this CPU. Both take the kernels as generated sources, device memory as
// numbered buffers, and launches with arguments as device addresses (a buffer's address plus
// a byte offset), so the model's memory plan and launch order are one code for both.
//
// Thread-safety: none; GpuModel serializes its runs.
#ifndef LATHE_GPUMODEL_DEVICE_H_
#define LATHE_GPUMODEL_DEVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gpu_schedule.h"
#include "ir/target.h"

namespace lathe::gpumodel {

class GpuDevice {
 public:
  virtual ~GpuDevice() = default;

  // "emulated sm_90", "NVIDIA H100 80GB HBM3 (sm_90), driver 13.0".
  virtual std::string description() const = 0;
  // The device class whose tuning records fit this device: "cuda-emu:sm_90", or a real GPU's
  // "cuda:<name> (sm_XX)" as lathe-worker registers it.
  virtual std::string device_class() const = 0;
  // The architecture the code is built for ("sm_90") and its launch limits.
  virtual std::string arch() const = 0;
  virtual codegen::cuda::GpuLimits limits() const = 0;

  // Compiles the kernels (each one generated source; the kernel names of distinct sources
  // differ, the prelude is shared) on up to `jobs` threads and loads them as programs 0..n-1.
  // InvalidArgument with the compiler's messages when the text does not compile,
  // ResourceExhausted when ptxas's figures of a kernel are over the architecture's limits.
  virtual absl::Status Load(const std::vector<codegen::cuda::CudaSource>& kernels, int jobs) = 0;

  // Device memory of `bytes` (0 allowed) named `name` in fault reports; returns its index.
  virtual absl::StatusOr<int> Allocate(int64_t bytes, const std::string& name) = 0;
  // The device address of buffer `buffer`'s first byte.
  virtual uint64_t Address(int buffer) const = 0;
  virtual absl::Status Upload(int buffer, const void* src, int64_t bytes) = 0;
  // Waits for the launches before it, then copies.
  virtual absl::Status Download(int buffer, void* dst, int64_t bytes) = 0;

  // Launches every kernel of program `program` with `args` (device addresses of the
  // program's arguments, in order), in order after the launches before.
  virtual absl::Status Launch(int program, const std::vector<uint64_t>& args) = 0;
  // Launches and waits; the milliseconds the launch took on the device (CUDA events on a
  // GPU, wall time on the emulator).
  virtual absl::StatusOr<double> LaunchTimed(int program, const std::vector<uint64_t>& args) = 0;
  // Waits for every launch; a kernel's fault is reported here or by the launch.
  virtual absl::Status Synchronize() = 0;

  // Launches programs[i] with args[i] for every i, in order, as Launch does one by one (the
  // default). The same sequence comes on every call of a model (fixed addresses), so the CUDA
  // device captures it as a CUDA graph on the first call and relaunches the graph after (it
  // falls back to single launches, for good, when the driver cannot capture). On failure
  // *failed is the index of the launch that failed (-1 when it was the graph's).
  virtual absl::Status LaunchSequence(const std::vector<int>& programs,
                                      const std::vector<std::vector<uint64_t>>& args, int* failed);
};

// Kernels grouped into at most `modules` compilation units of about equal text: each unit's
// source (the prelude once, then its kernels) and the indices of its kernels.
struct ModuleText {
  std::string source;
  std::vector<int> kernels;
};
std::vector<ModuleText> GroupKernels(const std::vector<codegen::cuda::CudaSource>& kernels,
                                     int modules);

// Runs fn(0..n-1) on n threads (the calling one included) and returns the first error.
absl::Status OnThreads(int n, const std::function<absl::Status(int)>& fn);

// What a device's Load does: the kernels grouped into `jobs` units (GroupKernels), each
// compiled on its own thread by `compile`, then the program of every kernel made from its
// unit's module by `load(module, kernel)`, into (*programs)[kernel].
template <typename Module, typename Program>
absl::Status BuildPrograms(
    const std::vector<codegen::cuda::CudaSource>& kernels, int jobs,
    const std::function<absl::StatusOr<Module>(const ModuleText&)>& compile,
    const std::function<absl::StatusOr<std::unique_ptr<Program>>(const Module&, int)>& load,
    std::vector<std::unique_ptr<Program>>* programs) {
  const std::vector<ModuleText> units = GroupKernels(kernels, jobs);
  std::vector<Module> modules(units.size());
  absl::Status built = OnThreads(static_cast<int>(units.size()), [&](int m) -> absl::Status {
    absl::StatusOr<Module> module = compile(units[m]);
    if (!module.ok()) return module.status();
    modules[m] = *std::move(module);
    return absl::OkStatus();
  });
  if (!built.ok()) return built;
  programs->clear();
  programs->resize(kernels.size());
  for (size_t m = 0; m < units.size(); ++m) {
    for (int i : units[m].kernels) {
      absl::StatusOr<std::unique_ptr<Program>> p = load(modules[m], i);
      if (!p.ok()) return p.status();
      (*programs)[i] = *std::move(p);
    }
  }
  return absl::OkStatus();
}

// The emulated GPU of `arch` ("sm_90"). With `check_with_nvrtc`, Load first compiles every
// module with NVRTC for `arch` and checks ptxas's figures against its limits (as `lathe
// verify` does; slow: ptxas takes seconds on an unrolled register tile, so PP-OCR cls's
// kernels compile in minutes instead of seconds). FailedPrecondition when this machine cannot
// emulate (no host compiler) or check (no NVRTC); InvalidArgument for an unknown architecture.
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenEmulatedGpu(const std::string& arch,
                                                           bool check_with_nvrtc = false);

// GPU `ordinal` through the CUDA driver. FailedPrecondition without a driver or without that
// GPU (naming how many there are), or in a build without NVRTC.
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenCudaGpu(int ordinal);

// The device of a model target: cuda-emu:sm_XX is the emulator, cuda and cuda:N a GPU through
// the driver. InvalidArgument for cpu and for cuda:sm_XX (an architecture names no device
// to run on).
absl::StatusOr<std::unique_ptr<GpuDevice>> OpenGpuDevice(const ir::Target& target);

}  // namespace lathe::gpumodel

#endif  // LATHE_GPUMODEL_DEVICE_H_
