#include "tools/cli_remote.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/client.h"
#include "fmt/format.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "tools/cli_common.h"
#include "tools/cli_tasks.h"

namespace lathe::tools {

namespace {

using json = nlohmann::json;

int FailStatus(const std::string& cmd, const absl::Status& s) {
  return Fail(cmd, std::string(s.message()),
              absl::IsInvalidArgument(s) ? kExitUsage : kExitFailure);
}

// Strings from the daemon may hold anything; JSON output needs valid UTF-8.
std::string SafeText(const std::string& s) {
  json j = s;
  std::string out = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return json::parse(out).get<std::string>();
}

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

absl::StatusOr<std::unique_ptr<client::TunerClient>> Connect(const std::string& tuner,
                                                             const std::string& token_file,
                                                             const std::string& tls_ca) {
  client::ClientOptions c;
  c.address = tuner;
  c.token_file = token_file;
  c.tls_ca = tls_ca;
  return client::TunerClient::Connect(c);
}

// --- Ctrl-C while following a job: the first detaches (or cancels), the second kills ---

std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the flag is set from a handler");

extern "C" void OnRemoteSigint(int) {
  if (g_interrupted.exchange(true)) {
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
}

int ErrorCount(const lathe::v1::WorkloadProgress& w) {
  int n = 0;
  for (const auto& [cls, count] : w.errors()) n += count;
  return n;
}

json JobJson(const lathe::v1::JobStatus& j) {
  json workloads = json::array();
  for (const lathe::v1::WorkloadProgress& w : j.workloads()) {
    json errors = json::object();
    for (const auto& [cls, n] : w.errors()) errors[SafeText(cls)] = n;
    workloads.push_back(
        {{"workload", SafeText(w.workload())},
         {"trials_done", w.trials_done()},
         {"trials_target", w.trials_target()},
         {"best_latency_us", w.best_latency_us()},
         {"best_gflops", w.best_gflops()},
         {"errors", errors},
         {"remeasured", w.remeasured()},
         {"remeasure_failed", w.remeasure_failed()},
         {"remeasure_pending", w.remeasure_pending()},
         {"weight", w.weight()},
         // The task's part of the objective (weight x best latency / objective).
         {"share", j.objective_us() > 0 ? json(w.weight() * w.best_latency_us() / j.objective_us())
                                        : json()}});
  }
  json history = json::array();
  for (const lathe::v1::ObjectivePoint& p : j.objective_history()) {
    history.push_back(
        {{"at", p.at_ms()}, {"trials_done", p.trials_done()}, {"objective_us", p.objective_us()}});
  }
  // How far the objective fell since its first point (the daemon keeps the history with the
  // job, across restarts): `fell` is the fraction of the first objective gone.
  json summary;
  if (j.objective_history_size() > 0 && j.objective_history(0).objective_us() > 0) {
    const lathe::v1::ObjectivePoint& first = j.objective_history(0);
    const double current =
        j.objective_us() > 0 ? j.objective_us() : j.objective_history().rbegin()->objective_us();
    summary = {{"points", j.objective_history_size()},
               {"first_us", first.objective_us()},
               {"first_at", first.at_ms()},
               {"first_trials_done", first.trials_done()},
               {"current_us", current},
               {"fell", 1 - current / first.objective_us()}};
  }
  return {{"id", SafeText(j.job_id())},
          {"state", client::JobStateName(j.state())},
          {"device_class", SafeText(j.device_class())},
          {"message", SafeText(j.message())},
          {"created_at", j.created_at_ms()},
          {"updated_at", j.updated_at_ms()},
          {"trials_done", j.trials_done()},
          {"trials_budget", j.trials_budget()},
          {"objective_us", j.objective_us() > 0 ? json(j.objective_us()) : json()},
          {"objective_history", history},
          {"objective_summary", summary},
          {"workloads", workloads}};
}

// A job of several workloads (a model's tasks): one line for the job (its trials, its
// objective and how far it fell), then its tasks by their share of the objective, the
// largest first (at most `top`, then how many more).
void PrintTasksJob(const lathe::v1::JobStatus& j, int top) {
  std::string objective = "-";
  if (j.objective_us() > 0) {
    objective = fmt::format("{:.1f} us", j.objective_us());
    if (j.objective_history_size() > 1) {
      const lathe::v1::ObjectivePoint& first = j.objective_history(0);
      objective +=
          fmt::format(" ({:.1f}% lower than at {} trials: {:.1f} us; {} points)",
                      100 * (1 - j.objective_us() / first.objective_us()), first.trials_done(),
                      first.objective_us(), j.objective_history_size());
    }
  }
  std::printf("%-20s %-10s %-14s %d tasks, objective %s\n", SafeText(j.job_id()).c_str(),
              client::JobStateName(j.state()).c_str(),
              fmt::format("{}/{}", j.trials_done(), j.trials_budget()).c_str(), j.workloads_size(),
              objective.c_str());
  std::vector<int> order(static_cast<size_t>(j.workloads_size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto part = [&](int i) {
    const lathe::v1::WorkloadProgress& w = j.workloads(i);
    return w.weight() * w.best_latency_us();
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return part(a) > part(b); });
  for (size_t k = 0; k < order.size() && static_cast<int>(k) < top; ++k) {
    const lathe::v1::WorkloadProgress& w = j.workloads(order[k]);
    const std::string share = j.objective_us() > 0
                                  ? fmt::format("{:5.1f}%", 100 * part(order[k]) / j.objective_us())
                                  : "    -";
    const std::string best =
        w.best_latency_us() > 0 ? fmt::format("{:.1f} us", w.best_latency_us()) : "-";
    std::printf("  %s %12s x%-3g %5d trials  %s\n", share.c_str(), best.c_str(), w.weight(),
                w.trials_done(), SafeText(w.workload()).c_str());
  }
  if (j.workloads_size() > top) std::printf("  (%d more tasks)\n", j.workloads_size() - top);
}

}  // namespace

int RunRemoteTune(const TuneCliOptions& o) {
  const std::string cmd = "lathe tune";
  absl::StatusOr<std::vector<tuner::TuneTask>> tasks = CollectTasks(o);
  if (!tasks.ok()) return Fail(cmd, std::string(tasks.status().message()), kExitUsage);
  if (tasks->empty())
    return Fail(cmd, "give --workload SPEC (repeatable) or --tasks FILE", kExitUsage);
  const bool multi = tasks->size() > 1;
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(tasks->front().workload);
  if (!w.ok()) return Fail(cmd, std::string(w.status().message()), kExitUsage);
  if (absl::StatusOr<ir::Target> t = ir::ParseTarget(o.target); !t.ok()) {
    return Fail(cmd,
                "unknown --target '" + o.target + "' (expected cpu, cuda[:N] or cuda-emu:sm_XX)",
                kExitUsage);
  }
  if (o.trials < 1) return Fail(cmd, fmt::format("--trials {} (need >= 1)", o.trials), kExitUsage);
  if (o.batch < 1) return Fail(cmd, fmt::format("--batch {} (need >= 1)", o.batch), kExitUsage);
  absl::StatusOr<bool> cold = ColdWeights(o.weights);
  if (!cold.ok()) return Fail(cmd, std::string(cold.status().message()), kExitUsage);
  if (o.max_trials_per_task < 0) {
    return Fail(cmd, fmt::format("--max-trials-per-task {} (need >= 0)", o.max_trials_per_task),
                kExitUsage);
  }
  if (!(o.min_repeat_ms >= 0)) {
    return Fail(cmd, fmt::format("--min-repeat-ms {} (need >= 0)", o.min_repeat_ms), kExitUsage);
  }
  if (o.remeasure_top < 0) {
    return Fail(cmd, fmt::format("--remeasure-top {} (need >= 0)", o.remeasure_top), kExitUsage);
  }
  absl::StatusOr<std::unique_ptr<client::TunerClient>> client =
      Connect(o.tuner, o.token_file, o.tls_ca);
  if (!client.ok()) return FailStatus(cmd, client.status());

  lathe::v1::JobSpec spec;
  if (multi) {
    // A tasks job: --trials is the budget of all of them (an older daemon ignores `tasks` and
    // refuses the job for its empty workloads).
    for (const tuner::TuneTask& t : *tasks) {
      lathe::v1::TaskSpec* ts = spec.add_tasks();
      ts->set_workload(t.workload);
      ts->set_weight(t.weight);
    }
  } else {
    spec.add_workloads(w->canonical);
  }
  spec.set_target(o.target);
  spec.set_trials(o.trials);
  spec.set_batch(o.batch);
  spec.set_seed(o.seed);
  spec.set_min_repeat_ms(o.min_repeat_ms);
  // One workload: its trials are already its cap.
  if (multi) spec.set_max_trials_per_task(o.max_trials_per_task);
  spec.set_cold_weights(*cold);
  if (o.remeasure_top_given) spec.set_remeasure_top(o.remeasure_top);
  absl::StatusOr<std::string> job_id = (*client)->SubmitJob(spec);
  if (!job_id.ok()) return FailStatus(cmd, job_id.status());
  if (multi) {
    fmt::print(stderr, "lathe tune: {} tasks on lathed at {} (job {}), {} trials in all\n",
               tasks->size(), o.tuner, *job_id, o.trials);
  } else {
    fmt::print(stderr, "lathe tune: {} on lathed at {} (job {}), {} trials\n", w->canonical,
               o.tuner, *job_id, o.trials);
  }

  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO) == 1;
  bool bar_shown = false;
  int last_printed = -1;
  int last_retiming_printed = -1;  // re-timings done when last printed (not a tty)
  lathe::v1::JobState last_state = lathe::v1::JOB_STATE_UNSPECIFIED;
  tuner::TuneResult r;
  r.workload = w->canonical;
  r.workload_key = w->key;
  TaskProgressPrinter tasks_printer(tty);
  // A tasks job: every task's progress, the run's trials and errors, the objective.
  auto absorb_tasks = [&](const lathe::v1::JobStatus& s) {
    r.tasks.clear();
    r.errors.clear();
    r.remeasured = r.remeasure_failed = 0;
    for (const lathe::v1::WorkloadProgress& wp : s.workloads()) {
      tuner::TuneTaskResult t;
      t.workload = wp.workload();
      t.weight = wp.weight() > 0 ? wp.weight() : 1;
      t.trials = wp.trials_done();
      t.has_best = wp.best_latency_us() > 0;
      t.best_latency_us = wp.best_latency_us();
      t.best_gflops = wp.best_gflops();
      for (const auto& [cls, n] : wp.errors()) {
        t.errors[cls] = n;
        r.errors[cls] += n;
      }
      t.remeasured = wp.remeasured();
      t.remeasure_failed = wp.remeasure_failed();
      r.remeasured += wp.remeasured();
      r.remeasure_failed += wp.remeasure_failed();
      if (absl::StatusOr<ir::Workload> tw = ir::MakeWorkload(wp.workload()); tw.ok()) {
        t.workload_key = tw->key;
      }
      r.tasks.push_back(std::move(t));
    }
    r.trials = s.trials_done();
    r.total_measured = s.trials_done();
    r.objective_us = s.objective_us();
  };
  auto absorb = [&](const lathe::v1::JobStatus& s) {
    if (!s.device_class().empty()) r.device_class = s.device_class();
    if (multi) {
      absorb_tasks(s);
      return;
    }
    if (s.workloads_size() == 0) return;
    const lathe::v1::WorkloadProgress& wp = s.workloads(0);
    if (wp.trials_done() != r.trials && wp.best_gflops() > 0) {
      r.curve.emplace_back(wp.trials_done(), wp.best_gflops());
    }
    r.trials = wp.trials_done();
    r.total_measured = wp.trials_done();
    r.errors.clear();
    for (const auto& [cls, n] : wp.errors()) r.errors[cls] = n;
    r.remeasured = wp.remeasured();
    r.remeasure_failed = wp.remeasure_failed();
    if (wp.best_latency_us() > 0) {
      r.has_best = true;
      r.best_latency_us = wp.best_latency_us();
      r.best_gflops = wp.best_gflops();
    }
  };
  auto on_status = [&](const lathe::v1::JobStatus& s) {
    absorb(s);
    if (s.state() != last_state && !tty) {
      fmt::print(stderr, "lathe tune: job {} is {}\n", s.job_id(), client::JobStateName(s.state()));
    }
    last_state = s.state();
    if (s.workloads_size() == 0) return;
    if (multi) {
      tuner::TuneProgress p;
      p.trials_done = s.trials_done();
      p.trials_target = s.trials_budget() > 0 ? s.trials_budget() : o.trials;
      p.objective_us = s.objective_us();
      for (const lathe::v1::WorkloadProgress& wp : s.workloads()) {
        p.errors += ErrorCount(wp);
        p.tasks.push_back(tuner::TuneTaskProgress{wp.workload(), wp.weight(), wp.trials_done(),
                                                  wp.best_gflops(), wp.best_latency_us()});
        p.remeasure_done += wp.remeasured() + wp.remeasure_failed();
        p.remeasure_total += wp.remeasure_pending();
      }
      p.remeasure_total = p.remeasure_total > 0 ? p.remeasure_total + p.remeasure_done : 0;
      p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (p.trials_done > 0) {
        p.eta_s = p.elapsed_s / p.trials_done * std::max(0, p.trials_target - p.trials_done);
      }
      // Without a terminal, a block per batch of trials (and at the end).
      p.end_of_round = p.trials_done != last_printed &&
                       (last_printed < 0 || p.trials_done / o.batch != last_printed / o.batch ||
                        client::IsFinal(s.state()));
      if (p.end_of_round) last_printed = p.trials_done;
      tasks_printer.Update(p);
      return;
    }
    const lathe::v1::WorkloadProgress& wp = s.workloads(0);
    tuner::TuneProgress p;
    p.trials_done = wp.trials_done();
    p.trials_target = wp.trials_target() > 0 ? wp.trials_target() : o.trials;
    p.errors = ErrorCount(wp);
    p.best_gflops = wp.best_gflops();
    p.best_latency_us = wp.best_latency_us();
    if (wp.remeasure_pending() > 0) {  // the daemon re-times the best records
      p.remeasure_done = wp.remeasured() + wp.remeasure_failed();
      p.remeasure_total = p.remeasure_done + wp.remeasure_pending();
    }
    p.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (p.trials_done > 0 && p.trials_done < p.trials_target) {
      p.eta_s = p.elapsed_s / p.trials_done * (p.trials_target - p.trials_done);
    } else if (p.trials_done >= p.trials_target) {
      p.eta_s = 0;
    }
    if (tty) {
      fmt::print(stderr, "\r{}\x1b[K", ProgressLine(p));
      std::fflush(stderr);
      bar_shown = true;
    } else if (p.remeasure_total > 0) {
      if (p.remeasure_done != last_retiming_printed) {
        fmt::print(stderr, "{}\n", ProgressLine(p));
        last_retiming_printed = p.remeasure_done;
      }
    } else if (p.trials_done != last_printed &&
               (last_printed < 0 || p.trials_done / o.batch != last_printed / o.batch ||
                client::IsFinal(s.state()))) {
      fmt::print(stderr, "{}\n", ProgressLine(p));
      last_printed = p.trials_done;
    }
  };

  absl::StatusOr<lathe::v1::JobStatus> final_status;
  {
    g_interrupted.store(false);
    SigintScope sigint(OnRemoteSigint);
    final_status = (*client)->Watch(*job_id, on_status, &g_interrupted);
  }
  if (bar_shown) fmt::print(stderr, "\n");

  TuneWhere where;
  where.tuner = o.tuner;
  where.job_id = *job_id;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!final_status.ok()) {
    if (!absl::IsCancelled(final_status.status())) {
      return Fail(cmd, fmt::format("following job {}: {} (the job may still be running; see "
                                   "lathe jobs --tuner {})",
                                   *job_id, std::string(final_status.status().message()), o.tuner));
    }
    if (o.cancel_on_interrupt) {
      absl::StatusOr<lathe::v1::JobStatus> c = (*client)->Cancel(*job_id);
      if (!c.ok()) {
        return Fail(
            cmd, fmt::format("cancelling job {}: {}", *job_id, std::string(c.status().message())));
      }
      absorb(*c);
      where.state = client::JobStateName(c->state());
      r.stopped_early = true;
      fmt::print(stderr, "lathe tune: cancelled job {} after {} trials; every result is kept\n",
                 *job_id, r.trials);
    } else {
      where.state = client::JobStateName(last_state);
      where.detached = true;
      r.stopped_early = true;
      fmt::print(stderr,
                 "lathe tune: detached; job {} keeps running on lathed at {} (follow it with "
                 "lathe jobs --tuner {}; --cancel-on-interrupt cancels instead)\n",
                 *job_id, o.tuner, o.tuner);
    }
  } else {
    absorb(*final_status);
    where.state = client::JobStateName(final_status->state());
    if (final_status->state() == lathe::v1::FAILED) {
      return Fail(cmd, fmt::format("job {} failed on lathed at {}: {}", *job_id, o.tuner,
                                   final_status->message()));
    }
    if (final_status->state() == lathe::v1::CANCELLED) {
      r.stopped_early = true;
      fmt::print(stderr, "lathe tune: job {} was cancelled after {} trials; every result is kept\n",
                 *job_id, r.trials);
    }
  }

