// Shrinking a failing schedule trace for property tests: instructions are dropped one at a
// time while the shorter trace still replays and still fails, so a report shows a small case.
#ifndef LATHE_TESTS_CODEGEN_MINIMIZE_TRACE_H_
#define LATHE_TESTS_CODEGEN_MINIMIZE_TRACE_H_

#include <functional>
#include <utility>

#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::testing {

// Shrinks `trace` by dropping instructions, one at a time until none can go, while the
// shortened trace still replays on `w` and `fails` still holds for it. Returns the smallest
// failing trace found; `trace` itself when nothing could be removed.
inline ir::Trace MinimizeTrace(const ir::Workload& w, ir::Trace trace,
                               const std::function<bool(const ir::Schedule&)>& fails) {
  auto still_fails = [&](const ir::Trace& t) {
    auto sch = ir::ApplyTrace(w, t);
    return sch.ok() && fails(*sch);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = trace.instructions.size(); i-- > 0;) {
      ir::Trace t = trace;
      t.instructions.erase(t.instructions.begin() + static_cast<long>(i));
      if (still_fails(t)) {
        trace = std::move(t);
        progress = true;
      }
    }
  }
  return trace;
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_CODEGEN_MINIMIZE_TRACE_H_
