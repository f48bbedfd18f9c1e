#include "gpumodel/device.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace lathe::gpumodel {

std::vector<ModuleText> GroupKernels(const std::vector<codegen::cuda::CudaSource>& kernels,
                                     int modules) {
  const int n = static_cast<int>(kernels.size());
  std::vector<ModuleText> units(std::max(1, std::min(modules, n)));
  // Largest first, each into the unit with the least text so far.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return kernels[a].kernels.size() > kernels[b].kernels.size();
  });
  std::vector<size_t> text(units.size(), 0);
  for (int i : order) {
    const size_t u = std::min_element(text.begin(), text.end()) - text.begin();
    units[u].kernels.push_back(i);
    text[u] += kernels[i].kernels.size();
  }
  for (ModuleText& u : units) {
    std::sort(u.kernels.begin(), u.kernels.end());
    u.source = codegen::cuda::CudaPrelude();
    for (int i : u.kernels) u.source += kernels[i].kernels;
  }
  return units;
}

absl::Status GpuDevice::LaunchSequence(const std::vector<int>& programs,
                                       const std::vector<std::vector<uint64_t>>& args,
                                       int* failed) {
  for (size_t i = 0; i < programs.size(); ++i) {
    if (absl::Status s = Launch(programs[i], args[i]); !s.ok()) {
      *failed = static_cast<int>(i);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status OnThreads(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(std::max(n, 0));
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back([&, i] { status[i] = fn(i); });
  if (n > 0) status[0] = fn(0);
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : status) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GpuDevice>> OpenGpuDevice(const ir::Target& target) {
  switch (target.kind) {
    case ir::TargetKind::kCudaEmu:
      return OpenEmulatedGpu(target.arch);
    case ir::TargetKind::kCuda:
      if (target.ordinal < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("target '", target.ToString(),
                         "' names an architecture, not a GPU to run on: use cuda, cuda:N, or ",
                         "cuda-emu:", target.arch, " for the emulator"));
      }
      return OpenCudaGpu(target.ordinal);
    case ir::TargetKind::kCpu:
      break;
  }
  return absl::InvalidArgumentError("target '" + target.ToString() + "' is not a GPU");
}

}  // namespace lathe::gpumodel