  tasks_printer.Finish();
  if (multi) return FinishTasks(o, r, where);
  // The best record (with its trace), earlier jobs included, from the daemon's database.
  if (!r.device_class.empty()) {
    absl::StatusOr<lathe::v1::QueryBestResponse> best =
        (*client)->QueryBest(w->canonical, r.device_class);
    if (best.ok() && best->found()) {
      const double job_best = r.best_latency_us;
      r.has_best = true;
      r.best_latency_us = best->latency_us();
      r.best_gflops = best->gflops();
      r.best_trace_json = best->trace_json();
      r.best_from_this_run = job_best > 0 && job_best <= best->latency_us() * (1 + 1e-9);
      if (!best->device_class().empty()) r.device_class = best->device_class();
    } else if (!best.ok()) {
      fmt::print(stderr, "lathe tune: could not fetch the best record: {}\n",
                 std::string(best.status().message()));
      r.best_from_this_run = r.has_best;
    } else {
      r.best_from_this_run = r.has_best;
    }
  }
  return FinishTune(o, *w, r, where);
}

int RunRemoteQuery(const QueryOptions& q, const RemoteOptions& remote) {
  const std::string cmd = "lathe query";
  if (q.workload.empty()) return Fail(cmd, "--workload is required", kExitUsage);
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(q.workload);
  if (!spec.ok()) return Fail(cmd, std::string(spec.status().message()), kExitUsage);
  const std::string canonical = spec->ToString();
  std::string device_class = q.device_class;
  if (device_class.empty()) {
    absl::StatusOr<std::string> dc = ResolveDeviceClass(q.target);
    if (dc.ok()) {
      device_class = *dc;
    } else if (absl::IsUnimplemented(dc.status())) {
      device_class = q.target;  // a GPU class only the daemon's workers know
    } else {
      return Fail(cmd, std::string(dc.status().message()), kExitUsage);
    }
  }
  absl::StatusOr<std::unique_ptr<client::TunerClient>> client =
      Connect(remote.tuner, remote.token_file, remote.tls_ca);
  if (!client.ok()) return FailStatus(cmd, client.status());
  absl::StatusOr<lathe::v1::QueryBestResponse> r = (*client)->QueryBest(canonical, device_class);
  if (!r.ok()) return FailStatus(cmd, r.status());
  const std::string workload = r->workload().empty() ? canonical : r->workload();
  if (!r->found()) {
    std::string why = r->explanation().empty() ? "no record for " + workload + " on " +
                                                     device_class + " at lathed " + remote.tuner
                                               : r->explanation();
    if (remote.json) {
      json out = {{"found", false},
                  {"workload", SafeText(workload)},
                  {"device_class", SafeText(device_class)},
                  {"explanation", SafeText(why)}};
      std::printf("%s\n", out.dump().c_str());
    }
    return Fail(cmd, SafeText("no record: " + why), kExitNoRecord);
  }
  const std::string found_class = r->device_class().empty() ? device_class : r->device_class();
  if (remote.json) {
    json trace = json::parse(r->trace_json(), nullptr, /*allow_exceptions=*/false);
    if (trace.is_discarded()) trace = SafeText(r->trace_json());
    json out = {{"found", true},
                {"workload", SafeText(workload)},
                {"workload_key", ir::WorkloadKey(workload)},
                {"device_class", SafeText(found_class)},
                {"requested_device_class", SafeText(device_class)},
                {"explanation", SafeText(r->explanation())},
                {"latency_us", r->latency_us()},
                {"gflops", r->gflops()},
                {"trace", trace},
                {"measured_at", r->measured_at_ms()},
                {"worker", SafeText(r->worker())},
                {"tuner", remote.tuner}};
    std::printf("%s\n", out.dump().c_str());
    return kExitOk;
  }
  std::printf("workload      %s\n", SafeText(workload).c_str());
  std::printf("device class  %s\n", SafeText(found_class).c_str());
  std::printf("latency       %.3f us (median)\n", r->latency_us());
  std::printf("gflops        %.1f\n", r->gflops());
  std::printf("measured      %s by %s\n", FormatTime(r->measured_at_ms()).c_str(),
              SafeText(r->worker()).c_str());
  std::printf("source        lathed at %s\n", remote.tuner.c_str());
  if (!r->explanation().empty())
    std::printf("note          %s\n", SafeText(r->explanation()).c_str());
  std::printf("trace         %s\n", SafeText(r->trace_json()).c_str());
  return kExitOk;
}

int RunJobs(const RemoteOptions& remote) {
  const std::string cmd = "lathe jobs";
  if (remote.tuner.empty()) return Fail(cmd, "--tuner HOST:PORT is required", kExitUsage);
  absl::StatusOr<std::unique_ptr<client::TunerClient>> client =
      Connect(remote.tuner, remote.token_file, remote.tls_ca);
  if (!client.ok()) return FailStatus(cmd, client.status());
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = (*client)->ListJobs();
  if (!jobs.ok()) return FailStatus(cmd, jobs.status());
  if (remote.json) {
    json list = json::array();
    for (const lathe::v1::JobStatus& j : *jobs) list.push_back(JobJson(j));
    std::printf("%s\n", json{{"jobs", list}}.dump().c_str());
    return kExitOk;
  }
  if (jobs->empty()) {
    std::printf("no jobs on lathed at %s\n", remote.tuner.c_str());
    return kExitOk;
  }
  std::printf("%-20s %-10s %-14s %-12s %s\n", "JOB", "STATE", "TRIALS", "BEST GFLOP/S", "WORKLOAD");
  for (const lathe::v1::JobStatus& j : *jobs) {
    if (j.workloads_size() > 1) {
      PrintTasksJob(j, /*top=*/8);
      if (!j.message().empty()) std::printf("  %s\n", SafeText(j.message()).c_str());
      continue;
    }
    if (j.workloads_size() == 0) {
      std::printf("%-20s %-10s %-14s %-12s %s\n", SafeText(j.job_id()).c_str(),
                  client::JobStateName(j.state()).c_str(), "-", "-", "-");
    }
    for (const lathe::v1::WorkloadProgress& w : j.workloads()) {
      std::string trials = fmt::format("{}/{}", w.trials_done(), w.trials_target());
      if (w.remeasure_pending() > 0) {
        trials += fmt::format(" re-timing {}/{}", w.remeasured() + w.remeasure_failed(),
                              w.remeasured() + w.remeasure_failed() + w.remeasure_pending());
      } else if (w.remeasured() + w.remeasure_failed() > 0) {
        trials += fmt::format(" re-timed {}", w.remeasured());
      }
      std::string best = w.best_gflops() > 0 ? fmt::format("{:.1f}", w.best_gflops()) : "-";
      std::printf("%-20s %-10s %-14s %-12s %s\n", SafeText(j.job_id()).c_str(),
                  client::JobStateName(j.state()).c_str(), trials.c_str(), best.c_str(),
                  SafeText(w.workload()).c_str());
    }
    if (!j.message().empty()) std::printf("  %s\n", SafeText(j.message()).c_str());
  }
  return kExitOk;
}

int RunWorkers(const RemoteOptions& remote) {
  const std::string cmd = "lathe workers";
  if (remote.tuner.empty()) return Fail(cmd, "--tuner HOST:PORT is required", kExitUsage);
  absl::StatusOr<std::unique_ptr<client::TunerClient>> client =
      Connect(remote.tuner, remote.token_file, remote.tls_ca);
  if (!client.ok()) return FailStatus(cmd, client.status());
  absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> workers = (*client)->ListWorkers();
  if (!workers.ok()) return FailStatus(cmd, workers.status());
  if (remote.json) {
    json list = json::array();
    for (const lathe::v1::WorkerInfo& w : *workers) {
      list.push_back({{"id", SafeText(w.worker_id())},
                      {"hostname", SafeText(w.hostname())},
                      {"device_class", SafeText(w.device_class())},
                      {"state", SafeText(w.state())},
                      {"measured", w.measured()},
                      {"last_seen", w.last_seen_ms()}});
    }
    std::printf("%s\n", json{{"workers", list}}.dump().c_str());
    return kExitOk;
  }
  if (workers->empty()) {
    std::printf("no workers registered with lathed at %s\n", remote.tuner.c_str());
    return kExitOk;
  }
  std::printf("%-24s %-6s %-9s %-20s %s\n", "WORKER", "STATE", "MEASURED", "HOST", "DEVICE CLASS");
  for (const lathe::v1::WorkerInfo& w : *workers) {
    std::printf("%-24s %-6s %-9lld %-20s %s\n", SafeText(w.worker_id()).c_str(),
                SafeText(w.state()).c_str(), static_cast<long long>(w.measured()),
                SafeText(w.hostname()).c_str(), SafeText(w.device_class()).c_str());
  }
  return kExitOk;
}

}  // namespace lathe::tools
