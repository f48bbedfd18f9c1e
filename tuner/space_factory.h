// \file
// One entry point for the tuner and the daemon to build the search space of a workload for a
// target (ir::Target, parsed once where the user or a message names it): cpu gets the CPU space
// (tuner/space.h) for this machine's CPU, cuda, cuda:N and cuda:sm_XX the GPU space
// (tuner/gpu_space.h), cuda-emu:sm_XX the GPU space of the architecture it emulates.
#ifndef LATHE_TUNER_SPACE_FACTORY_H_
#define LATHE_TUNER_SPACE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::tuner {

// The search space of `workload` for `target` (cuda-emu:sm_XX: the GPU space of cuda:sm_XX).
// Unimplemented for a cuda target in a build without the CUDA backend; for cuda and cuda:N,
// FailedPrecondition without a CUDA driver and OutOfRange without that device (cuda:sm_XX
// needs neither: it builds for an architecture with H100 limits).
// `gpu_tf32`: a GPU space may use TF32 tensor cores (`--gpu-math tf32`); ignored for cpu.
absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const ir::Target& target,
                                                               bool gpu_tf32 = false);
// The same for a target's text, parsed here (InvalidArgument for an unknown one): for entry
// points that take the text as the user wrote it (tests, tools).
absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target,
                                                               bool gpu_tf32 = false);

// For tuning on this machine (`lathe tune --target T`): the ordinal of the GPU that `target`
// measures on. "cuda" is GPU 0, "cuda:N" GPU N, "cuda:sm_XX" the first GPU of that
// architecture. FailedPrecondition when there is no CUDA driver or no such GPU (naming the
// GPUs there are), InvalidArgument for a target that names no GPU.
absl::StatusOr<int> GpuOrdinalForTarget(const ir::Target& target);

// The device class that records measured here for `target` are keyed by: for "cpu",
// codegen::HostDeviceClass(); for a GPU target, "cuda:<name> (sm_XX)" of the GPU that
// GpuOrdinalForTarget picks, as lathe-worker registers it. Fails as GpuOrdinalForTarget.
absl::StatusOr<std::string> DeviceClassForTarget(const ir::Target& target);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_SPACE_FACTORY_H_
