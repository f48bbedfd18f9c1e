#include "db/lookup.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lathe::db {

std::string_view MatchKindName(MatchKind kind) {
  switch (kind) {
    case MatchKind::kMiss:
      return "miss";
    case MatchKind::kExact:
      return "exact";
    case MatchKind::kOtherCoreCount:
      return "other_core_count";
  }
  return "unknown";
}

std::optional<CpuDeviceClass> ParseCpuDeviceClass(std::string_view s) {
  constexpr std::string_view kPrefix = "cpu:";
  if (s.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  s.remove_prefix(kPrefix.size());
  size_t last = s.rfind(':');
  if (last == std::string_view::npos || last == 0) return std::nullopt;
  size_t mid = s.rfind(':', last - 1);
  if (mid == std::string_view::npos || mid == 0) return std::nullopt;
  std::string_view cores = s.substr(last + 1);
  if (cores.size() < 2 || cores.back() != 'c') return std::nullopt;
  CpuDeviceClass out;
  if (!absl::SimpleAtoi(std::string(cores.substr(0, cores.size() - 1)), &out.cores) ||
      out.cores <= 0) {
    return std::nullopt;
  }
  out.model = std::string(s.substr(0, mid));
  out.isa = std::string(s.substr(mid + 1, last - mid - 1));
  if (out.isa.empty()) return std::nullopt;
  return out;
}

namespace {

std::string Describe(const Record& r) {
  return absl::StrFormat("record %s (median %.3f us, measured by %s)", r.candidate_id, r.median_us,
                         r.worker.empty() ? "unknown worker" : r.worker);
}

}  // namespace

absl::StatusOr<LookupResult> Lookup(Database& db, const WorkloadRef& workload,
                                    const std::string& device_class, const LookupPolicy& policy) {
  LookupResult result;
  result.device_class = device_class;
  const std::string& w = workload.canonical;

  absl::StatusOr<std::optional<std::string>> stored = db.WorkloadSpecForKey(workload.key);
  if (!stored.ok()) return stored.status();
  if (!stored->has_value()) {
    result.explanation = absl::StrCat("no records for workload ", w, " (key ", workload.key,
                                      ") on any device class");
    return result;
  }
  if (**stored != w) {
    result.explanation = absl::StrCat("workload key ", workload.key, " belongs to '", **stored,
                                      "' in the database, not ", w, "; its records are not used");
    return result;
  }

  absl::StatusOr<std::optional<Record>> best = db.Best(workload.key, device_class);
  if (!best.ok()) return best.status();
  if (best->has_value()) {
    result.match = MatchKind::kExact;
    result.explanation =
        absl::StrCat("best ok record for ", w, " on ", device_class, ": ", Describe(**best));
    result.record = std::move(*best);
    return result;
  }

  // Only a miss pays for listing the other classes.
  absl::StatusOr<std::vector<std::pair<std::string, int64_t>>> classes =
      db.DeviceClassesWithOkRecords(workload.key);
  if (!classes.ok()) return classes.status();

  // No exact record: consider the other classes, nearest core count first.
  std::optional<CpuDeviceClass> want = ParseCpuDeviceClass(device_class);
  const std::string* chosen = nullptr;
  int chosen_cores = 0;
  std::vector<std::string> others;
  for (const auto& [name, count] : *classes) {
    std::optional<CpuDeviceClass> have = ParseCpuDeviceClass(name);
    bool compatible = want.has_value() && have.has_value() && have->model == want->model &&
                      have->isa == want->isa;
    std::string why;
    if (!compatible) {
      why = "different device model or isa";
    } else if (policy.fallback == DeviceFallback::kExactOnly) {
      why = "same cpu model and isa, another core count; policy requires the exact class";
    } else {
      int d = std::abs(have->cores - want->cores);
      int best_d = std::abs(chosen_cores - want->cores);
      // Nearest core count; on a tie the larger machine.
      if (chosen == nullptr || d < best_d || (d == best_d && have->cores > chosen_cores)) {
        chosen = &name;
        chosen_cores = have->cores;
      }
      why = "compatible";
    }
    others.push_back(absl::StrCat(name, " (", count, " ok records: ", why, ")"));
  }

  if (chosen != nullptr) {
    absl::StatusOr<std::optional<Record>> fallback = db.Best(workload.key, *chosen);
    if (!fallback.ok()) return fallback.status();
    if (fallback->has_value()) {
      result.match = MatchKind::kOtherCoreCount;
      result.device_class = *chosen;
      result.explanation = absl::StrCat(
          "no ok record for ", w, " on ", device_class, "; used ", Describe(**fallback),
          " from device class ", *chosen, ": same cpu model and isa with ", chosen_cores,
          " cores instead of ", want->cores, " (policy allows another core count)");
      result.record = std::move(*fallback);
      return result;
    }
  }
  result.explanation = absl::StrCat("no ok record for ", w, " on ", device_class);
  if (others.empty()) {
    absl::StrAppend(&result.explanation, "; no other device class has one");
  } else {
    absl::StrAppend(&result.explanation, "; other device classes: ", absl::StrJoin(others, "; "));
  }
  return result;
}

}  // namespace lathe::db
