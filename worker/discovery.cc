#include "worker/discovery.h"

#include <cctype>
#include <cstdlib>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/host.h"
#include "ir/target.h"
#include "measure/measure_child.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/nvrtc.h"
#include "gpuemu/host_compiler.h"
#endif

namespace lathe::worker {

namespace {

std::string KiB(int64_t bytes) { return absl::StrCat(bytes / 1024, " KiB"); }

}  // namespace

absl::StatusOr<DeviceSelector> ParseDeviceSelector(const std::string& text) {
  // A worker measures on a device it has: a GPU by ordinal, not by architecture.
  absl::StatusOr<ir::Target> t = ir::ParseTarget(text);
  if (t.ok()) {
    switch (t->kind) {
      case ir::TargetKind::kCpu:
        return DeviceSelector{"cpu", 0};
      case ir::TargetKind::kCuda:
        if (t->ordinal >= 0) return DeviceSelector{"cuda", t->ordinal, ""};
        break;
      case ir::TargetKind::kCudaEmu:
        return DeviceSelector{"cuda-emu", 0, t->arch};
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad device '", text,
                   "': expected cpu, cuda, cuda:N or cuda-emu:sm_XX (e.g. cuda-emu:sm_90)"));
}

bool IsEmulatedDeviceClass(const std::string& device_class) {
  absl::StatusOr<ir::TargetKind> kind = ir::DeviceClassKind(device_class);
  return kind.ok() && *kind == ir::TargetKind::kCudaEmu;
}

Device DescribeEmulatedGpu(const std::string& arch) {
  Device d;
  d.info.set_device_class("cuda-emu:" + arch);
  d.info.set_kind("cuda-emu");
  d.info.set_index(0);
  d.info.set_name("emulated " + arch);
  d.info.set_cores(codegen::HostCpu().cores);
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto cxx = gpuemu::FindHostCompiler();
  d.details = absl::StrCat("GPU emulator for ", arch, " (NVRTC ", codegen::cuda::NvrtcVersion(),
                           ", host compiler ", cxx.ok() ? *cxx : "none",
                           "): checks candidates, its timings are not GPU performance");
  if (!codegen::cuda::HaveNvrtc()) {
    d.why_not = "this build has no NVRTC to check the CUDA with";
  } else if (!cxx.ok()) {
    d.why_not = std::string(cxx.status().message());
  } else {
    d.can_measure = true;
  }
#else
  d.details = "GPU emulator for " + arch;
  d.why_not = "this lathe-worker was built without the CUDA backend";
#endif
  return d;
}

Device DescribeCpu() {
  const codegen::CpuInfo& cpu = codegen::HostCpu();
  Device d;
  d.info.set_device_class(codegen::HostDeviceClass());
  d.info.set_kind("cpu");
  d.info.set_index(0);
  d.info.set_name(cpu.model);
  d.info.set_cores(cpu.cores);
  d.info.set_peak_gflops(measure::HostPeakGflops());
  d.details = absl::StrCat(cpu.model, ", ", cpu.isa, " (", cpu.vector_bits, "-bit), ", cpu.cores,
                           " cores, L1d ", KiB(cpu.l1d_bytes), ", L2 ", KiB(cpu.l2_bytes), ", L3 ",
                           KiB(cpu.l3_bytes), ", peak ~", static_cast<int>(d.info.peak_gflops()),
                           " GFLOP/s");
  d.can_measure = true;
  return d;
}

std::vector<Device> DiscoverGpus() {
  std::vector<Device> out;
#ifdef LATHE_HAVE_CUDA_BACKEND
  auto driver = codegen::cuda::CudaDriver::Get();
  if (!driver.ok()) return out;
  auto count = (*driver)->DeviceCount();
  if (!count.ok()) return out;
  for (int i = 0; i < *count; ++i) {
    auto info = (*driver)->Describe(i);
    if (!info.ok()) continue;
    Device d;
    d.info.set_device_class("cuda:" + info->device_class());
    d.info.set_kind("cuda");
    d.info.set_index(i);
    d.info.set_name(info->name);
    d.info.set_cores(info->sm_count);
    d.info.set_memory_bytes(info->total_memory);
    d.details = absl::StrCat(info->name, ", ", info->arch(), ", ", info->sm_count, " SMs, ",
                             info->total_memory >> 20, " MiB, driver ", (*driver)->Version());
    // Listed only when the driver loaded and described the device: measurable.
    d.can_measure = true;
    out.push_back(std::move(d));
  }
#endif
  return out;
}

measure::MeasurerOptions MeasurerOptionsFor(const Device& device, measure::MeasurerOptions base) {
  if (device.info.kind() == "cuda") base.gpu_ordinal = static_cast<int>(device.info.index());
  if (device.info.kind() == "cuda-emu") {
    base.emulated_arch = device.info.device_class().substr(std::string("cuda-emu:").size());
  }
  return base;
}

absl::StatusOr<std::vector<Device>> SelectDevices(const std::vector<std::string>& selectors) {
  std::vector<DeviceSelector> wanted;
  for (const std::string& s : selectors) {
    auto sel = ParseDeviceSelector(s);
    if (!sel.ok()) return sel.status();
    wanted.push_back(*sel);
  }
  if (wanted.empty()) wanted.push_back({"cpu", 0});

  std::vector<Device> gpus;
  bool gpus_probed = false;
  std::set<std::tuple<std::string, int, std::string>> seen;
  std::vector<Device> out;
  for (const DeviceSelector& sel : wanted) {
    if (!seen.insert({sel.kind, sel.index, sel.arch}).second) continue;
    if (sel.kind == "cpu") {
      out.push_back(DescribeCpu());
      continue;
    }
    if (sel.kind == "cuda-emu") {
      out.push_back(DescribeEmulatedGpu(sel.arch));
      continue;
    }
    if (!gpus_probed) {
      gpus = DiscoverGpus();
      gpus_probed = true;
    }
    if (sel.index >= static_cast<int>(gpus.size())) {
#ifdef LATHE_HAVE_CUDA_BACKEND
      if (gpus.empty()) {
        return absl::NotFoundError(
            absl::StrCat("no GPU cuda:", sel.index,
                         ": this machine has no NVIDIA GPU (or no usable CUDA driver)"));
      }
      return absl::NotFoundError(absl::StrCat("no GPU cuda:", sel.index, ": this machine has ",
                                              gpus.size(), " (cuda:0..cuda:", gpus.size() - 1,
                                              ")"));
#else
      return absl::NotFoundError(absl::StrCat(
          "no GPU cuda:", sel.index, ": this lathe-worker was built without the CUDA backend"));
#endif
    }
    out.push_back(gpus[sel.index]);
  }
  return out;
}

}  // namespace lathe::worker
