// \file
// A generated CUDA program (codegen::cuda::CudaSource: text and launch plan) on the GPU
// emulator, as CudaProgram runs one on a GPU: its module built from the exact source text,
// its temporaries allocated as guarded emulated buffers, its kernels launched in order.
//
// Thread-safety: one Run at a time.
#ifndef LATHE_GPUEMU_PROGRAM_H_
#define LATHE_GPUEMU_PROGRAM_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "gpuemu/buffer.h"
#include "gpuemu/module.h"

namespace lathe::gpuemu {

class EmuProgram {
 public:
  // Builds the module of `src.source` and allocates the plan's temporaries. Fails as
  // EmuModule::Build.
  static absl::StatusOr<std::unique_ptr<EmuProgram>> Build(const codegen::cuda::CudaSource& src);
  // A program whose kernels are in `module`, built with those of other programs (one host
  // compile for many schedules: their kernels named apart, one prelude).
  static absl::StatusOr<std::unique_ptr<EmuProgram>> FromModule(codegen::cuda::LaunchPlan plan,
                                                                std::shared_ptr<EmuModule> module);

  // Runs every kernel of the plan with `args` (the plan's arguments, in order, named after
  // them for reports); temporaries start as NaN bytes, as uninitialised device memory may.
  // Fails with the first kernel's fault (Aborted, see launch.h), then with an out-of-bounds
  // write found next to any buffer (Aborted), or InvalidArgument for a wrong argument count.
  absl::Status Run(const std::vector<EmuBuffer*>& args);

  // The same with the arguments as addresses inside emulated buffers (for instance values
  // at offsets of one arena, as a compiled model places them): after each kernel the
  // canaries of `check` (the buffers holding the arguments) and of the temporaries are
  // checked. The caller names the buffers.
  absl::Status RunAt(const std::vector<float*>& args, const std::vector<EmuBuffer*>& check);

  const codegen::cuda::LaunchPlan& plan() const { return plan_; }
  double compile_ms() const { return module_->compile_ms(); }

 private:
  EmuProgram() = default;
  codegen::cuda::LaunchPlan plan_;
  std::shared_ptr<EmuModule> module_;
  std::vector<std::unique_ptr<EmuBuffer>> temps_;
};

// The kernels of `plan` as the module needs them.
std::vector<KernelSignature> Signatures(const codegen::cuda::LaunchPlan& plan);

}  // namespace lathe::gpuemu

#endif  // LATHE_GPUEMU_PROGRAM_H_
