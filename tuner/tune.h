// \file
// The embedded tuning run (CONTRACT.md "lathe tune" without --tuner): one workload, or several
// tasks (workloads with weights) sharing one trial budget, tuned on this machine against a
// local SQLite database by the tuning driver (tuner/driver.h) with the embedded runner
// (tuner/local_runner.h). Each round the task scheduler picks a task, the evolutionary search
// proposes candidates never measured before, they are measured one by one in a sandboxed child
// process, the round's records are committed in one transaction and taught to the cost model,
// which is saved. A run resumes where earlier runs stopped: traces already in the database
// are never measured again, the best records seed the search, and the saved cost model
// warm-starts the ranking.
//
// Thread-safety: Tune() is a blocking call; separate calls may run concurrently on different
// databases (SQLite serializes writers on the same file).
#ifndef LATHE_TUNER_TUNE_H_
#define LATHE_TUNER_TUNE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/target.h"
#include "tuner/search.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

// A task of a multi-task run: a workload and how much it counts.
struct TuneTask {
  std::string workload;  // spec
  double weight = 1;     // > 0: how often it runs (its count in a model)
};

// Where one task of a run stands (TuneProgress::tasks).
struct TuneTaskProgress {
  std::string workload;  // canonical spec
  double weight = 1;
  int trials = 0;  // measured in this run
  double best_gflops = 0;
  double best_latency_us = 0;
};

// Where a run stands; passed to TuneOptions::on_progress after every measured candidate, at
// the end of every round (end_of_round = true) and during the re-timing at the end.
struct TuneProgress {
  int trials_done = 0;         // measured in this run
  int trials_target = 0;       // requested for this run
  int round = 0;               // 1-based round of the current batch
  bool end_of_round = false;   // the round's records are committed
  int errors = 0;              // failed candidates in this run
  double best_gflops = 0;      // best so far, earlier runs included (0: none yet)
  double best_latency_us = 0;  // its median latency
  int64_t total_measured = 0;  // traces measured for the workload, earlier runs included
  double elapsed_s = 0;        // since the run started
  double eta_s = -1;           // estimated time left; < 0 when unknown
  // The end of a run re-times its best records (TuneOptions::remeasure_top): while it does,
  // remeasure_total > 0 and remeasure_done counts the re-timings finished (each record is
  // re-timed in two passes, so total = 2 x the records).
  int remeasure_done = 0;
  int remeasure_total = 0;
  // Every task (one for a single workload) and sum(weight x best latency) (0 until each task
  // has an ok record).
  std::vector<TuneTaskProgress> tasks;
  double objective_us = 0;
};

struct TuneOptions {
  std::string workload;  // spec, e.g. "matmul:m=256,n=256,k=256"
  // Several tasks instead of `workload` (which is then ignored): `trials` is their total
  // budget, spread by the task scheduler. One task behaves as `workload` does.
  std::vector<TuneTask> tasks;
  std::string scheduler = "gradient";  // or "round-robin" (tasks only)
  int trials = 300;                    // candidates to measure in this run
  // With tasks: the most trials one task may take in this run (0: only `trials` limits it),
  // e.g. a model's tuning held to N trials per workload while the scheduler spreads the rest.
  int max_trials_per_task = 0;
  // CPU: time every candidate with its parameters evicted from the caches before each call
  // (MeasureRequest.cold_weights), as a large model's steps run (`lathe tune --weights cold`).
  bool cold_weights = false;
  int batch = 64;       // candidates per round
  std::string db_path;  // created (with its directory) when missing; required
  // cpu (this machine's CPU), or a GPU of this machine: cuda, cuda:N, cuda:sm_XX (measured on
  // the GPU that tuner::GpuOrdinalForTarget picks), or cuda-emu:sm_XX (the GPU space's
  // candidates checked and timed on the GPU emulator: no GPU needed). Parsed by the caller
  // (ir::ParseTarget) where the user names it.
  ir::Target target;
  // GPU targets: the space may use TF32 tensor cores (`--gpu-math tf32`; fp32 by default).
  bool gpu_tf32 = false;
  // Empty: codegen::HostDeviceClass() for cpu, tuner::DeviceClassForTarget for a GPU, the
  // target itself ("cuda-emu:sm_90") for the emulator.
  std::string device_class;
  uint64_t seed = 0;  // 0: seeded from the clock
  SearchOptions search;
  // False: every round is random sampling (no model is loaded, trained or saved); the
  // baseline against which benchmarks measure what the cost model buys.
  bool use_cost_model = true;
  double min_repeat_ms = 100;  // per candidate; tests use a few ms
  double timeout_s = 60;       // deadline of one candidate (build, check, timing)
  // A candidate whose first call is this many times slower than the best so far is timed
  // by that call alone (MeasureRequest.cutoff_us); 0: every candidate gets full repeats.
  double cutoff_factor = 10;
  // At the end of a run that was not stopped, the best this many ok records of the workload
  // (earlier runs included) that were never re-timed are timed again, for remeasure_ms each
  // in two interleaved passes, and the repeats are added to their records
  // (db::Database::AddRepeats): a short measurement that caught a lucky moment cannot stay the
  // best. Repeated until the best `remeasure_top` are all re-timed (at most 2 x
  // remeasure_top records), then while the best alone was never re-timed (at most 4 x
  // remeasure_top records in all). 0: off.
  int remeasure_top = 5;
  // Time spent repeating each record in the re-timing (split over the two passes); 0: five
  // times min_repeat_ms.
  double remeasure_ms = 0;
  // Seeds the search from at most this many of the best stored records.
  int seed_records = 16;
  // The measurement child binary; empty: found as measure::FindMeasureChild() says.
  std::string measure_child;
  std::function<void(const TuneProgress&)> on_progress;
  // When set and true, the run stops after the candidate being measured (its round's
  // measurements are committed) and returns with stopped_early. May be set from a signal
  // handler.
  const std::atomic<bool>* stop = nullptr;
};

