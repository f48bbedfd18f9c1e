// The emulated GPU: kernels compiled by the host C++ compiler (and, when asked, first by
// NVRTC for the architecture, their ptxas figures checked against its limits, as a GPU would
// get them), in a few modules (one per job, compiled concurrently: GroupKernels); device memory as
// guarded emulated buffers; launches run on the calling thread. After every launch the guard bytes
// of every buffer are checked, so a kernel that writes past a buffer of the model is named at the
// step that did it.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/buffer.h"
#include "gpuemu/host_compiler.h"
#include "gpuemu/program.h"
#include "gpumodel/device.h"

namespace lathe::gpumodel {
namespace {

namespace cuda = codegen::cuda;

class EmulatedGpu : public GpuDevice {
 public:
  EmulatedGpu(std::string arch, cuda::SmResources sm, bool nvrtc)
      : arch_(std::move(arch)), sm_(sm), nvrtc_(nvrtc) {}

  std::string description() const override {
    return absl::StrCat("emulated ", arch_, " (GPU emulator on this CPU: checks the kernels, ",
                        "its timings are not GPU performance)");
  }
  std::string device_class() const override { return "cuda-emu:" + arch_; }
  std::string arch() const override { return arch_; }
  cuda::GpuLimits limits() const override { return sm_.limits; }

  absl::Status Load(const std::vector<cuda::CudaSource>& kernels, int jobs) override {
    using Module = std::shared_ptr<gpuemu::EmuModule>;
    return BuildPrograms<Module, gpuemu::EmuProgram>(
        kernels, jobs,
        [&](const ModuleText& unit) -> absl::StatusOr<Module> {
          // What a GPU would be given first: NVRTC compiles the same text for the
          // architecture, and ptxas's figures must fit it.
          if (nvrtc_) {
            absl::StatusOr<cuda::CompiledCubin> cubin =
                cuda::CompileToCubinWithResources(unit.source, arch_);
            if (!cubin.ok()) return cubin.status();
            for (int i : unit.kernels) {
              if (cubin->kernels.empty()) break;  // an NVRTC without a ptxas report
              absl::Status fits = cuda::CheckKernelResources(kernels[i].plan, cubin->kernels, sm_);
              if (!fits.ok()) return fits;
            }
          }
          std::vector<gpuemu::KernelSignature> signatures;
          for (int i : unit.kernels) {
            for (const gpuemu::KernelSignature& s : gpuemu::Signatures(kernels[i].plan)) {
              signatures.push_back(s);
            }
          }
          return gpuemu::EmuModule::Build(unit.source, signatures);
        },
        [&](const Module& module, int i) {
          return gpuemu::EmuProgram::FromModule(kernels[i].plan, module);
        },
        &programs_);
  }

  absl::StatusOr<int> Allocate(int64_t bytes, const std::string& name) override {
    absl::StatusOr<std::unique_ptr<gpuemu::EmuBuffer>> b = gpuemu::EmuBuffer::Allocate(bytes, name);
    if (!b.ok()) return b.status();
    buffers_.push_back(std::move(*b));
    checked_.push_back(buffers_.back().get());
    return static_cast<int>(buffers_.size()) - 1;
  }

  uint64_t Address(int buffer) const override {
    return reinterpret_cast<uint64_t>(buffers_[buffer]->data());
  }

  absl::Status Upload(int buffer, const void* src, int64_t bytes) override {
    if (absl::Status s = CheckCopy(buffer, bytes); !s.ok()) return s;
    std::memcpy(buffers_[buffer]->data(), src, bytes);
    return absl::OkStatus();
  }

  absl::Status Download(int buffer, void* dst, int64_t bytes) override {
    if (absl::Status s = CheckCopy(buffer, bytes); !s.ok()) return s;
    std::memcpy(dst, buffers_[buffer]->data(), bytes);
    return absl::OkStatus();
  }

  absl::Status Launch(int program, const std::vector<uint64_t>& args) override {
    std::vector<float*> ptrs;
    for (uint64_t a : args) ptrs.push_back(reinterpret_cast<float*>(a));
    return programs_.at(program)->RunAt(ptrs, checked_);
  }

  absl::StatusOr<double> LaunchTimed(int program, const std::vector<uint64_t>& args) override {
    const auto t0 = std::chrono::steady_clock::now();
    if (absl::Status s = Launch(program, args); !s.ok()) return s;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  absl::Status CheckCopy(int buffer, int64_t bytes) const {
    if (buffer < 0 || buffer >= static_cast<int>(buffers_.size()) ||
        bytes > buffers_[buffer]->bytes()) {
      return absl::InternalError(absl::StrCat("copy of ", bytes, " bytes to or from buffer ",
                                              buffer, ", which is not that large"));
    }
    return absl::OkStatus();
  }

  std::string arch_;
  cuda::SmResources sm_;
  bool nvrtc_;
  std::vector<std::unique_ptr<gpuemu::EmuProgram>> programs_;
  std::vector<std::unique_ptr<gpuemu::EmuBuffer>> buffers_;
  std::vector<gpuemu::EmuBuffer*> checked_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuDevice>> OpenEmulatedGpu(const std::string& arch,
                                                           bool check_with_nvrtc) {
  absl::StatusOr<cuda::SmResources> sm = cuda::SmResourcesFor(arch);
  if (!sm.ok()) return sm.status();
  absl::StatusOr<std::string> cxx = gpuemu::FindHostCompiler();
  if (!cxx.ok()) return cxx.status();
  if (check_with_nvrtc && !cuda::HaveNvrtc()) {
    return absl::FailedPreconditionError("this build has no NVRTC to check the kernels with");
  }
  return std::unique_ptr<GpuDevice>(new EmulatedGpu(arch, *sm, check_with_nvrtc));
}

}  // namespace lathe::gpumodel
