// \file
// The GPU search space of a workload (CUDA targets): one sketch whose decisions choose, per
// stage, the mapping the GPU sketch rules of codegen/cuda/gpu_schedule.h apply —
//   reductions: multi-level tiling (block / vthread / thread / inner tiles of every spatial
//   axis, outer / inner reduce loops) with a local (register) accumulator, or with inputs
//   staged in shared memory and fetched cooperatively, or (for few outputs with a long
//   reduction) a cross-thread reduction through shared partial results; unrolling;
//   contractions (a matmul, a convolution as an implicit GEMM: codegen/cuda/contraction.h),
//   a second sketch: the GEMM kernel template with its tile shape chosen, fp32 FMAs or (when
//   the target allows TF32) m16n8k8 TF32 tensor-core MMAs;
//   other stages: fused, split and bound to blocks and threads, with an unrolled per-thread
//   inner factor ("vector width": the generated code stays scalar, the elements a thread owns
//   are consecutive and unrolled); paddings inlined or computed at root.
// Every candidate returned is lowered and generated as CUDA C, and checked against the
// target's limits (threads per block, static shared memory per block, an estimate of
// registers per thread and per block) before it is returned, so the search never proposes
// one that cannot launch.
//
// Thread-safety: a GpuSpace is immutable after creation; its methods may run concurrently.
#ifndef LATHE_TUNER_GPU_SPACE_H_
#define LATHE_TUNER_GPU_SPACE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "codegen/cuda/gpu_schedule.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::tuner {

// What the GPU space needs to know of the device. The defaults are an H100 (sm_90, 132 SMs)
// without opt-in shared memory.
struct GpuTarget {
  std::string arch = "sm_90";
  int sm_count = 132;
  codegen::cuda::GpuLimits limits;
  // The user allows TF32 tensor cores for fp32 contractions (`--gpu-math tf32`, as cuBLAS's
  // TF32 mode): the space then offers the mma.sync GEMM template, first. Off by default:
  // TF32 rounds the operands to 10 mantissa bits.
  bool tf32 = false;
};

// The math a user allows on a GPU: "fp32" (the default) or "tf32". InvalidArgument otherwise.
absl::StatusOr<bool> ParseGpuMath(const std::string& math);

// The GPU of a CUDA target: cuda:sm_XX names only an architecture (H100 limits otherwise);
// cuda and cuda:N describe that device through the driver. InvalidArgument for a target that
// is not cuda; FailedPrecondition (no driver) or OutOfRange (no such device) for a device that
// is not present.
absl::StatusOr<GpuTarget> GpuTargetFor(const ir::Target& target);

// Builds the GPU space of `workload`. Fails only for workloads without stages.
absl::StatusOr<std::unique_ptr<SearchSpace>> CreateGpuSearchSpace(const ir::Workload& workload,
                                                                  const GpuTarget& target);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_GPU_SPACE_H_
