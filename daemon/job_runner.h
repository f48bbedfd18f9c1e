// \file
// The jobs of lathed: their in-memory progress, one driver thread per running job and the
// search threads that every job shares (DESIGN.md "Search"). Free of gRPC.
//
// The job thread runs the tuning driver (tuner/driver.h: the same loop as the embedded `lathe
// tune`) with a runner that queues its trials in the LeaseRegistry and hears of their results
// from Report (Account). A job is either a `workloads` job (each workload gets JobSpec.trials)
// or a `tasks` job (workloads with weights sharing JobSpec.trials as their budget, spread by
// the gradient task scheduler). The driver searches a round when fewer than half a batch of
// the job's tasks are outstanding (dispatched, not reported), or when fewer than half a batch
// wait in the queue while fewer than 4 batches per open workload are in flight: a fleet larger
// than half a batch drains the queue before results come back, and workers that find it empty
// would idle (and poll) while the next round is searched.
//
// trials_done of a workload = traces stored for it when the service loaded the job minus its
// baseline (at most its target), plus the results accounted since, never more than its
// target (and a tasks job's total never more than its budget): a restarted daemon resumes
// every QUEUED or RUNNING job exactly where its commits
// stopped and never dispatches a stored trace again. When another job of the same workload and
// device class ran since the job was created, the stored traces are not all the job's: the
// service then starts from the progress the job last persisted (JobSpecJson "doneMeasured":
// exact after a graceful stop, up to a second of results behind after a crash, which only
// costs a few more trials). The search dispatches at most
// target - done - outstanding tasks; a result kept in a worker's spool across a restart adds
// to done without a task of its own, so it withdraws a queued task (see Account). One cost model
// per job (its device class's), fed with every reported result, retrained by the model itself when
// its data grew >= 20 %, and saved to the database after each retraining.
//
// Re-timing (DESIGN.md "Timing"; the embedded `lathe tune` does the same in-process): once
// every workload has its trials, the job's queued tasks are dropped and, with remeasure_top >
// 0, each workload's best `remeasure_top` ok records that were never re-timed
// (remeasured_at = 0, whichever job stored them) are queued as re-timing tasks (Task.remeasure,
// min_repeat_ms x remeasure_factor). Their results add repeats to the records (service.h);
// a failed one leaves its record as it was. A re-timing can move a record out of the best few
// and let one never re-timed in: rounds go on until the best `remeasure_top` are all re-timed
// or 2 x remeasure_top records of the workload were tried. The job is DONE after that; it
// stays RUNNING meanwhile (a restarted daemon re-times what is still missing), and its
// progress counts the re-timings (WorkloadProgress.remeasure*). A re-timing task whose lease
// expires returns to the queue like any task; a cancelled job drops the queued ones.
//
// The search is a background activity: each job's driver searches its tasks' rounds on the
// daemon's `search.threads` search threads (daemon/search_pool.h; 0: every core), one round in
// flight per task, several tasks of a job and several jobs at once, at most `search.threads`
// rounds together; the gradient task scheduler still picks which task gets the next round among
// those not searching. A round is dispatched as soon as its search ends, so workers do not wait
// on one task's round while others could be searched. The search threads run at the nice value
// `search_nice`, so that the threads answering workers keep their latency on a small host.
// Linux nice values are per thread and inherited by the threads a thread creates: the search
// threads and each job's featurization and retraining of the cost model (one niced thread per
// job) are niced, while the job thread, which takes the locks, keeps normal priority (no
// priority inversion).
//
// Thread-safety: every method may be called from any thread. One mutex guards the jobs; it is
// never held across a search round or a database transaction. Lock order: this mutex, then
// the registry's (the registry never calls in here).
#ifndef LATHE_DAEMON_JOB_RUNNER_H_
#define LATHE_DAEMON_JOB_RUNNER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/lease_registry.h"
#include "db/database.h"
#include "ir/trace.h"
#include "lathe/v1/service.pb.h"
#include "tuner/driver.h"
#include "tuner/search.h"

