// \file
// One entry point for the tuner and the daemon to build the search space of a workload for a
// target string: "cpu" gets the CPU space (tuner/space.h) for this machine's CPU, "cuda",
// "cuda:N" and "cuda:sm_XX" the GPU space (tuner/gpu_space.h).
#ifndef LATHE_TUNER_SPACE_FACTORY_H_
#define LATHE_TUNER_SPACE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::tuner {

// True for "cuda", "cuda:N" and "cuda:sm_XX" (by prefix; the rest is checked on creation).
bool IsCudaTarget(const std::string& target);

// True for "cuda-emu:..." (by prefix): the emulated GPU of an architecture, "cuda-emu:sm_XX",
// which is both a target and the device class its records are keyed by (lathe's CUDA run on
// a CPU by the GPU emulator; never mixed with, or counted as, GPU performance).
bool IsEmulatedGpuTarget(const std::string& target);

// The search space of `workload` for `target` ("cuda-emu:sm_XX": the GPU space of "cuda:sm_XX").
// InvalidArgument for an unknown target;
// Unimplemented for a cuda target in a build without the CUDA backend; for "cuda" and
// "cuda:N", FailedPrecondition without a CUDA driver and OutOfRange without that device
// ("cuda:sm_XX" needs neither: it builds for an architecture with H100 limits).
// `gpu_tf32`: a GPU space may use TF32 tensor cores (`--gpu-math tf32`); ignored for "cpu".
absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target,
                                                               bool gpu_tf32 = false);

// For tuning on this machine (`lathe tune --target T`): the ordinal of the GPU that `target`
// measures on. "cuda" is GPU 0, "cuda:N" GPU N, "cuda:sm_XX" the first GPU of that
// architecture. FailedPrecondition when there is no CUDA driver or no such GPU (naming the
// GPUs there are), InvalidArgument for a target that names no GPU.
absl::StatusOr<int> GpuOrdinalForTarget(const std::string& target);

// The device class that records measured here for `target` are keyed by: for "cpu",
// codegen::HostDeviceClass(); for a GPU target, "cuda:<name> (sm_XX)" of the GPU that
// GpuOrdinalForTarget picks, as lathe-worker registers it. Fails as GpuOrdinalForTarget.
absl::StatusOr<std::string> DeviceClassForTarget(const std::string& target);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_SPACE_FACTORY_H_
