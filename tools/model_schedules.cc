#include "tools/model_schedules.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "ir/trace.h"
#include "tools/cli_db.h"
#include "tuner/space.h"
#include "tuner/space_factory.h"
#include "tuner/tune_common.h"

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

namespace {

// The database's schedules, each record's origin marked kUnraced when the database holds no
// measurement of the program the current rules pick for its workload (a record tuned before
// a rule changed: `lathe tune` measures the rules first and would keep the faster of the two).
class RacedSchedules : public model::ScheduleSource {
 public:
  RacedSchedules(db::Database* db, std::string device_class)
      : db_(db),
        device_(device_class),
        records_(model::DatabaseSchedules(db, std::move(device_class), DefaultModelSchedule)) {}

  absl::StatusOr<ir::Schedule> Get(const ir::Workload& w, std::string* origin) const override {
    absl::StatusOr<ir::Schedule> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s = records_->Get(w, origin);
    }
    if (!s.ok() || db_ == nullptr || model::RecordUsOf(*origin) < 0) return s;
    absl::StatusOr<ir::Schedule> rule = RuleSchedule(w, ir::Target{});
    if (!rule.ok()) return s;  // no rules for this workload: nothing to race against
    const ir::ProgramId program = ir::ProgramIdOf(rule->trace());
    if (program == ir::ProgramIdOf(s->trace())) return s;
    const std::string id = tuner::CandidateId(w.key, program, device_);
    absl::StatusOr<std::vector<bool>> has;
    {
      std::lock_guard<std::mutex> lock(mu_);
      has = db_->HasCandidates({&id, 1});
    }
    if (has.ok() && has->size() == 1 && !(*has)[0]) *origin += kUnraced;
    return s;
  }

 private:
  db::Database* db_;
  std::string device_;
  std::unique_ptr<model::ScheduleSource> records_;
  mutable std::mutex mu_;  // the database handle is used from one thread at a time
};

}  // namespace

std::unique_ptr<model::ScheduleSource> ModelSchedules(db::Database* db) {
  return std::make_unique<RacedSchedules>(db, codegen::HostDeviceClass());
}

}  // namespace lathe::tools