namespace lathe::daemon {

// Progress of one workload of a job.
struct WorkloadRun {
  std::string canonical;
  std::string key;
  double flops = 0;
  double weight = 1;     // a tasks job's weight; 1 in a workloads job
  int target = 0;        // WorkloadTarget: per workload, or a tasks job's budget (or cap)
  int64_t baseline = 0;  // traces stored for the workload when the job was created
  int done = 0;
  int outstanding = 0;  // dispatched, not reported
  double best_latency_us = 0;
  double best_gflops = 0;
  std::map<std::string, int> errors;
  int remeasured = 0;         // re-timings whose repeats were added
  int remeasure_failed = 0;   // re-timings that did not come back ok
  int remeasure_pending = 0;  // re-timing tasks queued or leased, not reported
};

// A result the job's thread has not seen yet.
struct Reported {
  int workload = 0;
  std::string candidate_id;
  // Set for a candidate this daemon did not dispatch (a result kept by a worker across a
  // restart): the program of its trace, so that the search never proposes it again.
  std::optional<ir::ProgramId> program;
  db::ErrorClass error_class = db::ErrorClass::kOk;
  double median_us = 0;
  bool counted = false;  // counted as a trial of the job (not past its target or budget)
  // The candidate's queued task was withdrawn (see Account): it was never measured, so the
  // search may propose it again.
  bool withdrawn = false;
  bool remeasure = false;  // a re-timing's result (error_class: whether its repeats were added)
};

struct JobEntry {
  std::string id;
  lathe::v1::JobSpec spec;  // normalised
  std::string device_class;
  db::JobState state = db::JobState::kQueued;
  std::string message;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  std::vector<WorkloadRun> workloads;
  uint64_t version = 1;
  bool cancel = false;
  std::vector<Reported> inbox;
  std::thread thread;
  // JobStatus.objective_history: a point each time the objective changed, at most
  // kMaxObjectivePoints (older ones thinned). Stored with the job's progress (JobSpecJson), so
  // that a restarted daemon goes on with it.
  std::vector<lathe::v1::ObjectivePoint> objective_history;
};

// A stored result of a task of a job, for its progress.
struct StoredResult {
  std::string job_id;
  int workload = 0;
  std::string candidate_id;
  std::optional<ir::ProgramId> program;  // see Reported
  db::ErrorClass error_class = db::ErrorClass::kOk;
  double median_us = 0;
  double gflops = 0;
  // A re-timing (Task.remeasure): kOk when its repeats were added to the record, anything
  // else when it failed. Never a trial.
  bool remeasure = false;
};

// The most points a job's objective history keeps: past it, every other older point goes (the
// first and the newest stay), so the history spans the whole job at a coarser grain.
inline constexpr size_t kMaxObjectivePoints = 128;

// The trials a job may take in all: a tasks job's JobSpec.trials (at most its tasks' caps
// together), a workloads job's trials per workload times its workloads.
int JobBudget(const JobEntry& job);

// The trials one workload of a job may take: a workloads job's JobSpec.trials; a tasks job's
// budget, or its max_trials_per_task where that is smaller.
int WorkloadTarget(const lathe::v1::JobSpec& spec);

// The spec_json lathed stores for a job: its JobSpec as JSON (every field), plus per workload
// "baselineMeasured" (traces stored for it when the job was created) and "doneMeasured" (its
// trials done when this was written), and "objectiveHistory" (the job's objective_history, one
// [at_ms, trials_done, objective_us] triple a point). Expects the runner's lock held for a job
// it runs. Both stores keep it in the jobs table: written with the job's progress (at most once
// a second while results arrive, and at a graceful stop), so a kill -9 loses at most the last
// second's points.
std::string JobSpecJson(const JobEntry& job);

// The objective history of a stored spec_json ("objectiveHistory"), in order: points that are
// not [at_ms, trials_done, objective_us] with a positive finite objective are skipped, and at
// most kMaxObjectivePoints are kept (the first and the newest). Empty for older databases.
std::vector<lathe::v1::ObjectivePoint> ObjectiveHistoryFromSpecJson(const nlohmann::json& doc);

struct JobRunnerOptions {
  std::string db_path;          // each job thread opens its own connection
  tuner::SearchOptions search;  // threads: the search threads every job shares (0: every core)
  int seed_records = 16;
  bool use_cost_model = true;
  int search_nice = 0;          // nice value of the job threads and their search threads (0..19)
  int remeasure_top = 0;        // best records re-timed per workload at the end of a job; 0: none
  double remeasure_factor = 5;  // a re-timing's min_repeat_ms: the job's times this
  // The search threads of every job; null: the runner's own NicedSearchPool of search.threads
  // threads at search_nice. Not owned (tests observe the rounds through one of their own).
  tuner::SearchPool* search_pool = nullptr;
};

class JobRunner {
 public:
  // `registry` and `db` (the service's connection, for failures before a job thread has its
  // own) are not owned and must outlive the runner.
  JobRunner(const JobRunnerOptions& options, LeaseRegistry* registry, db::Database* db);
  // Stop().
  ~JobRunner();
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // A fresh job id.
  std::string NewJobId();
  // Takes a job; with `start`, runs its search thread. False (and the job is dropped) once
  // shutting down: a submitted job stays QUEUED in the database and runs on the next start.
  bool Add(std::unique_ptr<JobEntry> job, bool start);
  // True once BeginShutdown() was called.
  bool ShuttingDown();
  // Wakes WatchJob waiters and job threads; job threads stop at their next step.
  void BeginShutdown();
  // BeginShutdown(), then joins the job threads. Jobs stay RUNNING in the database.
  void Stop();

  // --- clients (see service.h) ---
  absl::StatusOr<lathe::v1::JobStatus> Get(const std::string& job_id);
  absl::StatusOr<lathe::v1::JobStatus> Watch(const std::string& job_id, uint64_t* version,
                                             int timeout_ms);
  absl::StatusOr<lathe::v1::CancelJobResponse> Cancel(const std::string& job_id);
  lathe::v1::ListJobsResponse List();

  // --- Report ---
  // The key and flops of workload `workload` of a job; nullopt for an unknown job.
  struct WorkloadInfo {
    std::string key;
    double flops = 0;
  };
  std::optional<WorkloadInfo> Workload(const std::string& job_id, int workload);
  // The index of the workload `canonical` in job `job_id` (known to this daemon, running or
  // ended) when that job tunes for `device_class`; else a message saying why a result for it
  // cannot be stored.
  absl::StatusOr<int> KnownWorkload(const std::string& job_id, const std::string& canonical,
                                    const std::string& device_class);
  // Accounts stored results to their jobs' progress and wakes their threads. A workload never
  // counts more than its target: a result past it adds to nothing but the best (trials_done
  // and errors stay), one for an ended job to nothing. A result this daemon
  // did not dispatch (program set) that counts withdraws the job's queued tasks that
  // would take the workload past its target; their candidates go back to the search, which
  // may propose them again. A re-timing (StoredResult::remeasure) counts only in the
  // workload's re-timing progress.
  void Account(const std::vector<StoredResult>& results);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_JOB_RUNNER_H_
