// bench_gpuemu: how long the GPU emulator takes to check a GPU candidate, so that CI time can
// be budgeted: for one workload (SGEMM 256^3 by default), the default GPU schedule, the GPU
// search space's rule-picked candidate and a few sampled ones are each checked as a
// `cuda-emu` worker checks them (NVRTC + ptxas, the host compile of the same text, one
// emulated run compared with the reference), then run again; the figures are printed beside
// the naive CPU reference of the same workload, timed in the same run.
//
// Usage: bench_gpuemu [--workload SPEC] [--arch sm_XX] [--samples N] [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "codegen/cuda/gpu_schedule.h"
#include "gpuemu/verify.h"
#include "ir/reference.h"
#include "ir/workload.h"
#include "tuner/gpu_space.h"

namespace {

using namespace lathe;  // NOLINT: a benchmark's main

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string name;
  std::string outcome;
  double nvrtc_ms = 0, host_ms = 0, check_ms = 0, run_ms = 0, total_ms = 0;
  std::string resources;
};

Row Check(const std::string& name, const ir::Schedule& sch, const gpuemu::ReferenceData& data,
          const std::string& arch, int repeats) {
  Row row;
  row.name = name;
  auto t0 = std::chrono::steady_clock::now();
  gpuemu::VerifyOptions vo;
  vo.arch = arch;
  gpuemu::VerifyReport r = gpuemu::VerifySchedule(sch, data, vo);
  row.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  row.outcome = gpuemu::OutcomeName(r.outcome);
  row.nvrtc_ms = r.nvrtc_ms;
  row.host_ms = r.host_compile_ms;
  row.check_ms = r.run_ms;
  row.resources = r.ok() ? r.resources_text : r.message.substr(0, 200);
  std::vector<double> runs;
  for (int i = 0; i < repeats && r.ok(); ++i) {
    auto ms = gpuemu::RunAgain(r);
    if (!ms.ok()) break;
    runs.push_back(*ms);
  }
  row.run_ms = runs.empty() ? row.check_ms : Median(runs);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "matmul:m=256,n=256,k=256", arch = "sm_90";
  int samples = 4, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workload")) {
      spec = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--arch")) {
      arch = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--samples")) {
      (void)absl::SimpleAtoi(argv[i + 1], &samples);
    } else if (!std::strcmp(argv[i], "--repeats")) {
      (void)absl::SimpleAtoi(argv[i + 1], &repeats);
    } else {
      std::fprintf(stderr,
                   "usage: bench_gpuemu [--workload SPEC] [--arch sm_XX] [--samples N] "
                   "[--repeats N]\n");
      return 2;
    }
  }
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) {
    std::fprintf(stderr, "bench_gpuemu: %s\n", std::string(w.status().message()).c_str());
    return 2;
  }
  auto data = gpuemu::MakeReferenceData(*w);
  if (!data.ok()) {
    std::fprintf(stderr, "bench_gpuemu: %s\n", std::string(data.status().message()).c_str());
    return 1;
  }
  // The baseline: the naive reference on this CPU, the same inputs.
  std::vector<double> ref_ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    std::vector<std::vector<float>> args = data->args;
    auto t0 = std::chrono::steady_clock::now();
    (void)ir::ComputeReference(*w, args);
    ref_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }

  std::vector<Row> rows;
  auto def = codegen::cuda::DefaultGpuSchedule(*w);
  if (def.ok()) rows.push_back(Check("default", *def, *data, arch, repeats));
  absl::StatusOr<ir::Target> parsed = ir::ParseTarget("cuda:" + arch);
  auto target = parsed.ok() ? tuner::GpuTargetFor(*parsed)
                            : absl::StatusOr<tuner::GpuTarget>(parsed.status());
  auto space = target.ok() ? tuner::CreateGpuSearchSpace(*w, *target)
                           : absl::StatusOr<std::unique_ptr<tuner::SearchSpace>>(target.status());
  if (space.ok()) {
    for (const tuner::Candidate& c : (*space)->Heuristic(1)) {
      rows.push_back(Check("rule-picked", *c.schedule, *data, arch, repeats));
    }
    std::mt19937_64 rng(7);
    for (int i = 0; i < samples; ++i) {
      auto c = (*space)->Sample(rng);
      if (!c.ok()) break;
      rows.push_back(Check("sample " + std::to_string(i + 1), *c->schedule, *data, arch, repeats));
    }
  }
  std::printf("bench_gpuemu: %s for %s, %.3g GFLOP per call\n", spec.c_str(), arch.c_str(),
              w->flops * 1e-9);
  std::printf("  baseline: naive CPU reference %.1f ms\n", Median(ref_ms));
  std::printf("  %-12s %-14s %9s %9s %9s %9s %10s\n", "candidate", "outcome", "nvrtc ms", "host ms",
              "check ms", "run ms", "total ms");
  for (const Row& r : rows) {
    std::printf("  %-12s %-14s %9.0f %9.0f %9.1f %9.1f %10.0f   %s\n", r.name.c_str(),
                r.outcome.c_str(), r.nvrtc_ms, r.host_ms, r.check_ms, r.run_ms, r.total_ms,
                r.resources.c_str());
  }
  return 0;
}
