#include "gpumodel/gpu_model.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "ir/workload.h"

namespace lathe::gpumodel {
namespace {

namespace cuda = codegen::cuda;

absl::StatusOr<cuda::CudaSource> Generate(const ir::Schedule& sch, const std::string& name,
                                          const cuda::GpuLimits& limits) {
  absl::StatusOr<cuda::CudaSource> src = cuda::BuildCudaSource(sch, name);
  if (!src.ok()) return src.status();
  if (absl::Status s = cuda::CheckLaunchLimits(src->plan, limits); !s.ok()) return s;
  return src;
}

// The ONNX nodes the steps running kernel `k` compute.
std::vector<std::string> NodesOf(const model::Plan& plan, int k) {
  std::vector<std::string> nodes;
  for (const model::PlanStep& s : plan.steps) {
    if (s.kernel == k) nodes.insert(nodes.end(), s.nodes.begin(), s.nodes.end());
  }
  return nodes;
}

int64_t Bytes(const std::vector<int64_t>& shape) {
  int64_t n = 4;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

absl::StatusOr<std::vector<GpuKernel>> GenerateKernels(const model::Plan& plan,
                                                       const model::ScheduleSource& schedules,
                                                       const cuda::GpuLimits& limits) {
  const int n = static_cast<int>(plan.kernels.size());
  std::vector<GpuKernel> out(n);
  std::atomic<int> next{0};
  auto work = [&](int) -> absl::Status {
    for (int i = next++; i < n; i = next++) {
      const std::string& spec = plan.kernels[i];
      absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
      if (!w.ok()) return absl::InternalError(absl::StrCat(spec, ": ", w.status().message()));
      const std::string name = absl::StrCat("lathe_k", i);
      std::string origin;
      absl::StatusOr<ir::Schedule> s = schedules.Get(*w, &origin);
      absl::StatusOr<cuda::CudaSource> src = s.ok() ? Generate(*s, name, limits) : s.status();
      if (!src.ok()) {
        // The picked schedule has no CUDA (or too large a launch): the untuned mapping.
        absl::StatusOr<ir::Schedule> d = cuda::DefaultGpuSchedule(*w);
        absl::StatusOr<cuda::CudaSource> dsrc = d.ok() ? Generate(*d, name, limits) : d.status();
        if (!dsrc.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("op '", w->spec.op, "' has no GPU kernel here: ", spec, " (ONNX nodes ",
                           absl::StrJoin(NodesOf(plan, i), ", "), "): ", dsrc.status().message()));
        }
        origin = absl::StrCat("gpu default (", origin, ": ", src.status().message(), ")");
        src = std::move(dsrc);
      }
      out[i].source = *std::move(src);
      out[i].origin = std::move(origin);
    }
    return absl::OkStatus();
  };
  if (absl::Status s = OnThreads(2, work); !s.ok()) return s;
  return out;
}

absl::StatusOr<std::unique_ptr<GpuModel>> GpuModel::Create(model::Plan plan,
                                                           const model::ScheduleSource& schedules,
                                                           std::unique_ptr<GpuDevice> device,
                                                           int jobs) {
  std::unique_ptr<GpuModel> m(new GpuModel());
  m->plan_ = std::move(plan);
  m->device_ = std::move(device);
  const model::Plan& p = m->plan_;
  GpuDevice& d = *m->device_;
  absl::StatusOr<std::vector<GpuKernel>> kernels = GenerateKernels(p, schedules, d.limits());
  if (!kernels.ok()) return kernels.status();
  std::vector<cuda::CudaSource> sources;
  for (GpuKernel& k : *kernels) {
    sources.push_back(std::move(k.source));
    m->origins_.push_back(std::move(k.origin));
  }
  if (absl::Status s = d.Load(sources, jobs); !s.ok()) return s;

  auto allocate = [&](int64_t bytes, const std::string& name, int* index) -> absl::Status {
    absl::StatusOr<int> b = d.Allocate(bytes, name);
    if (!b.ok()) return b.status();
    *index = *b;
    m->device_bytes_ += bytes;
    return absl::OkStatus();
  };
  if (absl::Status s = allocate(p.arena_bytes, "arena", &m->arena_); !s.ok()) return s;
  const int64_t weight_bytes = static_cast<int64_t>(p.weights.size());
  if (absl::Status s = allocate(weight_bytes, "weights", &m->weights_); !s.ok()) return s;
  if (absl::Status s = d.Upload(m->weights_, p.weights.data(), weight_bytes); !s.ok()) return s;
  for (const model::IoInfo& io : p.inputs) {
    m->input_bytes_.push_back(Bytes(io.shape));
    m->inputs_.push_back(0);
    absl::Status s = allocate(Bytes(io.shape), "input '" + io.name + "'", &m->inputs_.back());
    if (!s.ok()) return s;
  }
  for (const model::IoInfo& io : p.outputs) {
    m->output_bytes_.push_back(Bytes(io.shape));
    m->outputs_.push_back(0);
    absl::Status s = allocate(Bytes(io.shape), "output '" + io.name + "'", &m->outputs_.back());
    if (!s.ok()) return s;
  }
  for (const model::PlanStep& step : p.steps) {
    std::vector<uint64_t> args;
    for (const model::BufferRef& r : step.args) {
      int buffer = m->arena_;
      if (r.kind == model::BufferRef::kWeights) buffer = m->weights_;
      if (r.kind == model::BufferRef::kInput) buffer = m->inputs_.at(r.index);
      if (r.kind == model::BufferRef::kOutput) buffer = m->outputs_.at(r.index);
      args.push_back(d.Address(buffer) + static_cast<uint64_t>(r.offset));
    }
    m->step_args_.push_back(std::move(args));
  }
  return m;
}

absl::Status GpuModel::Run(const float* const* inputs, float* const* outputs) const {
  return RunSteps(inputs, outputs, nullptr);
}

absl::Status GpuModel::RunProfiled(const float* const* inputs, float* const* outputs,
                                   std::vector<double>* step_seconds) const {
  step_seconds->resize(plan_.steps.size(), 0.0);
  return RunSteps(inputs, outputs, step_seconds);
}

absl::Status GpuModel::RunSteps(const float* const* inputs, float* const* outputs,
                                std::vector<double>* step_seconds) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    if (absl::Status s = device_->Upload(inputs_[i], inputs[i], input_bytes_[i]); !s.ok()) {
      return s;
    }
  }
  auto named = [&](size_t i, const absl::Status& s) {
    const int k = plan_.steps[i].kernel;
    return absl::Status(
        s.code(), absl::StrCat("step ", i, " (", plan_.kernels[k], ", ONNX nodes ",
                               absl::StrJoin(plan_.steps[i].nodes, ", "), "): ", s.message()));
  };
  if (step_seconds == nullptr) {
    // Every step in one sequence (a CUDA graph on a GPU).
    std::vector<int> programs;
    for (const model::PlanStep& step : plan_.steps) programs.push_back(step.kernel);
    int failed = -1;
    if (absl::Status s = device_->LaunchSequence(programs, step_args_, &failed); !s.ok()) {
      if (failed >= 0) return named(static_cast<size_t>(failed), s);
      return absl::Status(s.code(), absl::StrCat("the model's launches: ", s.message()));
    }
  }
  // Profiled: step by step, each timed.
  for (size_t i = 0; step_seconds != nullptr && i < plan_.steps.size(); ++i) {
    absl::StatusOr<double> ms = device_->LaunchTimed(plan_.steps[i].kernel, step_args_[i]);
    if (!ms.ok()) return named(i, ms.status());
    (*step_seconds)[i] += *ms * 1e-3;
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (absl::Status s = device_->Download(outputs_[i], outputs[i], output_bytes_[i]); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace lathe::gpumodel
