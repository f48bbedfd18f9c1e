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

bool IsCudaTarget(const std::string& target) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  return t.ok() && t->kind == ir::TargetKind::kCuda;
}

bool IsEmulatedGpuTarget(const std::string& target) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  return t.ok() && t->emulated();
}

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target,
                                                               bool gpu_tf32) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (!t.ok()) return t.status();
  if (t->kind == ir::TargetKind::kCpu) return SearchSpace::Create(workload, HostCpuTarget());
  // The emulator's space is the GPU space of the architecture it emulates.
  if (t->emulated()) return CreateSearchSpace(workload, t->Built().ToString(), gpu_tf32);
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto gpu = GpuTargetFor(target);
  if (!gpu.ok()) return gpu.status();
  gpu->tf32 = gpu_tf32;
  return CreateGpuSearchSpace(workload, *gpu);
#else
  return absl::UnimplementedError("target '" + target +
                                  "' needs the CUDA backend, which this build lacks");
#endif
}

absl::StatusOr<int> GpuOrdinalForTarget(const std::string& target) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (!t.ok()) return t.status();
  if (t->kind != ir::TargetKind::kCuda) {
    return absl::InvalidArgumentError("target '" + target + "' names no GPU");
  }
#ifdef LATHE_HAVE_CUDA_BACKEND
  namespace cuda = codegen::cuda;
  auto driver = cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto count = (*driver)->DeviceCount();
  if (!count.ok()) return count.status();
  if (!t->arch.empty()) {
    std::string present;
    for (int i = 0; i < *count; ++i) {
      auto info = (*driver)->Describe(i);
      if (!info.ok()) continue;
      if (info->arch() == t->arch) return i;
      absl::StrAppend(&present, present.empty() ? "" : ", ", "cuda:", i, " ", info->arch());
    }
    return absl::FailedPreconditionError(absl::StrCat("no GPU of architecture ", t->arch,
                                                      " on this machine (",
                                                      present.empty() ? "none" : present, ")"));
  }
  const int ordinal = t->ordinal;
  if (ordinal >= *count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU cuda:", ordinal, " on this machine (", *count, " GPUs)"));
  }
  return ordinal;
#else
  return absl::UnimplementedError("target '" + target +
                                  "' needs the CUDA backend, which this build lacks");
#endif
}

absl::StatusOr<std::string> DeviceClassForTarget(const std::string& target) {
  absl::StatusOr<ir::Target> t = ir::ParseTarget(target);
  if (!t.ok()) return t.status();
  if (t->kind == ir::TargetKind::kCpu) return codegen::HostDeviceClass();
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
