#include "tools/cli_tune.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "codegen/host.h"
#include "fmt/format.h"
#include "ir/op_registry.h"
#include "ir/workload.h"
#include "tools/cli_db.h"
#include "tools/cli_tasks.h"
#include "tuner/space_factory.h"
#include "tuner/tune.h"
#ifdef LATHE_HAVE_GEMM_BASELINES
#include "baselines/gemm_baselines.h"
#endif

#include "tools/cli_common.h"

namespace lathe::tools {

namespace {

using json = nlohmann::json;

int Fail(int code, const std::string& msg) { return tools::Fail("lathe tune", msg, code); }

// --- Ctrl-C: the first sets the stop flag, the second kills the process ---

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the stop flag is set from a handler");

extern "C" void OnSigint(int) {
  if (g_stop.exchange(true)) {
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  static const char kMsg[] =
      "\nlathe tune: stopping after the current candidate (Ctrl-C again to abort)\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)ignored;
}

// --- progress ---

std::string Duration(double s) {
  if (s < 0 || !std::isfinite(s)) return "?";
  int64_t t = static_cast<int64_t>(std::llround(s));
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
}

}  // namespace

std::string ProgressLine(const tuner::TuneProgress& p) {
  constexpr int kWidth = 20;
  int filled = p.trials_target > 0 ? p.trials_done * kWidth / p.trials_target : 0;
  filled = std::clamp(filled, 0, kWidth);
  std::string bar = "[" + std::string(filled, '#') + std::string(kWidth - filled, '-') + "]";
  std::string best = p.best_gflops > 0 ? fmt::format("{:.1f} GFLOP/s", p.best_gflops) : "-";
  std::string left = p.eta_s >= 0 ? "~" + Duration(p.eta_s) + " left" : "estimating";
  if (p.remeasure_total > 0) {
    left = fmt::format("re-timing the best: {}/{}", p.remeasure_done, p.remeasure_total);
  }
  return fmt::format("{} {}/{} trials  best {}  errors {}  {}", bar, p.trials_done, p.trials_target,
                     best, p.errors, left);
}

namespace {

// --- the library baseline ---

struct Baseline {
  std::string name;
  double gflops = 0;
  double latency_us = 0;
};

std::optional<Baseline> MeasureBaseline(const ir::Workload& w, std::string* why) {
  const bool batched = ir::IsOp(w.spec.op, ir::OpKind::kBatchMatmul);
  if (!batched && !ir::IsOp(w.spec.op, ir::OpKind::kMatmul)) {
    *why = "no library baseline for this op";
    return std::nullopt;
  }
#ifdef LATHE_HAVE_GEMM_BASELINES
  const int64_t m = w.spec.Int("m"), n = w.spec.Int("n"), k = w.spec.Int("k");
  const int64_t b = batched ? w.spec.Int("b") : 1;
  absl::StatusOr<baselines::GemmResult> r =
      baselines::OpenBlasSgemm(m, n, k, std::max(1, codegen::HostCpu().cores), 0.3);
  if (!r.ok()) {
    *why = "OpenBLAS baseline failed: " + std::string(r.status().message());
    return std::nullopt;
  }
  Baseline out;
  out.name = b > 1 ? fmt::format("OpenBLAS sgemm ({} x {}x{}x{})", b, m, n, k)
                   : fmt::format("OpenBLAS sgemm {}x{}x{}", m, n, k);
  out.gflops = r->gflops;  // a batch of b gemms runs at about the rate of one
  out.latency_us = r->median_s * 1e6 * static_cast<double>(b);
  return out;
#else
  *why = "no library baseline in this build (OpenBLAS not found)";
  return std::nullopt;
#endif
}

// --- SVG ---

std::string XmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `ticks` intervals.
double NiceStep(double range, int ticks) {
  if (range <= 0) return 1;
  double raw = range / ticks;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

std::string TickLabel(double v, double step) {
  if (step >= 1) return fmt::format("{:.0f}", v);
  int decimals = static_cast<int>(std::ceil(-std::log10(step)));
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::string TuningCurveSvg(const std::vector<std::pair<int, double>>& curve, double library_gflops,
                           const std::string& library_name, const std::string& title) {
  constexpr double kW = 760, kH = 440, kLeft = 70, kRight = 30, kTop = 50, kBottom = 60;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  int max_trial = 1;
  double max_g = library_gflops;
  for (const auto& [t, g] : curve) {
    max_trial = std::max(max_trial, t);
    max_g = std::max(max_g, g);
  }
  if (max_g <= 0) max_g = 1;
  const double ystep = NiceStep(max_g * 1.05, 5);
  const double ymax = std::ceil(max_g * 1.05 / ystep) * ystep;
  const double xstep = std::max(1.0, NiceStep(max_trial, 6));
  const double xmax = std::max<double>(max_trial, std::ceil(max_trial / xstep) * xstep);
  auto X = [&](double t) { return kLeft + t / xmax * pw; };
  auto Y = [&](double g) { return kTop + ph - g / ymax * ph; };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">{3}</text>\n",
      kW, kH, kW / 2, XmlEscape(title));
  // Grid, ticks and labels.
  for (double v = 0; v <= ymax + ystep / 2; v += ystep) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>\n"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, Y(v), kLeft + pw, kLeft - 6, Y(v) + 4, TickLabel(v, ystep));
  }
  for (double t = 0; t <= xmax + xstep / 2; t += xstep) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n"
        "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:.0f}</text>\n",
        X(t), kTop + ph, kTop + ph + 5, kTop + ph + 20, t);
  }
  s += fmt::format(
      "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<line x1=\"{0}\" y1=\"{2}\" x2=\"{3}\" y2=\"{2}\" stroke=\"black\"/>\n"
      "<text x=\"{4}\" y=\"{5}\" text-anchor=\"middle\">trial</text>\n"
      "<text x=\"18\" y=\"{6}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {6})\">"
      "best GFLOP/s</text>\n",
      kLeft, kTop, kTop + ph, kLeft + pw, kLeft + pw / 2, kH - 18, kTop + ph / 2);
  // The higher line's label goes above it, the lower one's below, so close lines never
  // print their labels over each other.
  double best = curve.empty() ? 0 : curve.back().second;
  bool library_on_top = library_gflops >= best;
  auto label_y = [&](double g, bool above) { return Y(g) + (above ? -6 : 16); };
  if (library_gflops > 0) {
    s += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#d62728\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n"
        "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\" fill=\"#d62728\">{5} "
        "{6:.1f} GFLOP/s</text>\n",
        kLeft, Y(library_gflops), kLeft + pw, kLeft + pw - 4,
        label_y(library_gflops, library_on_top), XmlEscape(library_name), library_gflops);
  }
  if (!curve.empty()) {
    std::string points = fmt::format("{:.1f},{:.1f}", X(0), Y(curve.front().second));
    for (const auto& [t, g] : curve) points += fmt::format(" {:.1f},{:.1f}", X(t), Y(g));
    s += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"" + points +
         "\"/>\n";
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#1f77b4\">lathe {:.1f} "
        "GFLOP/s</text>\n",
        kLeft + pw - 4, label_y(best, !library_on_top || library_gflops <= 0), best);
  }
  s += "</svg>\n";
  return s;
}

