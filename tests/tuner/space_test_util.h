// Helpers of the CPU search space's tests (space_test.cc, space_rules_test.cc): a space of a
// spec on a target description, and the trace texts of its rule-picked candidates.
#ifndef LATHE_TESTS_TUNER_SPACE_TEST_UTIL_H_
#define LATHE_TESTS_TUNER_SPACE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/printer.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::tuner {

// The search space of `spec` on `target`; null, and a test failure, when either is invalid.
inline std::unique_ptr<SearchSpace> SpaceOf(const std::string& spec, const CpuTarget& target) {
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) {
    ADD_FAILURE() << spec << ": " << w.status();
    return nullptr;
  }
  auto space = SearchSpace::Create(*w, target);
  if (!space.ok()) {
    ADD_FAILURE() << spec << ": " << space.status();
    return nullptr;
  }
  return *std::move(space);
}

// The trace texts of the (at most `max`) rule-picked candidates of `spec` on `target`; none,
// and a test failure, when the spec or its space is invalid.
inline std::vector<std::string> RuleTexts(const std::string& spec, const CpuTarget& target,
                                          int max) {
  std::unique_ptr<SearchSpace> space = SpaceOf(spec, target);
  std::vector<std::string> out;
  if (space == nullptr) return out;
  for (const Candidate& c : space->Heuristic(max)) out.push_back(ir::TraceToText(c.trace));
  return out;
}

// The rule-picked candidates of `spec` that do not chunk the input channels (at most `max`).
inline std::vector<std::string> UnchunkedRuleTexts(const std::string& spec, const CpuTarget& target,
                                                   int max) {
  std::vector<std::string> out;
  for (std::string& t : RuleTexts(spec, target, max + 3)) {
    if (t.find("[rc], {") == std::string::npos && static_cast<int>(out.size()) < max) {
      out.push_back(std::move(t));
    }
  }
  return out;
}

}  // namespace lathe::tuner

#endif  // LATHE_TESTS_TUNER_SPACE_TEST_UTIL_H_
