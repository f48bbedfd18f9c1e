#include "tools/model_schedules.h"

#include "codegen/host.h"
#include "tools/cli_db.h"
#include "tuner/space.h"

namespace lathe::tools {

absl::StatusOr<ir::Schedule> DefaultModelSchedule(const ir::Workload& w) {
  absl::StatusOr<std::unique_ptr<tuner::SearchSpace>> space =
      tuner::SearchSpace::Create(w, tuner::HostCpuTarget());
  if (space.ok()) {
    std::vector<tuner::Candidate> picks = (*space)->Heuristic(1);
    if (!picks.empty()) {
      if (picks[0].schedule) return *picks[0].schedule;
      absl::StatusOr<ir::Schedule> s = (*space)->Apply(picks[0]);
      if (s.ok()) return s;
    }
  }
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
