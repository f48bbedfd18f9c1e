#include "tuner/tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "db/database.h"
#include "db/record.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "measure/measurer.h"
#include "tuner/driver.h"
#include "tuner/local_runner.h"
#include "tuner/space.h"
#include "tuner/space_factory.h"
#include "tuner/task_scheduler.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

namespace {

using Clock = std::chrono::steady_clock;

std::string WorkerName() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0) return "embedded@localhost";
  return absl::StrCat("embedded@", host);
}

}  // namespace

absl::StatusOr<TuneResult> Tune(const TuneOptions& options) {
  const Clock::time_point start = Clock::now();
  const int64_t start_unix_ms = NowUnixMs();
  if (options.trials < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trials ", options.trials, " (need >= 1)"));
  }
  if (options.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", options.batch, " (need >= 1)"));
  }
  if (options.max_trials_per_task < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_trials_per_task ", options.max_trials_per_task, " (need >= 0)"));
  }
  if (options.db_path.empty()) return absl::InvalidArgumentError("empty database path");
  if (absl::StatusOr<std::unique_ptr<TaskScheduler>> s = MakeTaskScheduler(options.scheduler);
      !s.ok()) {
    return s.status();
  }
  std::vector<TuneTask> specs = options.tasks;
  if (specs.empty()) specs.push_back(TuneTask{options.workload, 1});
  std::vector<ir::Workload> workloads;
  std::set<std::string> keys;
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(specs[i].workload);
    if (!w.ok()) {
      if (specs.size() == 1) return w.status();
      return absl::InvalidArgumentError(
          absl::StrCat("task ", i + 1, " '", specs[i].workload, "': ", w.status().message()));
    }
    if (!(specs[i].weight > 0) || !std::isfinite(specs[i].weight)) {
      return absl::InvalidArgumentError(absl::StrCat("task ", i + 1, " '", w->canonical,
                                                     "': weight ", specs[i].weight,
                                                     " (need a positive number)"));
    }
    if (!keys.insert(w->key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("task ", i + 1, " '", w->canonical, "' is given twice"));
    }
    workloads.push_back(std::move(*w));
  }
  const bool gpu = options.target.kind == ir::TargetKind::kCuda;
  // cuda-emu:sm_XX: GPU candidates checked and timed on the GPU emulator, under its own class.
  const bool emulated = options.target.emulated();
  std::string device_class = options.device_class;
  if (device_class.empty() && emulated) device_class = options.target.ToString();
  if (device_class.empty()) {
    absl::StatusOr<std::string> dc = DeviceClassForTarget(options.target);
    if (!dc.ok()) return dc.status();
    device_class = *dc;
  }
  int gpu_ordinal = 0;
  if (gpu) {
    absl::StatusOr<int> ordinal = GpuOrdinalForTarget(options.target);
    if (!ordinal.ok()) return ordinal.status();
    gpu_ordinal = *ordinal;
  }

  std::vector<DriverTask> tasks;
  for (size_t i = 0; i < workloads.size(); ++i) {
    absl::StatusOr<std::unique_ptr<SearchSpace>> space =
        CreateSearchSpace(workloads[i], options.target, options.gpu_tf32);
    if (!space.ok()) return space.status();
    DriverTask t;
    t.workload = workloads[i];
    t.space = std::move(*space);
    t.weight = specs[i].weight;
    t.cap = options.max_trials_per_task;
    tasks.push_back(std::move(t));
  }

  if (absl::Status st = CreateParentDirectory(options.db_path); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path);
  if (!opened.ok()) return opened.status();
  db::Database& database = **opened;

  measure::MeasurerOptions mopts;
  mopts.child_path = options.measure_child;
  mopts.timeout_s = options.timeout_s;
  mopts.gpu_ordinal = gpu_ordinal;
  if (emulated) mopts.emulated_arch = options.target.arch;
  absl::StatusOr<std::unique_ptr<measure::Measurer>> measurer = measure::Measurer::Create(mopts);
  if (!measurer.ok()) return measurer.status();
  LocalRunner runner(workloads, device_class, WorkerName(), &database, measurer->get(),
                     options.stop);

  DriverOptions d;
  d.device_class = device_class;
  d.budget = options.trials;
  d.batch = options.batch;
  d.search = options.search;
  d.seed_records = options.seed_records;
  d.use_cost_model = options.use_cost_model;
  d.scheduler = options.scheduler;
  d.seed = options.seed != 0 ? options.seed
                             : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                                   std::random_device{}();
  d.min_repeat_ms = options.min_repeat_ms;
  d.cutoff_factor = options.cutoff_factor;
  // A GPU kernel's inputs would otherwise sit in its 50 MB L2 between calls.
  d.flush_cache = gpu;
  d.cold_weights = options.cold_weights && !gpu;
  d.remeasure_top = options.remeasure_top;
  d.remeasure_ms = options.remeasure_ms > 0 ? options.remeasure_ms : 5 * options.min_repeat_ms;

  std::function<void(const DriverProgress&)> progress;
  if (options.on_progress) {
    progress = [&](const DriverProgress& p) {
      TuneProgress t;
      t.trials_done = p.trials_done;
      t.trials_target = p.budget;
      t.round = p.round;
      t.end_of_round = p.end_of_round;
      t.errors = p.errors;
      t.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
      if (p.trials_done > 0) {
        t.eta_s = t.elapsed_s / p.trials_done * std::max(0, p.budget - p.trials_done);
      }
      t.remeasure_done = p.remeasure_done;
      t.remeasure_total = p.remeasure_total;
      t.objective_us = p.objective_us;
      for (size_t i = 0; i < p.tasks->size(); ++i) {
        const TaskStatus& s = (*p.tasks)[i];
        t.tasks.push_back(TuneTaskProgress{workloads[i].canonical, specs[i].weight, s.trials,
                                           s.best_gflops, s.best_latency_us});
        t.total_measured += s.total_measured;
      }
      // A single workload's bar shows its best; a multi-task run's shows the first task's.
      t.best_gflops = (*p.tasks)[0].best_gflops;
      t.best_latency_us = (*p.tasks)[0].best_latency_us;
      options.on_progress(t);
    };
  }
  absl::StatusOr<DriverResult> run = RunDriver(tasks, d, database, runner, progress);
  if (!run.ok()) return run.status();

  TuneResult result;
  result.device_class = device_class;
  result.db_path = database.path();
  result.trials = run->trials;
  result.stopped_early = run->stopped;
  result.space_exhausted = run->space_exhausted;
  result.objective_us = run->objective_us;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ir::Workload& w = workloads[i];
    const TaskStatus& s = run->tasks[i];
    TuneTaskResult t;
    t.workload = w.canonical;
    t.workload_key = w.key;
    t.weight = specs[i].weight;
    t.flops = w.flops;
    t.trials = runner.Progress(static_cast<int>(i)).done;
    t.has_best = s.best_latency_us > 0;
    t.best_latency_us = s.best_latency_us;
    t.best_gflops = s.best_gflops;
    t.errors = s.errors;
    t.curve = s.curve;
    t.remeasured = s.remeasured;
    t.remeasure_failed = s.remeasure_failed;
    for (const auto& [cls, n] : s.errors) result.errors[cls] += n;
    result.total_measured += s.total_measured;
    result.remeasured += s.remeasured;
    result.remeasure_failed += s.remeasure_failed;
    result.tasks.push_back(std::move(t));
  }
  const ir::Workload& first = workloads[0];
  result.workload = first.canonical;
  result.workload_key = first.key;
  if (tasks.size() == 1) {
    result.curve = run->tasks[0].curve;
    result.best_latency_before_remeasure_us = run->tasks[0].best_before_remeasure_us;
  }
  absl::StatusOr<std::optional<db::Record>> best = database.Best(first.key, device_class);
  if (!best.ok()) return best.status();
  if (best->has_value()) {
    const db::Record& b = **best;
    result.has_best = true;
    result.best_latency_us = b.median_us;
    result.best_gflops = b.Gflops();
    result.best_trace_json = b.trace_json;
    result.best_candidate_id = b.candidate_id;
    result.best_from_this_run = b.measured_at_ms >= start_unix_ms;
    result.best_remeasured = b.remeasured_at_ms > 0;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace lathe::tuner
