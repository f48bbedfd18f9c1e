// \file
// The schedules the model commands compile kernels with: the best record of the tuning
// database where one exists, else the default schedule, which is the CPU search space's
// rule-picked first candidate (a register tile filling the vector registers, outer loops in
// parallel) or, where the space has none, the untouched schedule. It lives in tools/ because
// model/ does not depend on the tuner.
#ifndef LATHE_TOOLS_MODEL_SCHEDULES_H_
#define LATHE_TOOLS_MODEL_SCHEDULES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "model/executor.h"

namespace lathe::tools {

absl::StatusOr<ir::Schedule> DefaultModelSchedule(const ir::Workload& w);

// The search space's rule-picked candidate `index` (0: the first, what an untuned model step
// gets) of `w` for `target` (cpu, cuda:sm_90, cuda:0, ...); the space's error, or NotFound when
// it picks fewer.
absl::StatusOr<ir::Schedule> RuleSchedule(const ir::Workload& w, const ir::Target& target,
                                          bool gpu_tf32 = false, int index = 0);

// Opens the database at `path` (empty: the default path) read-only when it exists; a missing
// database is not an error (*db stays null: every kernel gets its default schedule).
absl::Status OpenModelDatabase(const std::string& path, std::unique_ptr<db::Database>* db);

// What a record's origin ends with ("record 812.5 us; rules not raced") when the database has
// no measurement of the program the current rules pick for its workload: the record may
// predate a rule that is faster now; `lathe tune` on the task measures the rules first.
inline constexpr char kUnraced[] = "; rules not raced";

// The schedule source of the model commands over `db` (may be null); records' origins are
// marked kUnraced where it applies.
std::unique_ptr<model::ScheduleSource> ModelSchedules(db::Database* db);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_MODEL_SCHEDULES_H_
