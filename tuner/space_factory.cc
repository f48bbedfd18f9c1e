#include "tuner/space_factory.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codegen/host.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "tuner/gpu_space.h"
#endif

namespace lathe::tuner {

bool IsCudaTarget(const std::string& target) {
  return target == "cuda" || target.rfind("cuda:", 0) == 0;
}

bool IsEmulatedGpuTarget(const std::string& target) { return target.rfind("cuda-emu:", 0) == 0; }

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target) {
  if (target == "cpu") return SearchSpace::Create(workload, HostCpuTarget());
  if (IsEmulatedGpuTarget(target)) {
    std::string arch = target.substr(std::string("cuda-emu:").size());
    if (arch.rfind("sm_", 0) != 0) {
      return absl::InvalidArgumentError("target '" + target +
                                        "' names no architecture (expected cuda-emu:sm_XX)");
    }
    return CreateSearchSpace(workload, "cuda:" + arch);
  }
  if (!IsCudaTarget(target)) {
    return absl::InvalidArgumentError("unknown target '" + target +
                                      "' (expected cpu, cuda, cuda:N, cuda:sm_XX or "
                                      "cuda-emu:sm_XX)");
  }
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto gpu = GpuTargetFor(target);
  if (!gpu.ok()) return gpu.status();
  return CreateGpuSearchSpace(workload, *gpu);
#else
  return absl::UnimplementedError("target '" + target +
                                  "' needs the CUDA backend, which this build lacks");
#endif
}

absl::StatusOr<int> GpuOrdinalForTarget(const std::string& target) {
  if (!IsCudaTarget(target)) {
    return absl::InvalidArgumentError("target '" + target + "' names no GPU");
  }
#ifdef LATHE_HAVE_CUDA_BACKEND
  namespace cuda = codegen::cuda;
  auto driver = cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  auto count = (*driver)->DeviceCount();
  if (!count.ok()) return count.status();
  auto arch = cuda::ArchOfTarget(target);
  if (arch.ok()) {
    std::string present;
    for (int i = 0; i < *count; ++i) {
      auto info = (*driver)->Describe(i);
      if (!info.ok()) continue;
      if (info->arch() == *arch) return i;
      absl::StrAppend(&present, present.empty() ? "" : ", ", "cuda:", i, " ", info->arch());
    }
    return absl::FailedPreconditionError(absl::StrCat("no GPU of architecture ", *arch,
                                                      " on this machine (",
                                                      present.empty() ? "none" : present, ")"));
  }
  int ordinal = 0;
  if (target != "cuda" && (!absl::SimpleAtoi(target.substr(5), &ordinal) || ordinal < 0)) {
    return absl::InvalidArgumentError("target '" + target +
                                      "' (expected cuda, cuda:N or cuda:sm_XX)");
  }
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
  if (target == "cpu") return codegen::HostDeviceClass();
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
