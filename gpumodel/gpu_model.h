// \file
// A compiled model on a GPU, or on the GPU emulator (`lathe run --model F --target
// cuda[:N]|cuda-emu:sm_XX`): the model compiler's plan (model/plan.h: its kernels and
// workloads, compiled with model::CompileOptions' defaults for GPUs: plain NCHW, none of the
// blocked layout, Winograd or packed matmul panels, which are the CPU's) with every
// distinct kernel generated as CUDA C from the schedule a ScheduleSource picks (the best
// record of the device's class, else a GPU rule or default), checked against the device's
// launch limits and compiled together; device memory as the plan lays it out (one activation
// arena, one weights blob uploaded once, a buffer per input and output); a run copies the
// inputs in, launches every step in order and copies the outputs back.
//
// Thread-safety: Run and RunProfiled may be called from several threads; they run one at a
// time (the arena is the device's).
#ifndef LATHE_GPUMODEL_GPU_MODEL_H_
#define LATHE_GPUMODEL_GPU_MODEL_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "gpumodel/device.h"
#include "model/compile.h"
#include "model/executor.h"
#include "model/plan.h"

namespace lathe::gpumodel {

// One distinct kernel of a plan as CUDA: its source (kernels named lathe_k<i>_k<j>) and where
// its schedule came from.
struct GpuKernel {
  codegen::cuda::CudaSource source;
  std::string origin;
};

// Generates every distinct kernel of `plan` with `schedules`' schedule, falling back to the
// default GPU schedule when that one has no CUDA or is over `limits`. A kernel that has no
// CUDA even so is InvalidArgument naming its op, its workload and the ONNX nodes it computes.
absl::StatusOr<std::vector<GpuKernel>> GenerateKernels(const model::Plan& plan,
                                                       const model::ScheduleSource& schedules,
                                                       const codegen::cuda::GpuLimits& limits);

class GpuModel {
 public:
  // Generates and compiles (on up to `jobs` threads) every kernel for `device`, allocates the
  // device memory and uploads the weights.
  static absl::StatusOr<std::unique_ptr<GpuModel>> Create(model::Plan plan,
                                                          const model::ScheduleSource& schedules,
                                                          std::unique_ptr<GpuDevice> device,
                                                          int jobs = 2);

  const model::Plan& plan() const { return plan_; }
  const std::vector<std::string>& origins() const { return origins_; }
  const GpuDevice& device() const { return *device_; }
  // Bytes of device memory the model holds (arena, weights, inputs and outputs).
  int64_t device_bytes() const { return device_bytes_; }

  // Runs the model: one host buffer per input and output, in plan order. A kernel's fault
  // fails the run with the step and its workload named.
  absl::Status Run(const float* const* inputs, float* const* outputs) const;
  // The same, step by step, adding each step's device time (seconds) to (*step_seconds)[i].
  absl::Status RunProfiled(const float* const* inputs, float* const* outputs,
                           std::vector<double>* step_seconds) const;

 private:
  GpuModel() = default;
  absl::Status RunSteps(const float* const* inputs, float* const* outputs,
                        std::vector<double>* step_seconds) const;

  model::Plan plan_;
  std::vector<std::string> origins_;
  std::unique_ptr<GpuDevice> device_;
  int arena_ = 0, weights_ = 0;
  std::vector<int> inputs_, outputs_;  // device buffers
  std::vector<int64_t> input_bytes_, output_bytes_;
  std::vector<std::vector<uint64_t>> step_args_;  // device addresses of each step's arguments
  int64_t device_bytes_ = 0;
  mutable std::mutex mu_;
};

}  // namespace lathe::gpumodel

#endif  // LATHE_GPUMODEL_GPU_MODEL_H_
