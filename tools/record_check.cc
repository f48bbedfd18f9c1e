#include "tools/record_check.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "db/lookup.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::tools {
namespace {

// A clock no CPU or GPU sustains (GHz): the bound is meant to catch the impossible, not the
// merely surprising.
constexpr double kClockBoundGhz = 5.0;
constexpr double kGpuClockBoundGhz = 4.0;
constexpr double kGpuMaxSms = 200;
constexpr double kGpuLanesPerSm = 128;
// How many checked traces a RecordChecker remembers (their text is the key) before it forgets
// them all: a bound on its memory, not on its correctness.
constexpr size_t kMaxRemembered = 4096;

double CpuLanes(const std::string& isa) {
  if (isa == "avx512") return 16;
  if (isa == "avx2" || isa == "avx") return 8;
  if (isa == "sse4.2" || isa == "neon" || isa == "scalar") return 4;
  return 16;  // an ISA this lathe does not know: assume the widest
}

absl::Status Refuse(const std::string& why) { return absl::InvalidArgumentError(why); }

}  // namespace

std::optional<double> PeakGflopsBound(const std::string& device_class) {
  absl::StatusOr<ir::TargetKind> kind = ir::DeviceClassKind(device_class);
  if (!kind.ok()) return std::nullopt;
  if (*kind != ir::TargetKind::kCpu) {
    return kGpuMaxSms * kGpuLanesPerSm * 2 /*flops per FMA*/ * kGpuClockBoundGhz;
  }
  std::optional<db::CpuDeviceClass> cpu = db::ParseCpuDeviceClass(device_class);
  if (!cpu.has_value() || cpu->cores < 1) return std::nullopt;
  return CpuLanes(cpu->isa) * 2 /*FMA units*/ * 2 /*flops per FMA*/ * cpu->cores * kClockBoundGhz;
}

absl::Status RecordChecker::Check(const db::Record& r) {
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(r.workload);
  if (!spec.ok()) return Refuse(absl::StrCat("workload: ", spec.status().message()));
  const std::string canonical = spec->ToString();
  if (r.workload_key != ir::WorkloadKey(canonical)) {
    return Refuse(absl::StrCat("workload_key '", r.workload_key, "' is not the key of workload ",
                               canonical, " (", ir::WorkloadKey(canonical), ")"));
  }
  if (r.error_class != db::ErrorClass::kOk) return absl::OkStatus();

  std::optional<double> peak = PeakGflopsBound(r.device_class);
  if (!peak) {
    return Refuse(absl::StrCat("device class '", r.device_class,
                               "' is none of cpu:<model>:<isa>:<N>c, cuda:<name> (sm_XX) or "
                               "cuda-emu:sm_XX"));
  }
  if (!std::isfinite(r.median_us) || r.median_us <= 0) {
    return Refuse(
        absl::StrCat("an ok record needs a positive median latency, not ", r.median_us, " us"));
  }
  for (double us : r.repeats_us) {
    if (!std::isfinite(us) || us < 0) {
      return Refuse(absl::StrCat("repeat time ", us, " us is not a finite, non-negative time"));
    }
  }
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(*spec);
  if (!w.ok()) return Refuse(absl::StrCat("workload: ", w.status().message()));
  // The record's own flops count, when larger, is what lookups divide by.
  const double flops = std::max(w->flops, std::isfinite(r.flops) ? r.flops : 0.0);
  const double gflops = flops / (r.median_us * 1e3);
  if (gflops > *peak) {
    return Refuse(absl::StrCat("a median of ", r.median_us, " us means ", gflops,
                               " GFLOP/s, more than the ", *peak, " GFLOP/s that device class '",
                               r.device_class, "' can do"));
  }
  return CheckTrace(r, canonical);
}

absl::Status RecordChecker::CheckTrace(const db::Record& r, const std::string& canonical) {
  auto key = std::make_pair(canonical, r.trace_json);
  auto it = traces_.find(key);
  if (it != traces_.end()) return it->second;
  absl::Status result = [&]() -> absl::Status {
    absl::StatusOr<ir::Trace> trace = traceio::TraceFromJson(r.trace_json);
    if (!trace.ok()) return Refuse(absl::StrCat("trace: ", trace.status().message()));
    absl::StatusOr<ir::Target> device = ir::TargetOfDeviceClass(r.device_class);
    if (!device.ok()) return Refuse(std::string(device.status().message()));
    absl::StatusOr<ir::Target> target = ir::ParseTarget(trace->target);
    if (!target.ok()) return Refuse(absl::StrCat("trace: ", target.status().message()));
    if (target->is_gpu() != device->is_gpu()) {
      return Refuse(absl::StrCat("trace target '", trace->target, "' does not fit device class '",
                                 r.device_class, "'"));
    }
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(canonical);
    if (!w.ok()) return Refuse(absl::StrCat("workload: ", w.status().message()));
    absl::StatusOr<ir::Schedule> sch = ir::ApplyTrace(*w, *trace);
    if (!sch.ok()) {
      return Refuse(
          absl::StrCat("trace does not replay on ", canonical, ": ", sch.status().message()));
    }
    absl::StatusOr<ir::LoweredFunc> f =
        codegen::Lower(*sch, "record_check", codegen::LowerOptions::ForTarget(target->kind));
    if (!f.ok()) {
      return Refuse(
          absl::StrCat("trace does not lower for ", canonical, ": ", f.status().message()));
    }
    return absl::OkStatus();
  }();
  if (traces_.size() >= kMaxRemembered) traces_.clear();
  traces_.emplace(std::move(key), result);
  return result;
}

}  // namespace lathe::tools
