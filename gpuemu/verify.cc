#include "gpuemu/verify.h"

#include <cctype>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/nvrtc.h"
#include "ir/reference.h"

namespace lathe::gpuemu {

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Runs `program` on copies of `data`'s inputs (the output NaN first, so an element the program
// does not write fails the check) and compares; fills the rest of `r`.
void Emulate(VerifyReport& r, std::unique_ptr<EmuProgram> program, const ReferenceData& data,
             double tolerance) {
  auto fail = [&](Outcome o, absl::string_view msg) {
    r.outcome = o;
    r.message = std::string(msg);
    r.program.reset();
    r.buffers.clear();
  };
  r.program = std::move(program);
  r.host_compile_ms = r.program->compile_ms();
  std::vector<EmuBuffer*> ptrs;
  const std::vector<std::string>& names = r.plan.args;
  for (size_t i = 0; i < data.args.size(); ++i) {
    const std::vector<float>& a = data.args[i];
    auto b = EmuBuffer::Allocate(static_cast<int64_t>(a.size() * sizeof(float)),
                                 i < names.size() ? names[i] : absl::StrCat("arg", i));
    if (!b.ok()) return fail(Outcome::kRuntimeError, b.status().message());
    if (i + 1 < data.args.size()) {
      std::memcpy((*b)->data(), a.data(), a.size() * sizeof(float));
    } else {
      (*b)->Fill32(0x7fc00000u);
    }
    ptrs.push_back(b->get());
    r.buffers.push_back(std::move(*b));
  }
  auto t0 = Clock::now();
  absl::Status ran = r.program->Run(ptrs);
  r.run_ms = Ms(t0);
  if (!ran.ok()) return fail(Outcome::kRuntimeError, ran.message());
  const EmuBuffer& out = *r.buffers.back();
  std::span<const float> got(out.data(), static_cast<size_t>(out.bytes() / 4));
  absl::Status same =
      ir::CheckOutput(got, data.reference, data.workload.output()->shape, tolerance, &r.compare);
  if (!same.ok()) return fail(Outcome::kWrongAnswer, same.message());
}

// `src` with every `name[` in its kernels (the identifier alone) moved `offset` elements on.
codegen::cuda::CudaSource ShiftReads(codegen::cuda::CudaSource src, const std::string& name,
                                     int64_t offset) {
  std::string& k = src.kernels;
  const std::string from = name + "[";
  const std::string to = absl::StrCat(name, "[", offset, " + ");
  for (size_t at = k.find(from); at != std::string::npos; at = k.find(from, at + 1)) {
    if (at > 0 && (std::isalnum(static_cast<unsigned char>(k[at - 1])) || k[at - 1] == '_')) {
      continue;
    }
    k.replace(at, from.size(), to);
    at += to.size() - 1;
  }
  src.source = src.prelude + src.kernels;
  return src;
}

}  // namespace

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kInvalidSchedule:
      return "invalid schedule";
    case Outcome::kCompileError:
      return "compile error";
    case Outcome::kOverLimits:
      return "over limits";
    case Outcome::kRuntimeError:
      return "runtime error";
    case Outcome::kWrongAnswer:
      return "wrong answer";
    case Outcome::kUnavailable:
      return "unavailable";
  }
  return "unknown";
}

absl::StatusOr<ReferenceData> MakeReferenceData(const ir::Workload& w, uint64_t seed) {
  ReferenceData d;
  d.workload = w;
  d.args = ir::AllocateArgs(w);
  ir::FillRandomInputs(d.args, seed);
  if (auto st = ir::ComputeReference(w, d.args); !st.ok()) return st;
  d.reference = d.args.back();
  return d;
}

VerifyReport VerifySchedule(const ir::Schedule& sch, const ReferenceData& data,
                            const VerifyOptions& options) {
  namespace cuda = codegen::cuda;
  VerifyReport r;
  auto fail = [&](Outcome o, absl::string_view msg) {
    r.outcome = o;
    r.message = std::string(msg);
    r.program.reset();
    r.buffers.clear();
    return std::move(r);
  };
  auto sm = cuda::SmResourcesFor(options.arch);
  if (!sm.ok()) return fail(Outcome::kInvalidSchedule, sm.status().message());
  auto src = cuda::BuildCudaSource(sch, "candidate");
  if (!src.ok()) return fail(Outcome::kInvalidSchedule, src.status().message());
  r.plan = src->plan;
  if (auto st = cuda::CheckLaunchLimits(src->plan, sm->limits); !st.ok()) {
    return fail(Outcome::kInvalidSchedule, st.message());
  }
  if (!options.skip_nvrtc) {
    if (!cuda::HaveNvrtc()) {
      return fail(Outcome::kUnavailable, "this build has no NVRTC to check the CUDA with");
    }
    auto cubin = cuda::CompileToCubinWithResources(src->source, options.arch);
    if (!cubin.ok()) return fail(Outcome::kCompileError, cubin.status().message());
    r.nvrtc_ms = cubin->compile_ms;
    r.resources = cubin->kernels;
    if (r.resources.empty()) {
      // Some NVRTC builds return no ptxas report (see measure/measure_child.cc): nothing to check.
      r.resources_text = "ptxas gave no report (this NVRTC returns none); resources unchecked\n";
    } else {
      r.resources_text = cuda::ResourcesText(src->plan, r.resources, *sm);
      if (auto st = cuda::CheckKernelResources(src->plan, r.resources, *sm); !st.ok()) {
        return fail(Outcome::kOverLimits, st.message());
      }
    }
  }
  if (options.test_read_past_first_input && !data.args.empty()) {
    *src =
        ShiftReads(std::move(*src), src->plan.args[0], static_cast<int64_t>(data.args[0].size()));
  }
  auto program = EmuProgram::Build(*src);
  if (!program.ok()) {
    return fail(absl::IsFailedPrecondition(program.status()) ? Outcome::kUnavailable
                                                             : Outcome::kCompileError,
                program.status().message());
  }
  Emulate(r, std::move(*program), data, options.tolerance);
  return r;
}

VerifyReport VerifyCompiled(const codegen::cuda::CudaSource& src, std::shared_ptr<EmuModule> module,
                            const ReferenceData& data, const VerifyOptions& options) {
  VerifyReport r;
  r.plan = src.plan;
  auto sm = codegen::cuda::SmResourcesFor(options.arch);
  absl::Status st = sm.ok() ? codegen::cuda::CheckLaunchLimits(src.plan, sm->limits) : sm.status();
  if (!st.ok()) {
    r.outcome = Outcome::kInvalidSchedule;
    r.message = std::string(st.message());
    return r;
  }
  auto program = EmuProgram::FromModule(src.plan, std::move(module));
  if (!program.ok()) {
    r.outcome = Outcome::kRuntimeError;
    r.message = std::string(program.status().message());
    return r;
  }
  Emulate(r, std::move(*program), data, options.tolerance);
  return r;
}

absl::StatusOr<double> RunAgain(VerifyReport& report) {
  if (!report.ok() || !report.program) {
    return absl::FailedPreconditionError("the schedule was not verified");
  }
  std::vector<EmuBuffer*> ptrs;
  for (auto& b : report.buffers) ptrs.push_back(b.get());
  auto t0 = Clock::now();
  if (auto st = report.program->Run(ptrs); !st.ok()) return st;
  return Ms(t0);
}

}  // namespace lathe::gpuemu
