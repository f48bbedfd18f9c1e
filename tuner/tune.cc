#include "tuner/tune.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "codegen/lower.h"
#include "cost_model/database_io.h"
#include "cost_model/features.h"
#include "cost_model/xgb_model.h"
#include "db/database.h"
#include "db/record.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "lathe/v1/measure.pb.h"
#include "tuner/space.h"
#include "tuner/space_factory.h"
#include "tuner/tune_common.h"
#include "worker/measurer.h"

namespace lathe::tuner {

namespace {

using Clock = std::chrono::steady_clock;

std::string WorkerName() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == 0) return "embedded@localhost";
  return absl::StrCat("embedded@", host);
}

bool Stopped(const std::atomic<bool>* stop) {
  return stop != nullptr && stop->load(std::memory_order_relaxed);
}

struct RemeasureContext {
  db::Database& database;
  worker::Measurer& measurer;
  const ir::Workload& w;
  const std::string& device_class;
  bool gpu;
  const std::atomic<bool>* stop;
};

// Re-times the best `top` ok records that were never re-timed (TuneOptions::remeasure_top):
// two passes over the set, each record for ms / 2 per pass, the passes interleaved so that a
// burst of noise does not land on one record's whole figure. Each pass's repeats are added to
// the record as soon as it is measured, so a stop keeps what was done. A re-timing that does
// not come back ok leaves its record as it was (counted in remeasure_failed). Records whose
// re-timing moved them out of the best `top` may let never-re-timed ones in: the loop goes
// on until the best `top` are all re-timed or 2 x top records were.
void RemeasureBest(RemeasureContext& ctx, int top, double ms, TuneResult& result,
                   const std::function<void(int, int)>& on_progress) {
  std::set<std::string> tried;
  absl::StatusOr<std::optional<db::Record>> before = ctx.database.Best(ctx.w.key, ctx.device_class);
  if (before.ok() && before->has_value()) {
    result.best_latency_before_remeasure_us = (*before)->median_us;
  }
  while (static_cast<int>(tried.size()) < 2 * top && !Stopped(ctx.stop)) {
    absl::StatusOr<std::vector<db::Record>> best =
        ctx.database.TopK(ctx.w.key, ctx.device_class, top);
    if (!best.ok()) return;
    std::vector<db::Record> todo;
    for (db::Record& r : *best) {
      if (r.remeasured_at_ms == 0 && !tried.count(r.candidate_id) &&
          static_cast<int>(tried.size() + todo.size()) < 2 * top) {
        todo.push_back(std::move(r));
      }
    }
    if (todo.empty()) return;
    for (const db::Record& r : todo) tried.insert(r.candidate_id);
    std::set<std::string> failed;
    const int total = 2 * static_cast<int>(todo.size());
    int done = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (const db::Record& r : todo) {
        if (Stopped(ctx.stop)) return;
        if (failed.count(r.candidate_id)) continue;
        on_progress(done, total);
        lathe::v1::MeasureRequest req;
        req.set_candidate_id(r.candidate_id);
        req.set_workload(ctx.w.canonical);
        req.set_trace_json(r.trace_json);
        req.set_min_repeat_ms(ms / 2);
        req.set_flush_cache(ctx.gpu);
        absl::StatusOr<lathe::v1::MeasureResult> m = ctx.measurer.Measure(req);
        if (!m.ok()) return;  // the sandbox itself failed: keep what is stored
        ++done;
        std::vector<double> repeats(m->repeats_us().begin(), m->repeats_us().end());
        if (m->error_class() != lathe::v1::OK || repeats.empty() ||
            !ctx.database.AddRepeats(r.candidate_id, repeats, NowUnixMs()).ok()) {
          failed.insert(r.candidate_id);
          continue;
        }
        if (pass == 0) ++result.remeasured;
      }
    }
    result.remeasure_failed += static_cast<int>(failed.size());
    on_progress(total, total);
  }
}

}  // namespace

std::string CandidateId(const std::string& workload_key, const std::string& program_key,
                        const std::string& device_class) {
  return absl::StrCat(workload_key, ":", ir::Fnv1a64Hex(program_key), ":",
                      ir::Fnv1a64Hex(device_class));
}

