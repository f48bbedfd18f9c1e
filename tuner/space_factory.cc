#include "tuner/space_factory.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "tuner/gpu_space.h"
#endif

namespace lathe::tuner {

bool IsCudaTarget(const std::string& target) {
  return target == "cuda" || target.rfind("cuda:", 0) == 0;
}

absl::StatusOr<std::unique_ptr<SearchSpace>> CreateSearchSpace(const ir::Workload& workload,
                                                               const std::string& target) {
  if (target == "cpu") return SearchSpace::Create(workload, HostCpuTarget());
  if (!IsCudaTarget(target)) {
    return absl::InvalidArgumentError("unknown target '" + target +
                                      "' (expected cpu, cuda, cuda:N or cuda:sm_XX)");
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

}  // namespace lathe::tuner
