// \file
// What the CPU and GPU search spaces share about decision slots: the check that a candidate's
// decisions fit a space, and the early-return macros their Apply() replays primitives with.
#ifndef LATHE_TUNER_DECISIONS_H_
#define LATHE_TUNER_DECISIONS_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ir/trace.h"

namespace lathe::tuner {

// OkStatus when `decisions` has one value per slot and each value is among its slot's
// `choices`; else InvalidArgument naming the slot. SlotT has `name` and `choices`.
template <typename SlotT>
absl::Status CheckDecisions(const std::vector<SlotT>& slots,
                            const std::vector<int64_t>& decisions) {
  if (decisions.size() != slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("candidate has ", decisions.size(),
                                                   " decisions, the space has ", slots.size()));
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto& ch = slots[i].choices;
    if (std::find(ch.begin(), ch.end(), decisions[i]) == ch.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("decision ", slots[i].name, "=", decisions[i], " is not in the space"));
    }
  }
  return absl::OkStatus();
}

// `finished` (a candidate built from a trace's decisions) when it replays exactly the
// trace's instructions; else InvalidArgument.
template <typename CandidateT>
absl::StatusOr<CandidateT> MatchesTrace(absl::StatusOr<CandidateT> finished,
                                        const std::vector<ir::Instruction>& instructions) {
  if (!finished.ok()) return finished.status();
  if (finished->trace.instructions != instructions) {
    return absl::InvalidArgumentError("trace does not match its decisions in this search space");
  }
  return finished;
}

}  // namespace lathe::tuner

// Returns the status of `expr` when it is not ok.
#define LATHE_TRY(expr)        \
  do {                         \
    auto _st = (expr);         \
    if (!_st.ok()) return _st; \
  } while (0)
// Declares `var` as the value of the StatusOr `expr`, or returns its status.
#define LATHE_TRY_VALUE(var, expr)              \
  auto var##_or = (expr);                       \
  if (!var##_or.ok()) return var##_or.status(); \
  auto var = *var##_or

#endif  // LATHE_TUNER_DECISIONS_H_