absl::StatusOr<bool> ColdWeights(const std::string& weights) {
  if (weights.empty() || weights == "warm") return false;
  if (weights == "cold") return true;
  return absl::InvalidArgumentError("--weights '" + weights + "' (expected cold or warm)");
}

int RunTune(const TuneCliOptions& o) {
  if (!o.tuner.empty()) {
    return Fail(kExitFailure, "internal: a --tuner run goes to RunRemoteTune, not RunTune");
  }
  absl::StatusOr<std::vector<tuner::TuneTask>> tasks = CollectTasks(o);
  if (!tasks.ok()) return Fail(kExitUsage, std::string(tasks.status().message()));
  if (tasks->empty()) return Fail(kExitUsage, "give --workload SPEC (repeatable) or --tasks FILE");
  absl::StatusOr<ir::Target> target = ir::ParseTarget(o.target);
  if (!target.ok()) {
    return Fail(kExitUsage, "unknown --target '" + o.target +
                                "' (expected cpu, cuda, cuda:N, cuda:sm_XX or cuda-emu:sm_XX)");
  }
  if (o.gpu_math != "fp32" && !target->is_gpu()) {
    return Fail(kExitUsage, "--gpu-math " + o.gpu_math + " applies to GPU targets only");
  }
  if (o.trials < 1) return Fail(kExitUsage, fmt::format("--trials {} (need >= 1)", o.trials));
  if (o.batch < 1) return Fail(kExitUsage, fmt::format("--batch {} (need >= 1)", o.batch));
  if (o.max_trials_per_task < 0) {
    return Fail(kExitUsage,
                fmt::format("--max-trials-per-task {} (need >= 0)", o.max_trials_per_task));
  }
  if (!(o.min_repeat_ms >= 0)) {
    return Fail(kExitUsage, fmt::format("--min-repeat-ms {} (need >= 0)", o.min_repeat_ms));
  }
  if (o.remeasure_top < 0) {
    return Fail(kExitUsage, fmt::format("--remeasure-top {} (need >= 0)", o.remeasure_top));
  }
  if (o.scheduler != "gradient" && o.scheduler != "round-robin") {
    return Fail(kExitUsage, "--scheduler '" + o.scheduler + "' (expected gradient or round-robin)");
  }
  const bool multi = tasks->size() > 1;
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(tasks->front().workload);
  if (!w.ok()) return Fail(kExitUsage, std::string(w.status().message()));

  tuner::TuneOptions t;
  t.workload = w->canonical;
  if (multi) t.tasks = *tasks;
  t.scheduler = o.scheduler;
  t.trials = o.trials;
  t.max_trials_per_task = o.max_trials_per_task;
  absl::StatusOr<bool> cold = ColdWeights(o.weights);
  if (!cold.ok()) return Fail(kExitUsage, std::string(cold.status().message()));
  t.cold_weights = *cold;
  t.batch = o.batch;
  t.db_path = o.db_path.empty() ? DefaultDbPath() : o.db_path;
  t.target = *target;  // the device class follows from it (tuner::DeviceClassForTarget)
  t.gpu_tf32 = o.gpu_math == "tf32";
  t.seed = o.seed;
  t.min_repeat_ms = o.min_repeat_ms;
  t.remeasure_top = o.remeasure_top;
  t.stop = &g_stop;
  const bool tty = isatty(STDERR_FILENO) == 1;
  bool bar_shown = false;
  TaskProgressPrinter tasks_printer(tty);
  t.on_progress = [&](const tuner::TuneProgress& p) {
    if (multi) {
      tasks_printer.Update(p);
    } else if (tty) {
      fmt::print(stderr, "\r{}\x1b[K", ProgressLine(p));
      std::fflush(stderr);
      bar_shown = true;
    } else if (p.end_of_round || (p.remeasure_total > 0 && p.remeasure_done == 0)) {
      fmt::print(stderr, "{}\n", ProgressLine(p));
    }
  };

  if (multi) {
    fmt::print(stderr, "lathe tune: {} tasks on {}, {} trials in all ({} scheduler{})\n",
               tasks->size(), o.target, t.trials, o.scheduler,
               o.max_trials_per_task > 0
                   ? fmt::format(", at most {} per task", o.max_trials_per_task)
                   : std::string());
  } else {
    fmt::print(stderr, "lathe tune: {} on {}, {} trials\n", w->canonical, o.target, t.trials);
  }
  absl::StatusOr<tuner::TuneResult> r;
  {
    g_stop.store(false);
    SigintScope sigint(OnSigint);
    r = tuner::Tune(t);
  }
  if (bar_shown) fmt::print(stderr, "\n");
  tasks_printer.Finish();
  if (!r.ok()) return Fail(kExitFailure, std::string(r.status().message()));
  if (r->stopped_early) {
    fmt::print(stderr, "lathe tune: stopped after {} trials; every result is kept\n", r->trials);
  }
  if (r->space_exhausted) {
    fmt::print(stderr, "lathe tune: no unmeasured candidate left after {} trials\n", r->trials);
  }
  if (multi) return FinishTasks(o, *r, TuneWhere{});
  return FinishTune(o, *w, *r, TuneWhere{});
}