// The outcome of one task of a run.
struct TuneTaskResult {
  std::string workload;  // canonical spec
  std::string workload_key;
  double weight = 1;
  double flops = 0;
  int trials = 0;  // measured in this run
  bool has_best = false;
  double best_latency_us = 0;  // best ok record, earlier runs included
  double best_gflops = 0;
  std::map<std::string, int> errors;
  std::vector<std::pair<int, double>> curve;  // (run trial index, best GFLOP/s of the task)
  int remeasured = 0;
  int remeasure_failed = 0;
};

struct TuneResult {
  // For a multi-task run the single-workload fields below describe the first task, except
  // trials, errors and seconds, which are the run's.
  std::string workload;      // canonical spec
  std::string workload_key;  // its database key
  std::string device_class;
  int trials = 0;              // measured in this run
  int64_t total_measured = 0;  // traces measured for the workload, earlier runs included
  bool has_best = false;       // false when no ok record exists at all
  double best_latency_us = 0;  // best ok record, earlier runs included
  double best_gflops = 0;
  std::string best_trace_json;
  std::string best_candidate_id;
  bool best_from_this_run = false;
  bool best_remeasured = false;  // the best record's figure includes a careful re-timing
  // Records re-timed at the end of this run, and those with a re-timing pass that did not come
  // back ok (failed the check, timed out): such a pass is reported here, not stored; the record
  // keeps what it had and the repeats of a pass that did come back ok.
  int remeasured = 0;
  int remeasure_failed = 0;
  // The best latency before the re-timing (0 when none was done); best_latency_us is after.
  double best_latency_before_remeasure_us = 0;
  // Failed candidates of this run, by error class name ("compile_error", ...).
  std::map<std::string, int> errors;
  // (trial index in this run, 1-based; best GFLOP/s so far, earlier runs included).
  std::vector<std::pair<int, double>> curve;
  std::string db_path;
  bool stopped_early = false;    // the stop flag ended the run
  bool space_exhausted = false;  // the search found no unmeasured candidate
  double seconds = 0;            // wall time of the run
  // Every task in the order given (one for a single workload), and sum(weight x best
  // latency) over them (0 when one has no ok record).
  std::vector<TuneTaskResult> tasks;
  double objective_us = 0;
};

// Tunes `options.workload` (or `options.tasks`). InvalidArgument for a malformed spec or bad
// options (trials or batch < 1, empty db path, a weight that is not positive, a workload given
// twice, an unknown scheduler); the database's status when it cannot be opened or written;
// Unavailable when the measurement child cannot be started. Records committed before a
// failure stay in the database. A run in which every candidate failed still succeeds
// (has_best tells whether any ok record exists).
absl::StatusOr<TuneResult> Tune(const TuneOptions& options);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_TUNE_H_
