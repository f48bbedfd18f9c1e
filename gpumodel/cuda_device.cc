// A GPU through the CUDA driver (dlopen'd): the kernels compiled by NVRTC to CUBINs for the
// device's architecture (one per job, compiled concurrently), each kernel's launch plan loaded
// as a CudaProgram, device memory from cuMemAlloc, launches on the default stream; a model's
// whole sequence of launches captured once as a CUDA graph and relaunched (not yet run on a
// GPU).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/nvrtc.h"
#include "gpumodel/device.h"

namespace lathe::gpumodel {
namespace {

namespace cuda = codegen::cuda;

class CudaGpu : public GpuDevice {
 public:
  CudaGpu(std::unique_ptr<cuda::CudaContext> ctx, cuda::DeviceInfo info, std::string driver)
      : ctx_(std::move(ctx)), info_(std::move(info)), driver_(std::move(driver)) {}

  std::string description() const override {
    return absl::StrCat(info_.name, " (", info_.arch(), "), cuda:", info_.ordinal, ", ",
                        info_.sm_count, " SMs, driver ", driver_);
  }
  std::string device_class() const override { return "cuda:" + info_.device_class(); }
  std::string arch() const override { return info_.arch(); }
  cuda::GpuLimits limits() const override { return info_.limits; }

  absl::Status Load(const std::vector<cuda::CudaSource>& kernels, int jobs) override {
    return BuildPrograms<std::string, cuda::CudaProgram>(
        kernels, jobs,
        [&](const ModuleText& unit) { return cuda::CompileToCubin(unit.source, info_.arch()); },
        [&](const std::string& cubin, int i) {
          return cuda::CudaProgram::Load(*ctx_, cubin, kernels[i].plan);
        },
        &programs_);
  }

  absl::StatusOr<int> Allocate(int64_t bytes, const std::string& name) override {
    absl::StatusOr<cuda::DeviceBuffer> b = cuda::DeviceBuffer::Allocate(*ctx_, bytes);
    if (!b.ok()) {
      return absl::Status(b.status().code(),
                          absl::StrCat("device memory for ", name, ": ", b.status().message()));
    }
    buffers_.push_back(std::make_unique<cuda::DeviceBuffer>(std::move(*b)));
    return static_cast<int>(buffers_.size()) - 1;
  }

  uint64_t Address(int buffer) const override { return buffers_[buffer]->ptr(); }

  absl::Status Upload(int buffer, const void* src, int64_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    return buffers_.at(buffer)->CopyFromHost(src, bytes);
  }

  absl::Status Download(int buffer, void* dst, int64_t bytes) override {
    if (bytes == 0) return Synchronize();
    return buffers_.at(buffer)->CopyToHost(dst, bytes);
  }

  absl::Status Launch(int program, const std::vector<uint64_t>& args) override {
    return programs_.at(program)->Launch(args);
  }

  absl::StatusOr<double> LaunchTimed(int program, const std::vector<uint64_t>& args) override {
    if (!timer_) {
      absl::StatusOr<std::unique_ptr<cuda::EventTimer>> t = cuda::EventTimer::Create(*ctx_);
      if (!t.ok()) return t.status();
      timer_ = std::move(*t);
    }
    if (absl::Status s = timer_->Start(); !s.ok()) return s;
    if (absl::Status s = Launch(program, args); !s.ok()) return s;
    return timer_->Stop();
  }

  absl::Status Synchronize() override { return ctx_->Synchronize(); }

  absl::Status LaunchSequence(const std::vector<int>& programs,
                              const std::vector<std::vector<uint64_t>>& args,
                              int* failed) override {
    if (!graph_ && !graph_failed_) {
      // Captured once, for the sequence of the first call (a model's is always the same).
      absl::StatusOr<std::unique_ptr<cuda::CudaGraph>> g =
          cuda::CudaGraph::Capture(*ctx_, [&](void* stream) -> absl::Status {
            for (size_t i = 0; i < programs.size(); ++i) {
              if (absl::Status s = programs_.at(programs[i])->Launch(args[i], stream); !s.ok()) {
                return s;
              }
            }
            return absl::OkStatus();
          });
      if (g.ok()) {
        graph_ = *std::move(g);
        graph_programs_ = programs;
      } else {
        graph_failed_ = true;  // single launches from now on
      }
    }
    if (graph_ && programs == graph_programs_) {
      *failed = -1;
      return graph_->Launch();
    }
    return GpuDevice::LaunchSequence(programs, args, failed);
  }

 private:
  // Declared first, destroyed last: the programs and buffers free into the context.
  std::unique_ptr<cuda::CudaContext> ctx_;
  cuda::DeviceInfo info_;
  std::string driver_;
  std::vector<std::unique_ptr<cuda::CudaProgram>> programs_;
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> buffers_;
  std::unique_ptr<cuda::EventTimer> timer_;
  std::unique_ptr<cuda::CudaGraph> graph_;  // destroyed before the programs
  std::vector<int> graph_programs_;
  bool graph_failed_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GpuDevice>> OpenCudaGpu(int ordinal) {
  if (!cuda::HaveNvrtc()) {
    return absl::FailedPreconditionError(
        "this build has no NVRTC to compile the model's kernels for a GPU");
  }
  absl::StatusOr<cuda::CudaDriver*> driver = cuda::CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  absl::StatusOr<int> count = (*driver)->DeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal < 0 || ordinal >= *count) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU cuda:", ordinal, " on this machine (", *count, " GPUs)"));
  }
  absl::StatusOr<cuda::DeviceInfo> info = (*driver)->Describe(ordinal);
  if (!info.ok()) return info.status();
  absl::StatusOr<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::Create(ordinal);
  if (!ctx.ok()) return ctx.status();
  return std::unique_ptr<GpuDevice>(
      new CudaGpu(*std::move(ctx), *std::move(info), (*driver)->Version()));
}

}  // namespace lathe::gpumodel
