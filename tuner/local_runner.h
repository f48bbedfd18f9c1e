// \file
// The embedded runner (CONTRACT.md: `lathe tune` without --tuner): measures the driver's
// trials one by one, in the order given, in a sandboxed child process on this machine
// (measure::Measurer), and commits each round's records in one transaction once its last trial
// is measured (or the run stops, or the sandbox fails: what was measured is kept). Room for a
// new round only when nothing is pending, so a round is searched, then measured, then learnt
// from, as a user on a small machine expects: nothing searches while a kernel is timed.
//
// Thread-safety: driven by one thread (the driver's).
#ifndef LATHE_TUNER_LOCAL_RUNNER_H_
#define LATHE_TUNER_LOCAL_RUNNER_H_

#include <atomic>
#include <deque>
#include <string>
#include <vector>

#include "db/database.h"
#include "ir/workload.h"
#include "measure/measurer.h"
#include "tuner/runner.h"

namespace lathe::tuner {

class LocalRunner : public Runner {
 public:
  // `workloads[i]` is task i's workload. `database`, `measurer` and `stop` (may be null) must
  // outlive the runner. `worker` names the measurer in the records ("embedded@host").
  LocalRunner(std::vector<ir::Workload> workloads, std::string device_class, std::string worker,
              db::Database* database, measure::Measurer* measurer, const std::atomic<bool>* stop);

  Counts Progress(int task) override;
  int Room() override;
  absl::StatusOr<std::vector<std::string>> Dispatch(std::vector<Trial> trials) override;
  absl::StatusOr<std::vector<TrialOutcome>> Wait(bool until_room) override;
  bool Stopping() override;
  absl::Status Finish() override;
  absl::StatusOr<std::vector<bool>> Retime(
      const std::vector<RetimeRequest>& requests, double ms,
      const std::function<void(int done, int total)>& progress) override;

 private:
  // Commits the buffered records of the round.
  absl::Status Commit();

  std::vector<ir::Workload> workloads_;
  std::string device_class_;
  bool gpu_;  // a GPU class (re-timing flushes the caches), decided once from device_class_
  std::string worker_;
  db::Database* db_;
  measure::Measurer* measurer_;
  const std::atomic<bool>* stop_;
  std::deque<Trial> pending_;
  std::vector<int> done_;        // per task
  std::vector<int> pending_of_;  // per task
  std::vector<db::Record> buffered_;
};

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_LOCAL_RUNNER_H_
