#include "ir/check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lathe::ir {
namespace {

// Keeps the relative error finite for all-zero references.
constexpr double kTiny = 1e-30;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<std::vector<float>> AllocateArgs(const Workload& w) {
  std::vector<std::vector<float>> args;
  args.reserve(w.args.size());
  for (const Tensor& t : w.args) {
    int64_t n = 1;
    for (int64_t d : t->shape) n *= d;
    args.emplace_back(static_cast<size_t>(n), 0.0f);
  }
  return args;
}

void FillRandomInputs(std::vector<std::vector<float>>& args, uint64_t seed) {
  if (args.empty()) return;
  uint64_t state = seed;
  for (size_t a = 0; a + 1 < args.size(); ++a) {
    for (float& v : args[a]) {
      // 24 random bits -> [0, 1) exactly representable, then [-1, 1).
      const double u = static_cast<double>(SplitMix64(state) >> 40) * 0x1.0p-24;
      v = static_cast<float>(2.0 * u - 1.0);
    }
  }
}

CompareResult CompareOutputs(std::span<const float> candidate, std::span<const float> reference,
                             double tolerance) {
  CompareResult r;
  r.size = static_cast<int64_t>(std::min(candidate.size(), reference.size()));
  if (candidate.size() != reference.size()) return r;
  bool ref_finite = true;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (!std::isfinite(reference[i])) {
      ref_finite = false;
      if (r.first_bad_index < 0) r.first_bad_index = static_cast<int64_t>(i);
      continue;
    }
    r.max_abs_ref = std::max(r.max_abs_ref, std::fabs(static_cast<double>(reference[i])));
  }
  const double scale = std::max(r.max_abs_ref, kTiny);
  for (size_t i = 0; i < candidate.size(); ++i) {
    const double c = candidate[i];
    bool bad = false;
    if (!std::isfinite(c)) {
      ++r.num_nonfinite;
      bad = true;
    } else if (std::isfinite(reference[i])) {
      const double err = std::fabs(c - static_cast<double>(reference[i]));
      if (err > r.max_abs_error || r.worst_index < 0) {
        r.max_abs_error = std::max(r.max_abs_error, err);
        r.worst_index = static_cast<int64_t>(i);
      }
      bad = err / scale > tolerance;
    }
    if (bad) {
      ++r.num_bad;
      if (r.first_bad_index < 0) r.first_bad_index = static_cast<int64_t>(i);
    }
  }
  r.rel_error = r.max_abs_error / scale;
  r.ok = ref_finite && r.num_bad == 0;
  return r;
}

std::string FormatIndex(int64_t flat, const std::vector<int64_t>& shape) {
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  if (shape.empty() || flat < 0 || flat >= total) return absl::StrCat("[", flat, "]");
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return absl::StrCat("[", absl::StrJoin(idx, ","), "]");
}

absl::Status CheckOutput(std::span<const float> candidate, std::span<const float> reference,
                         const std::vector<int64_t>& shape, double tolerance,
                         CompareResult* result) {
  CompareResult r = CompareOutputs(candidate, reference, tolerance);
  if (result != nullptr) *result = r;
  if (candidate.size() != reference.size()) {
    return absl::InvalidArgumentError(absl::StrCat("candidate output has ", candidate.size(),
                                                   " elements, the reference ", reference.size()));
  }
  if (r.ok) return absl::OkStatus();
  const int64_t bad = r.first_bad_index;
  if (bad >= 0 && !std::isfinite(reference[bad])) {
    return absl::InternalError(absl::StrCat("reference output is not finite at element ",
                                            FormatIndex(bad, shape), ": ", reference[bad]));
  }
  return absl::InternalError(absl::StrCat(
      "wrong answer: relative error ", r.rel_error, r.rel_error > tolerance ? " > " : " <= ",
      tolerance, " (max abs error ", r.max_abs_error, ", max |ref| ", r.max_abs_ref,
      "); first bad element ", FormatIndex(bad, shape), ": got ", candidate[bad], ", expected ",
      reference[bad], "; ", r.num_bad, " of ", r.size, " elements bad",
      r.num_nonfinite > 0 ? absl::StrCat(", ", r.num_nonfinite, " nan or inf") : ""));
}

}  // namespace lathe::ir
