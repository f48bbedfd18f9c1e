#include "tools/cli_verify.h"

#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "fmt/format.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "tools/cli_common.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/resources.h"
#include "gpuemu/verify.h"
#include "proto/trace_io.h"
#include "tuner/gpu_space.h"
#endif

namespace lathe::tools {

#ifdef LATHE_HAVE_CUDA_BACKEND

namespace {

using json = nlohmann::json;

constexpr char kCmd[] = "lathe verify";

struct Named {
  std::string name;
  ir::Schedule schedule;
};

json KernelsJson(const gpuemu::VerifyReport& r, const codegen::cuda::SmResources& sm) {
  json out = json::array();
  for (const codegen::cuda::KernelLaunch& k : r.plan.kernels) {
    json j = {{"name", k.name},
              {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
              {"block", {k.block[0], k.block[1], k.block[2]}}};
    for (const codegen::cuda::KernelResources& res : r.resources) {
      if (res.name != k.name) continue;
      codegen::cuda::Occupancy o =
          codegen::cuda::OccupancyOf(sm, k.threads_per_block(), res.registers, res.shared_bytes);
      j["registers"] = res.registers;
      j["spill_bytes"] = res.spill_stores + res.spill_loads;
      j["shared_bytes"] = res.shared_bytes;
      j["blocks_per_sm"] = o.blocks_per_sm;
      j["limited_by"] = o.limited_by;
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace

int RunVerify(const VerifyCliOptions& o) {
  namespace cuda = codegen::cuda;
  auto w = ir::MakeWorkload(o.workload);
  if (!w.ok()) return Fail(kCmd, std::string(w.status().message()), kExitUsage);
  absl::StatusOr<ir::Target> parsed = ir::ParseTarget(o.target);
  auto arch =
      parsed.ok() ? cuda::ArchOfTarget(*parsed) : absl::StatusOr<std::string>(parsed.status());
  if (!arch.ok()) {
    return Fail(kCmd,
                "--target '" + o.target +
                    "': verify builds for an architecture (--target cuda:sm_XX, e.g. cuda:sm_90)",
                kExitUsage);
  }
  int given = !o.schedule.empty() + !o.trace_file.empty() + (o.random > 0);
  if (given > 1) {
    return Fail(kCmd, "--schedule, --trace and --random are mutually exclusive", kExitUsage);
  }
  if (!o.schedule.empty() && o.schedule != "default" && o.schedule != "rule") {
    return Fail(kCmd, "unknown --schedule '" + o.schedule + "' (expected 'default' or 'rule')",
                kExitUsage);
  }
  if (o.random < 0) return Fail(kCmd, fmt::format("--random {} (need >= 1)", o.random), kExitUsage);
  auto sm = cuda::SmResourcesFor(*arch);
  if (!sm.ok()) return Fail(kCmd, std::string(sm.status().message()), kExitUsage);
  auto tf32 = tuner::ParseGpuMath(o.gpu_math);
  if (!tf32.ok()) return Fail(kCmd, std::string(tf32.status().message()), kExitUsage);

  std::vector<Named> schedules;
  if (!o.trace_file.empty()) {
    auto t = traceio::ReadTraceFile(o.trace_file);
    if (!t.ok()) return Fail(kCmd, std::string(t.status().message()));
    auto sch = ir::ApplyTrace(*w, *t);
    if (!sch.ok()) {
      return Fail(kCmd,
                  o.trace_file + ": invalid schedule: " + std::string(sch.status().message()));
    }
    schedules.push_back({o.trace_file, std::move(*sch)});
  } else if (o.random > 0 || o.schedule == "rule") {
    absl::StatusOr<tuner::GpuTarget> target = tuner::GpuTargetFor(*parsed);
    if (!target.ok()) return Fail(kCmd, std::string(target.status().message()), kExitUsage);
    target->tf32 = *tf32;
    auto space = tuner::CreateGpuSearchSpace(*w, *target);
    if (!space.ok()) return Fail(kCmd, std::string(space.status().message()));
    if (o.schedule == "rule") {
      std::vector<tuner::Candidate> picked = (*space)->Heuristic(1);
      if (picked.empty()) return Fail(kCmd, "the gpu space has no rule-picked candidate here");
      auto sch = (*space)->Apply(picked[0]);
      if (!sch.ok()) return Fail(kCmd, std::string(sch.status().message()));
      schedules.push_back({"rule", std::move(*sch)});
    }
    std::mt19937_64 rng(o.seed);
    for (int i = 1; i <= o.random; ++i) {
      auto c = (*space)->Sample(rng);
      if (!c.ok())
        return Fail(kCmd, "sampling the gpu space: " + std::string(c.status().message()));
      auto sch = (*space)->Apply(*c);
      if (!sch.ok()) return Fail(kCmd, std::string(sch.status().message()));
      schedules.push_back({fmt::format("random {}", i), std::move(*sch)});
    }
  } else {
    auto sch = cuda::DefaultGpuSchedule(*w);
    if (!sch.ok()) return Fail(kCmd, std::string(sch.status().message()));
    schedules.push_back({"default", std::move(*sch)});
  }

  auto data = gpuemu::MakeReferenceData(*w);
  if (!data.ok()) return Fail(kCmd, "reference: " + std::string(data.status().message()));
  gpuemu::VerifyOptions vo;
  vo.arch = *arch;
  if (*tf32) vo.tolerance = gpuemu::kTf32Tolerance;
  json results = json::array();
  int agree = 0;
  std::string first_failure;
  for (const Named& n : schedules) {
    gpuemu::VerifyReport r = gpuemu::VerifySchedule(n.schedule, *data, vo);
    if (r.outcome == gpuemu::Outcome::kUnavailable) {
      return Fail(kCmd, "cannot verify on this machine: " + r.message);
    }
    std::string trace = traceio::TraceToJson(n.schedule.trace());
    if (r.ok()) ++agree;
    if (o.json) {
      json j = {{"schedule", n.name},
                {"ok", r.ok()},
                {"outcome", gpuemu::OutcomeName(r.outcome)},
                {"kernels", KernelsJson(r, *sm)},
                {"nvrtc_ms", r.nvrtc_ms},
                {"host_compile_ms", r.host_compile_ms},
                {"emulated_ms", r.run_ms},
                {"trace", json::parse(trace, nullptr, /*allow_exceptions=*/false)}};
      if (!r.ok()) j["message"] = r.message;
      if (r.compare.first_bad_index >= 0) j["first_bad_index"] = r.compare.first_bad_index;
      results.push_back(j);
    } else if (r.ok()) {
      fmt::print("{}: ok: {}; nvrtc {:.0f} ms, host compile {:.0f} ms, emulated in {:.1f} ms\n",
                 n.name, r.resources_text, r.nvrtc_ms, r.host_compile_ms, r.run_ms);
    } else {
      fmt::print("{}: {}: {}\n", n.name, gpuemu::OutcomeName(r.outcome), r.message);
    }
    if (!r.ok() && first_failure.empty()) {
      first_failure = fmt::format("{}: {}: {}", n.name, gpuemu::OutcomeName(r.outcome), r.message);
      if (o.random > 0) first_failure += "\n  trace: " + trace;
    }
  }
  const int total = static_cast<int>(schedules.size());
  if (o.json) {
    json out = {{"workload", w->canonical}, {"target", o.target},   {"arch", *arch},
                {"gpu_math", o.gpu_math},   {"schedules", results}, {"agree", agree},
                {"total", total},           {"ok", agree == total}};
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{} of {} schedules agree with the reference ({}, emulated)\n", agree, total, *arch);
  }
  if (agree == total) return kExitOk;
  return Fail(kCmd, first_failure);
}

#else  // !LATHE_HAVE_CUDA_BACKEND

int RunVerify(const VerifyCliOptions&) {
  return Fail("lathe verify",
              "this build has no cuda backend (configure with -DLATHE_BUILD_CUDA=ON)");
}

#endif  // LATHE_HAVE_CUDA_BACKEND

}  // namespace lathe::tools
