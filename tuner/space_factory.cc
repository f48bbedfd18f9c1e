#include "tuner/space_factory.h"

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "ir/target.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "tuner/gpu_space.h"
#endif

namespace lathe::tuner {

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const ir::Target& target,
                                                               bool gpu_tf32) {
  if (target.kind == ir::TargetKind::kCpu) return SearchSpace::Create(workload, HostCpuTarget());
#ifdef LATHE_HAVE_CUDA_BACKEND
  // The emulator's space is the GPU space of the architecture it emulates.
  auto gpu = GpuTargetFor(target.Built());
  if (!gpu.ok()) return gpu.status();
  gpu->tf32 = gpu_tf32;
  return CreateGpuSearchSpace(workload, *gpu);
#else
  return absl::UnimplementedError("target '" + target.ToString() +
                                  "' needs the CUDA backend, which this build lacks");
#endif
}

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target,
                                                               bool gpu_tf32) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (!t.ok()) return t.status();
  return CreateSearchSpace(workload, *t, gpu_tf32);
}

absl::StatusOr<int> GpuOrdinalForTarget(const ir::Target& target) {
  if (target.kind != ir::TargetKind::kCuda) {
    return absl::InvalidArgumentError("target '" + target.ToString() + "' names no GPU");
  }
#ifdef LATHE_HAVE_CUDA_BACKEND
  namespace cuda = codegen::cuda;
  auto driver = cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto count = (*driver)->DeviceCount();
  if (!count.ok()) return count.status();
  if (!target.arch.empty()) {
    std::string present;
    for (int i = 0; i < *count; ++i) {
      auto info = (*driver)->Describe(i);
      if (!info.ok()) continue;
      if (info->arch() == target.arch) return i;
      absl::StrAppend(&present, present.empty() ? "" : ", ", "cuda:", i, " ", info->arch());
    }
    return absl::FailedPreconditionError(absl::StrCat("no GPU of architecture ", target.arch,
                                                      " on this machine (",
                                                      present.empty() ? "none" : present, ")"));
  }
  const int ordinal = target.ordinal;
  if (ordinal >= *count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU cuda:", ordinal, " on this machine (", *count, " GPUs)"));
  }
  return ordinal;
#else
  return absl::UnimplementedError("target '" + target.ToString() +
                                  "' needs the CUDA backend, which this build lacks");
#endif
}

absl::StatusOr<std::string> DeviceClassForTarget(const ir::Target& target) {
  if (target.kind == ir::TargetKind::kCpu) return codegen::HostDeviceClass();
  auto ordinal = GpuOrdinalForTarget(target);
  if (!ordinal.ok()) return ordinal.status();
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto driver = codegen::cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto info = (*driver)->Describe(*ordinal);
  if (!info.ok()) return info.status();
  return "cuda:" + info->device_class();
#else
  return absl::UnimplementedError("this build lacks the CUDA backend");
#endif
}

}  // namespace lathe::tuner
