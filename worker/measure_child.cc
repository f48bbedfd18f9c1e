#include "worker/measure_child.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "codegen/cpu_kernel.h"
#include "codegen/host.h"
#include "codegen/lower.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "worker/measurer.h"

namespace lathe::worker {

namespace {

using Clock = std::chrono::steady_clock;

// Inputs and the reference output of one workload, computed once per child.
struct WorkloadData {
  ir::Workload workload;
  std::vector<std::vector<float>> args;  // inputs, then a scratch output
  std::vector<float> reference;
};

absl::StatusOr<WorkloadData*> GetWorkload(const std::string& spec) {
  static std::map<std::string, std::unique_ptr<WorkloadData>> cache;
  auto it = cache.find(spec);
  if (it != cache.end()) return it->second.get();
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) return w.status();
  auto d = std::make_unique<WorkloadData>();
  d->workload = *w;
  d->args = ir::AllocateArgs(*w);
  ir::FillRandomInputs(d->args, /*seed=*/20261121);
  if (auto s = ir::ComputeReference(*w, d->args); !s.ok()) return s;
  d->reference = d->args.back();
  if (cache.size() > 8) cache.clear();
  return (cache[spec] = std::move(d)).get();
}

bool FaultsEnabled() {
  const char* e = std::getenv("LATHE_TEST_FAULTS");
  return e && std::string(e) == "1";
}

void FlushCaches() {
  static std::vector<char> junk;
  const auto& cpu = codegen::HostCpu();
  size_t bytes =
      static_cast<size_t>(std::max<int64_t>(cpu.l2_bytes * cpu.cores + cpu.l3_bytes, 8 << 20));
  if (junk.size() != bytes) junk.assign(bytes, 1);
  for (size_t i = 0; i < junk.size(); i += 64) junk[i] = static_cast<char>(junk[i] + 1);
}

double MaxClockGhz() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (f >> khz && khz > 0) return khz / 1e6;
  std::ifstream c("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  while (std::getline(c, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      mhz = std::max(mhz, std::atof(line.substr(line.find(':') + 1).c_str()));
    }
  }
  // Boost clocks run above the nominal figure; allow for them.
  return mhz > 0 ? mhz / 1e3 * 1.5 : 5.0;
}

}  // namespace

double HostPeakGflops() {
  const auto& cpu = codegen::HostCpu();
  double lanes = cpu.vector_bits / 32.0;
  return lanes * 2 /*FMA units*/ * 2 /*flops per FMA*/ * cpu.cores * MaxClockGhz();
}

lathe::v1::MeasureResult MeasureInProcess(const lathe::v1::MeasureRequest& req) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  auto fail = [&](lathe::v1::ErrorClass c, std::string msg) {
    r.set_error_class(c);
    r.set_error_msg(std::move(msg));
    return r;
  };
  auto data = GetWorkload(req.workload());
  if (!data.ok()) {
    return fail(lathe::v1::INVALID_SCHEDULE, "workload: " + std::string(data.status().message()));
  }
  WorkloadData& d = **data;
  auto t0 = Clock::now();
  auto trace = ir::TraceFromJson(req.trace_json());
  if (!trace.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(trace.status().message()));
  auto sch = ir::ApplyTrace(d.workload, *trace);
  if (!sch.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(sch.status().message()));
  auto func = codegen::Lower(*sch, "candidate");
  if (!func.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(func.status().message()));
  auto kernel = codegen::JitCompile(*func);
  if (!kernel.ok()) {
    return fail(lathe::v1::COMPILE_ERROR, std::string(kernel.status().message()));
  }
  r.set_compile_ms(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());

  bool faults = FaultsEnabled();
  if (faults && req.fault() == "crash") raise(SIGSEGV);
  if (faults && req.fault() == "hang") {
    for (;;) pause();
  }
  std::vector<void*> ptrs;
  for (auto& a : d.args) ptrs.push_back(a.data());
  int nargs = static_cast<int>(ptrs.size());
  std::fill(d.args.back().begin(), d.args.back().end(), std::nanf(""));
  // The check doubles as the warm-up call.
  int rc = (*kernel)->Run(ptrs.data(), nargs);
  if (rc != 0) return fail(lathe::v1::RUNTIME_ERROR, absl::StrCat("kernel returned ", rc));
  if (faults && req.fault() == "wrong") d.args.back()[d.args.back().size() / 2] += 1.0f;
  absl::Status ok = ir::CheckOutput(d.args.back(), d.reference, d.workload.output()->shape);
  if (!ok.ok()) return fail(lathe::v1::WRONG_ANSWER, std::string(ok.message()));

  double min_ms = req.min_repeat_ms() > 0 ? req.min_repeat_ms() : 100.0;
  int max_repeats = req.max_repeats() > 0 ? req.max_repeats() : 1000;
  std::vector<double> us;
  auto start = Clock::now();
  while (static_cast<int>(us.size()) < max_repeats) {
    if (req.flush_cache()) FlushCaches();
    auto a = Clock::now();
    rc = (*kernel)->Run(ptrs.data(), nargs);
    auto b = Clock::now();
    if (rc != 0) return fail(lathe::v1::RUNTIME_ERROR, absl::StrCat("kernel returned ", rc));
    us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    double spent = std::chrono::duration<double, std::milli>(b - start).count();
    if (us.size() >= 3 && spent >= min_ms) break;
  }
  for (double u : us) r.add_repeats_us(u);
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double mean = 0, var = 0;
  for (double u : us) mean += u;
  mean /= us.size();
  for (double u : us) var += (u - mean) * (u - mean);
  var /= us.size();
  r.set_median_us(median);
  r.set_cv(mean > 0 ? std::sqrt(var) / mean : 0);
  double gflops = d.workload.flops / (median * 1e-6) * 1e-9;
  r.set_gflops(gflops);
  double peak = HostPeakGflops();
  if (gflops > peak) {
    return fail(lathe::v1::RUNTIME_ERROR,
                absl::StrCat("measured ", gflops, " GFLOP/s exceeds the device peak of ", peak,
                             " GFLOP/s: measurement error"));
  }
  r.set_error_class(lathe::v1::OK);
  return r;
}

int RunMeasureChild(int in_fd, int out_fd) {
  for (;;) {
    auto frame = ReadFrame(in_fd, -1);
    if (!frame.ok()) return absl::IsUnavailable(frame.status()) ? 0 : 1;
    lathe::v1::MeasureRequest req;
    lathe::v1::MeasureResult res;
    if (!req.ParseFromString(*frame)) {
      res.set_error_class(lathe::v1::INVALID_SCHEDULE);
      res.set_error_msg("malformed measurement request");
    } else {
      res = MeasureInProcess(req);
    }
    if (!WriteFrame(out_fd, res.SerializeAsString()).ok()) return 1;
  }
}

}  // namespace lathe::worker