absl::StatusOr<TuneResult> Tune(const TuneOptions& options) {
  const Clock::time_point start = Clock::now();
  if (options.trials < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trials ", options.trials, " (need >= 1)"));
  }
  if (options.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", options.batch, " (need >= 1)"));
  }
  if (options.db_path.empty()) return absl::InvalidArgumentError("empty database path");
  absl::StatusOr<ir::Workload> workload = ir::MakeWorkload(options.workload);
  if (!workload.ok()) return workload.status();
  const ir::Workload& w = *workload;
  const bool gpu = IsCudaTarget(options.target);
  if (!gpu && options.target != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown target '", options.target, "' (expected cpu or cuda[:N|:sm_XX])"));
  }
  std::string device_class = options.device_class;
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

  if (absl::Status st = CreateParentDirectory(options.db_path); !st.ok()) return st;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path);
  if (!opened.ok()) return opened.status();
  db::Database& database = **opened;

  absl::StatusOr<std::unique_ptr<SearchSpace>> space = CreateSearchSpace(w, options.target);
  if (!space.ok()) return space.status();

  absl::StatusOr<std::set<std::string>> already = MeasuredKeys(database, w.key, device_class);
  if (!already.ok()) return already.status();
  std::set<std::string> measured = std::move(*already);

  TuneResult result;
  result.workload = w.canonical;
  result.workload_key = w.key;
  result.device_class = device_class;
  result.db_path = database.path();

  double best_gflops = 0, best_latency_us = 0;
  if (absl::StatusOr<std::optional<db::Record>> b = database.Best(w.key, device_class);
      b.ok() && b->has_value()) {
    best_gflops = (*b)->Gflops();
    best_latency_us = (*b)->median_us;
  }

  cost_model::CostModel model =
      options.use_cost_model ? InitialModel(database, w, device_class) : cost_model::CostModel();

  worker::MeasurerOptions mopts;
  mopts.child_path = options.measure_child;
  mopts.timeout_s = options.timeout_s;
  mopts.gpu_ordinal = gpu_ordinal;
  absl::StatusOr<std::unique_ptr<worker::Measurer>> measurer = worker::Measurer::Create(mopts);
  if (!measurer.ok()) return measurer.status();

  const uint64_t seed =
      options.seed != 0
          ? options.seed
          : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ std::random_device{}();
  std::mt19937_64 rng(seed);
  const std::string worker_name = WorkerName();

  int errors = 0;
  std::set<std::string> this_run;  // candidate ids measured by this run
  auto snapshot = [&] {
    TuneProgress p;
    p.trials_done = result.trials;
    p.trials_target = options.trials;
    p.errors = errors;
    p.best_gflops = best_gflops;
    p.best_latency_us = best_latency_us;
    p.total_measured = static_cast<int64_t>(measured.size());
    p.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    if (result.trials > 0) {
      p.eta_s = p.elapsed_s / result.trials * (options.trials - result.trials);
    }
    return p;
  };
  auto progress = [&](int round, bool end_of_round) {
    if (!options.on_progress) return;
    TuneProgress p = snapshot();
    p.round = round;
    p.end_of_round = end_of_round;
    options.on_progress(p);
  };

  for (int round = 1; result.trials < options.trials; ++round) {
    if (Stopped(options.stop)) {
      result.stopped_early = true;
      break;
    }
    std::vector<Candidate> seeds =
        SeedsFromDatabase(database, **space, w, device_class, options.seed_records);
    const int want = std::min(options.batch, options.trials - result.trials);
    // Before the model has learned anything, the space's rule-picked candidates lead.
    absl::StatusOr<std::vector<Candidate>> batch =
        NextRound(**space, model, seeds, measured, want, options.search, rng);
    if (!batch.ok()) return batch.status();

    std::vector<db::Record> records;
    std::vector<cost_model::FeatureMatrix> programs;
    std::vector<double> throughputs;
    std::set<std::string> in_round;
    for (const Candidate& c : *batch) {
      if (Stopped(options.stop)) {
        result.stopped_early = true;
        break;
      }
      // The search promises unmeasured candidates; a repeat would be a wasted trial.
      const std::string key = CandidateKey(c);
      if (measured.count(key) || !in_round.insert(key).second) continue;
      // The stored trace keeps the sketch and decisions, so later runs can seed from it.
      const std::string trace_json = ir::TraceToJson(c.trace);
      lathe::v1::MeasureRequest req;
      req.set_candidate_id(CandidateId(w.key, key, device_class));
      req.set_workload(w.canonical);
      req.set_trace_json(trace_json);
      req.set_min_repeat_ms(options.min_repeat_ms);
      // A GPU kernel's inputs would otherwise sit in its 50 MB L2 between calls.
      req.set_flush_cache(gpu);
      if (best_latency_us > 0) req.set_cutoff_us(options.cutoff_factor * best_latency_us);
      absl::StatusOr<lathe::v1::MeasureResult> m = (*measurer)->Measure(req);
      if (!m.ok()) {
        // The sandbox itself failed: keep what this round measured, then report.
        if (!records.empty()) (void)database.InsertBatch(records);
        return m.status();
      }

      db::Record r;
      r.candidate_id = req.candidate_id();
      r.workload = w.canonical;
      r.workload_key = w.key;
      r.device_class = device_class;
      r.trace_json = trace_json;
      r.repeats_us.assign(m->repeats_us().begin(), m->repeats_us().end());
      r.median_us = m->median_us();
      r.cv = m->cv();
      r.flops = w.flops;
      r.error_class = ErrorClassFromProto(m->error_class());
      r.error_msg = m->error_msg();
      r.worker = worker_name;
      r.lathe_version = kLatheVersion;
      r.measured_at_ms = NowUnixMs();
      if (r.error_class == db::ErrorClass::kOk && !(r.median_us > 0)) {
        r.error_class = db::ErrorClass::kRuntimeError;
        r.error_msg = "ok result without a positive median latency";
      }
      if (r.error_class != db::ErrorClass::kOk && !(r.median_us >= 0)) r.median_us = 0;

      ++result.trials;
      measured.insert(key);
      this_run.insert(r.candidate_id);
      if (r.error_class == db::ErrorClass::kOk) {
        const double g = r.Gflops();
        if (g > best_gflops) {
          best_gflops = g;
          best_latency_us = r.median_us;
        }
      } else {
        ++errors;
        ++result.errors[std::string(db::ErrorClassName(r.error_class))];
      }
      result.curve.emplace_back(result.trials, best_gflops);

      absl::StatusOr<cost_model::FeatureMatrix> f = CandidateFeatures(**space, c);
      if (f.ok()) {
        programs.push_back(std::move(*f));
        throughputs.push_back(r.error_class == db::ErrorClass::kOk ? 1.0 / r.median_us : 0.0);
      }
      records.push_back(std::move(r));
      progress(round, /*end_of_round=*/false);
    }

    if (!records.empty()) {
      absl::StatusOr<std::vector<db::InsertResult>> ins = database.InsertBatch(records);
      if (!ins.ok()) return ins.status();
    }
    if (result.stopped_early) {
      progress(round, /*end_of_round=*/true);
      break;
    }
    if (records.empty()) {
      // Nothing new to measure: the space (as the search sees it) is exhausted.
      result.space_exhausted = true;
      break;
    }
    if (options.use_cost_model && !programs.empty()) {
      std::vector<std::string> keys(programs.size(), w.key);
      // A failed retraining keeps the previous model; tuning goes on with it.
      (void)model.Update(programs, throughputs, keys);
      if (model.trained()) (void)cost_model::SaveToDatabase(database, device_class, model);
    }
    progress(round, /*end_of_round=*/true);
  }

  result.total_measured = static_cast<int64_t>(measured.size());
  if (options.remeasure_top > 0 && !result.stopped_early) {
    const double ms = options.remeasure_ms > 0 ? options.remeasure_ms : 5 * options.min_repeat_ms;
    RemeasureContext ctx{database, **measurer, w, device_class, gpu, options.stop};
    RemeasureBest(ctx, options.remeasure_top, ms, result, [&](int done, int total) {
      if (!options.on_progress) return;
      TuneProgress p = snapshot();
      p.remeasure_done = done;
      p.remeasure_total = total;
      options.on_progress(p);
    });
  }
  absl::StatusOr<std::optional<db::Record>> best = database.Best(w.key, device_class);
  if (!best.ok()) return best.status();
  if (best->has_value()) {
    const db::Record& b = **best;
    result.has_best = true;
    result.best_latency_us = b.median_us;
    result.best_gflops = b.Gflops();
    result.best_trace_json = b.trace_json;
    result.best_candidate_id = b.candidate_id;
    result.best_from_this_run = this_run.count(b.candidate_id) > 0;
    result.best_remeasured = b.remeasured_at_ms > 0;
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace lathe::tuner