int FinishTune(const TuneCliOptions& o, const ir::Workload& w, const tuner::TuneResult& res,
               const TuneWhere& where) {
  const tuner::TuneResult* r = &res;
  const bool remote = !where.tuner.empty();
  std::string no_baseline_why;
  std::optional<Baseline> base;
  if (o.no_baseline) {
    no_baseline_why = "library baseline skipped (--no-baseline)";
  } else if (r->device_class != codegen::HostDeviceClass()) {  // remote, or on a GPU
    no_baseline_why =
        "no library baseline: the job ran on " + r->device_class + ", not on this machine";
  } else {
    base = MeasureBaseline(w, &no_baseline_why);
  }

  if (!o.plot.empty()) {
    std::ofstream out(o.plot, std::ios::trunc);
    out << TuningCurveSvg(r->curve, base ? base->gflops : 0, base ? base->name : "",
                          "lathe tune " + r->workload + " on " + r->device_class);
    out.close();
    if (!out) return Fail(kExitFailure, "cannot write plot " + o.plot);
  }

  int errors_total = 0;
  for (const auto& [cls, n] : r->errors) errors_total += n;

  if (o.json) {
    json errors = json::object();
    for (const auto& [cls, n] : r->errors) errors[cls] = n;
    json out = {{"workload", r->workload},
                {"workload_key", r->workload_key},
                {"device_class", r->device_class},
                {"trials", r->trials},
                {"total_measured", r->total_measured},
                {"errors", errors},
                {"stopped_early", r->stopped_early},
                {"remeasured", r->remeasured},
                {"remeasure_failed", r->remeasure_failed},
                {"seconds", r->seconds}};
    if (remote) {
      out["tuner"] = where.tuner;
      out["job_id"] = where.job_id;
      out["state"] = where.state;
      out["detached"] = where.detached;
    } else {
      out["db"] = r->db_path;
    }
    if (r->has_best) {
      out["best_latency_us"] = r->best_latency_us;
      out["best_gflops"] = r->best_gflops;
      out["best_trace"] = json::parse(r->best_trace_json, nullptr, /*allow_exceptions=*/false);
      if (out["best_trace"].is_discarded()) out["best_trace"] = r->best_trace_json;
      out["candidate_id"] = r->best_candidate_id;
      out["best_remeasured"] = r->best_remeasured;
    } else {
      out["best_latency_us"] = nullptr;
      out["best_gflops"] = nullptr;
      out["best_trace"] = nullptr;
    }
    if (base) {
      out["library"] = base->name;
      out["library_gflops"] = base->gflops;
    }
    json curve = json::array();
    for (const auto& [trial, g] : r->curve) curve.push_back({trial, g});
    out["curve"] = curve;
    fmt::print("{}\n", out.dump());
  } else if (r->has_best) {
    fmt::print("best     {:.1f} us  {:.1f} GFLOP/s{}{}\n", r->best_latency_us, r->best_gflops,
               r->best_from_this_run ? "" : "  (from an earlier run)",
               r->best_remeasured ? "  (re-timed)" : "");
    if (r->remeasured > 0 || r->remeasure_failed > 0) {
      std::string moved;
      if (r->best_latency_before_remeasure_us > 0 &&
          r->best_latency_before_remeasure_us != r->best_latency_us) {
        moved = fmt::format("; the best was {:.1f} us before", r->best_latency_before_remeasure_us);
      }
      fmt::print("re-timed {} of the best records for longer{}{}\n", r->remeasured,
                 r->remeasure_failed > 0
                     ? fmt::format(" ({} re-timings failed and were not kept)", r->remeasure_failed)
                     : "",
                 moved);
    }
    if (base) {
      fmt::print("library  {:.1f} us  {:.1f} GFLOP/s  {} (lathe {:.2f}x)\n", base->latency_us,
                 base->gflops, base->name, r->best_gflops / base->gflops);
    } else {
      fmt::print("library  {}\n", no_baseline_why);
    }
    if (remote) {
      fmt::print("trials   {} in job {} ({}); errors {}", r->trials, where.job_id, where.state,
                 errors_total);
    } else {
      fmt::print("trials   {} this run, {} in all; errors {}", r->trials, r->total_measured,
                 errors_total);
    }
    if (errors_total > 0) {
      std::string parts;
      for (const auto& [cls, n] : r->errors)
        parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", cls, n);
      fmt::print(" ({})", parts);
    }
    if (remote) {
      fmt::print(
          "\nstored   on lathed at {}\n         workload {} (key {})\n         device   {}\n",
          where.tuner, r->workload, r->workload_key, r->device_class);
      fmt::print("query it lathe query --tuner {} --workload {} --device-class '{}'\n", where.tuner,
                 r->workload, r->device_class);
    } else {
      fmt::print("\nstored   {}\n         workload {} (key {})\n         device   {}\n", r->db_path,
                 r->workload, r->workload_key, r->device_class);
      fmt::print("build it lathe build --workload {} --db {} --out kernel.so\n", r->workload,
                 r->db_path);
    }
    if (!o.plot.empty()) fmt::print("plot     {}\n", o.plot);
  }
  if (!r->has_best) {
    if (where.detached) return kExitOk;  // the job goes on; nothing to judge yet
    return Fail(kExitFailure, fmt::format("no candidate of {} ran correctly in {} trials ({} "
                                          "errors); nothing to keep as the best",
                                          r->workload, r->trials, errors_total));
  }
  return kExitOk;
}

}  // namespace lathe::tools
