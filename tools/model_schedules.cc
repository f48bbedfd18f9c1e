#include "tools/model_schedules.h"

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "tools/cli_db.h"
#include "tuner/space.h"
#include "tuner/space_factory.h"

namespace lathe::tools {

absl::StatusOr<ir::Schedule> RuleSchedule(const ir::Workload& w, const ir::Target& target,
                                          bool gpu_tf32, int index) {
  absl::StatusOr<std::unique_ptr<tuner::SearchSpace>> space =
      tuner::CreateSearchSpace(w, target, gpu_tf32);
  if (!space.ok()) return space.status();
  std::vector<tuner::Candidate> picks = (*space)->Heuristic(index + 1);
  if (static_cast<int>(picks.size()) <= index) {
    return absl::NotFoundError(absl::StrCat("the search space has ", picks.size(),
                                            " rule-picked candidates, not ", index + 1));
  }
  const tuner::Candidate& pick = picks[static_cast<size_t>(index)];
  if (pick.schedule) return *pick.schedule;
  return (*space)->Apply(pick);
}

absl::StatusOr<ir::Schedule> DefaultModelSchedule(const ir::Workload& w) {
  absl::StatusOr<ir::Schedule> s = RuleSchedule(w, ir::Target{});
  if (s.ok()) return s;
  return ir::Schedule(w);
}

absl::Status OpenModelDatabase(const std::string& path, std::unique_ptr<db::Database>* out) {
  const std::string p = path.empty() ? DefaultDbPath() : path;
  db::OpenOptions oo;
  oo.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(p, oo);
  if (absl::IsNotFound(d.status())) return absl::OkStatus();
  if (!d.ok()) return d.status();
  *out = *std::move(d);
  return absl::OkStatus();
}

std::unique_ptr<model::ScheduleSource> ModelSchedules(db::Database* db) {
  return model::DatabaseSchedules(db, codegen::HostDeviceClass(), DefaultModelSchedule);
}

}  // namespace lathe::tools
