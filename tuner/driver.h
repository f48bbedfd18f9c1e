// \file
// The tuning driver: the one loop that both the embedded `lathe tune` and lathed's jobs run
// (DESIGN.md "One tuning driver"). A run tunes one or more tasks (workloads, each with a
// weight: how often it runs) of one device class within a trial budget. Each round, a task
// scheduler (task_scheduler.h) picks the task, the evolutionary search proposes candidates
// never measured for it (seeded from the database's best records, ranked by the device class's
// cost model, rule-picked candidates first on a task's first round), and a Runner (runner.h)
// measures them; their outcomes update the measured sets, the cost model (with the features the
// search already computed, so nothing is lowered twice), the scheduler's view of each task and
// the progress. At the end of a run that was not stopped, the best `remeasure_top` records of
// each task never re-timed are timed again for longer (repeated until the best few are all
// re-timed, at most twice that many records, then the best alone while it was never re-timed,
// at most four times that many), so that a lucky short measurement cannot stay the best. In a run
// of several tasks, a task re-times fewer records the smaller its share of the objective
// (RetimeCounts): a model's dozens of tiny tasks cannot move its latency much, and re-timing five
// records of each took a quarter of PP-OCR det's tune.
//
// The cost model is shared by all tasks (one per device class), trained with every outcome
// before the next round is searched, and saved to the database after each retraining.
//
// With a SearchPool (lathed), rounds are searched in the background: each task has at most one
// search in flight, several tasks search at once (as many as the pool has free threads, shared
// by every job of the daemon), and a round is dispatched as soon as its search ends, while the
// driver's thread goes on absorbing outcomes. Such a search ranks with a snapshot of the model
// taken when it started (refreshed after each retraining) and its task's measured set as it was
// then; the candidates it returns are checked against the set again before dispatch. Without a
// pool (the embedded `lathe tune`), a round is searched on the driver's thread, one at a time.
//
// Thread-safety: Run() is a blocking call on the caller's thread; the progress callback runs
// on it too.
#ifndef LATHE_TUNER_DRIVER_H_
#define LATHE_TUNER_DRIVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "ir/workload.h"
#include "tuner/runner.h"
#include "tuner/search.h"
#include "tuner/space.h"

namespace lathe::tuner {

struct DriverTask {
  ir::Workload workload;
  std::unique_ptr<SearchSpace> space;
  double weight = 1;
  // The most trials this task may take (a `workloads` job's per-workload trials); 0: only the
  // run's budget limits it.
  int cap = 0;
};

// Background threads for search rounds (DriverOptions::search_pool). Thread-safe: several
// drivers (lathed's jobs) share one.
class SearchPool {
 public:
  virtual ~SearchPool() = default;
  // Reserves a thread for one search; false when every thread is busy or reserved.
  virtual bool TryReserve() = 0;
  // Runs `fn` on the thread reserved by the last successful TryReserve (the reservation is
  // used up); `fn` is told how many threads its scoring may use (the pool's threads shared by
  // the searches running when it starts, at least 1).
  virtual void Run(std::function<void(int threads)> fn) = 0;
};

struct DriverOptions {
  std::string device_class;
  int budget = 300;  // trials of the run over all tasks
  int batch = 64;    // candidates per round at most (a multi-task run uses smaller rounds)
  SearchOptions search;
  int seed_records = 16;
  bool use_cost_model = true;
  std::string scheduler = "gradient";  // or "round-robin"
  uint64_t seed = 1;
  double min_repeat_ms = 100;
  // MeasureRequest.cutoff_us = cutoff_factor x the task's best latency (0: full repeats).
  double cutoff_factor = 0;
  bool flush_cache = false;  // GPU classes: time with cold caches
  // CPU model tasks: each timed call with the parameters evicted (MeasureRequest.cold_weights).
  bool cold_weights = false;
  int remeasure_top = 0;  // 0: no re-timing at the end
  double remeasure_ms = 500;
  // Runs the driver's heavy steps (a round's search, featurization and retraining of the
  // model) and returns when they are done; unset: on the calling thread. lathed runs them on a
  // niced thread while the driver's own thread, which takes the runner's locks, keeps its
  // priority.
  std::function<void(const std::function<void()>&)> run_heavy;
  // Searches rounds in the background, one per task at most, several tasks at once (see the
  // file comment); null: on the driver's thread. Not owned; must outlive RunDriver. A
  // background round also serializes its candidates' traces on the pool's thread.
  SearchPool* search_pool = nullptr;
};

// Where one task stands.
struct TaskStatus {
  int trials = 0;              // counted trials of this run
  int rounds = 0;              // rounds given
  double best_latency_us = 0;  // best ok record (earlier runs included); 0: none
  double best_gflops = 0;
  int64_t total_measured = 0;                 // programs measured for it, earlier runs included
  std::map<std::string, int> errors;          // failed trials of this run by error class name
  std::vector<std::pair<int, double>> curve;  // (run trial index, best GFLOP/s of the task)
  bool exhausted = false;                     // the search found nothing new to measure
  int remeasured = 0;
  int remeasure_failed = 0;
  double best_before_remeasure_us = 0;  // the best before the end-of-run re-timing (0: none)
};

struct DriverProgress {
  int trials_done = 0;  // counted over all tasks
  int budget = 0;
  int round = 0;              // rounds dispatched so far
  bool end_of_round = false;  // nothing outstanding: a round's outcomes are all in
  int errors = 0;
  const std::vector<TaskStatus>* tasks = nullptr;
  double objective_us = 0;  // sum(weight x best latency); 0 until every task has one
  int remeasure_done = 0;   // re-timing: requests finished of remeasure_total
  int remeasure_total = 0;
};

struct DriverResult {
  std::vector<TaskStatus> tasks;
  int trials = 0;
  double objective_us = 0;
  bool stopped = false;          // the runner said stop
  bool space_exhausted = false;  // every task's search ran dry before the budget was spent
};

// Runs the tuning loop over `tasks` (at least one; their spaces set) against `database` (the
// driver's own connection) with `runner`. Errors: a search that fails, a runner status; what was
// stored before stays stored.
absl::StatusOr<DriverResult> RunDriver(std::vector<DriverTask>& tasks, const DriverOptions& options,
                                       db::Database& database, Runner& runner,
                                       const std::function<void(const DriverProgress&)>& progress);

// sum(weight x latency) over `latencies_us`; 0 when one of them is 0 (no ok record yet).
double Objective(const std::vector<double>& weights, const std::vector<double>& latencies_us);

// How many of each task's best records the end-of-run re-timing covers, given `top` per task:
// `top` for a task whose share of the objective (weight x best latency) is the average share
// or more, proportionally fewer below it, at least 1; `top` for a task with no latency yet and
// for a run of one task.
std::vector<int> RetimeCounts(const std::vector<double>& weights,
                              const std::vector<double>& latencies_us, int top);

// The round size of a run: `batch` for one task, smaller for several so that the warm-up round
// over every task leaves most of the budget to the scheduler (at least 8, or budget / tasks when
// that is less, so that the warm-up reaches every task).
int RoundSize(int batch, int budget, int num_tasks);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_DRIVER_H_
