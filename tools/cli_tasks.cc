#include "tools/cli_tasks.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "ir/workload.h"
#include "tools/cli_common.h"

namespace lathe::tools {

namespace {

using json = nlohmann::json;

std::string Trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

std::string Weight(double w) { return fmt::format("{:g}", w); }

std::string TaskLine(const tuner::TuneTaskProgress& t) {
  std::string best = t.best_latency_us > 0 ? fmt::format("{:10.1f} us {:8.1f} GFLOP/s",
                                                         t.best_latency_us, t.best_gflops)
                                           : fmt::format("{:>10} {:>19}", "-", "");
  return fmt::format("  x{:<4} {:5} trials {}  {}", Weight(t.weight), t.trials, best, t.workload);
}

int TerminalWidth() {
  struct winsize ws = {};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 120;
}

}  // namespace

absl::StatusOr<std::vector<tuner::TuneTask>> CollectTasks(const TuneCliOptions& options) {
  const std::string& tasks_file = options.tasks_file;
  std::vector<tuner::TuneTask> tasks;
  std::set<std::string> keys;
  auto add = [&](const std::string& spec, double weight, const std::string& where) -> absl::Status {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    if (!w.ok()) return absl::InvalidArgumentError(absl::StrCat(where, w.status().message()));
    if (!(weight > 0) || !std::isfinite(weight)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "weight ", weight, " (need a positive number)"));
    }
    if (!keys.insert(w->key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "workload '", w->canonical, "' is given twice"));
    }
    tasks.push_back(tuner::TuneTask{w->canonical, weight});
    return absl::OkStatus();
  };
  for (const std::string& spec : options.workloads) {
    if (absl::Status st = add(spec, 1, ""); !st.ok()) return st;
  }
  for (const tuner::TuneTask& t : options.model_tasks) {
    if (absl::Status st = add(t.workload, t.weight, ""); !st.ok()) return st;
  }
  if (tasks_file.empty()) return tasks;
  std::ifstream in(tasks_file);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read tasks file ", tasks_file));
  std::string line;
  int lineno = 0, from_file = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const std::string text = Trim(line);
    if (text.empty() || text[0] == '#') continue;
    const std::string where = absl::StrCat(tasks_file, " line ", lineno, ": ");
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "not a JSON object (expected {\"workload\": SPEC, \"weight\": W})"));
    }
    for (const auto& [name, value] : j.items()) {
      if (name != "workload" && name != "weight") {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "unknown key '", name, "' (expected workload and weight)"));
      }
    }
    if (!j.contains("workload") || !j["workload"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "\"workload\" must be a spec string"));
    }
    double weight = 1;
    if (j.contains("weight")) {
      if (!j["weight"].is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(where, "\"weight\" must be a number"));
      }
      weight = j["weight"].get<double>();
    }
    if (absl::Status st = add(j["workload"].get<std::string>(), weight, where); !st.ok()) {
      return st;
    }
    ++from_file;
  }
  if (in.bad())
    return absl::InvalidArgumentError(absl::StrCat("cannot read tasks file ", tasks_file));
  if (from_file == 0) {
    return absl::InvalidArgumentError(absl::StrCat("tasks file ", tasks_file, " holds no task"));
  }
  return tasks;
}

std::vector<std::string> TaskProgressLines(const tuner::TuneProgress& p) {
  constexpr int kWidth = 20;
  int filled = p.trials_target > 0 ? p.trials_done * kWidth / p.trials_target : 0;
  filled = std::clamp(filled, 0, kWidth);
  const std::string bar =
      fmt::format("[{}{}]", std::string(filled, '#'), std::string(kWidth - filled, '-'));
  std::string objective =
      p.objective_us > 0 ? fmt::format("{:.1f} us", p.objective_us) : "- (a task has no record)";
  std::string left = p.eta_s >= 0 ? fmt::format("~{:.0f}s left", p.eta_s) : "estimating";
  if (p.remeasure_total > 0) {
    left = fmt::format("re-timing the best: {}/{}", p.remeasure_done, p.remeasure_total);
  }
  std::vector<std::string> lines;
  lines.push_back(fmt::format("{} {}/{} trials  objective {}  errors {}  {}", bar, p.trials_done,
                              p.trials_target, objective, p.errors, left));
  for (const tuner::TuneTaskProgress& t : p.tasks) lines.push_back(TaskLine(t));
  return lines;
}

TaskProgressPrinter::TaskProgressPrinter(bool tty) : tty_(tty) {}

void TaskProgressPrinter::Update(const tuner::TuneProgress& p) {
  std::vector<std::string> lines = TaskProgressLines(p);
  if (tty_) {
    const size_t width = static_cast<size_t>(TerminalWidth()) - 1;
    std::string out;
    if (drawn_ > 0) out += fmt::format("\x1b[{}F", drawn_);  // back to the block's first line
    for (std::string& l : lines) {
      if (l.size() > width) l.resize(width);
      out += l + "\x1b[K\n";
    }
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
    drawn_ = static_cast<int>(lines.size());
    return;
  }
  if (!p.end_of_round && p.remeasure_total == 0) return;
  if (p.remeasure_total > 0 && p.remeasure_done > 0) return;  // announce the re-timing once
  printed_trials_.resize(p.tasks.size(), -1);
  std::string out = lines[0] + "\n";
  for (size_t i = 0; i < p.tasks.size(); ++i) {
    if (p.tasks[i].trials == printed_trials_[i]) continue;
    printed_trials_[i] = p.tasks[i].trials;
    out += lines[i + 1] + "\n";
  }
  std::fputs(out.c_str(), stderr);
}

void TaskProgressPrinter::Finish() { drawn_ = 0; }

int FinishTasks(const TuneCliOptions& o, const tuner::TuneResult& r, const TuneWhere& where) {
  const bool remote = !where.tuner.empty();
  int errors_total = 0;
  for (const auto& [cls, n] : r.errors) errors_total += n;
  int without_record = 0;
  for (const tuner::TuneTaskResult& t : r.tasks) without_record += t.has_best ? 0 : 1;

  if (o.json) {
    json errors = json::object();
    for (const auto& [cls, n] : r.errors) errors[cls] = n;
    json tasks = json::array();
    for (const tuner::TuneTaskResult& t : r.tasks) {
      json te = json::object();
      for (const auto& [cls, n] : t.errors) te[cls] = n;
      json jt = {{"workload", t.workload}, {"workload_key", t.workload_key},
                 {"weight", t.weight},     {"trials", t.trials},
                 {"errors", te},           {"remeasured", t.remeasured}};
      jt["best_latency_us"] = t.has_best ? json(t.best_latency_us) : json(nullptr);
      jt["best_gflops"] = t.has_best ? json(t.best_gflops) : json(nullptr);
      tasks.push_back(std::move(jt));
    }
    json out = {{"workload", r.workload},
                {"workload_key", r.workload_key},
                {"device_class", r.device_class},
                {"trials", r.trials},
                {"total_measured", r.total_measured},
                {"errors", errors},
                {"stopped_early", r.stopped_early},
                {"remeasured", r.remeasured},
                {"remeasure_failed", r.remeasure_failed},
                {"seconds", r.seconds},
                {"scheduler", o.scheduler},
                {"tasks", tasks}};
    out["objective_us"] = r.objective_us > 0 ? json(r.objective_us) : json(nullptr);
    const tuner::TuneTaskResult& first = r.tasks.front();
    out["best_latency_us"] = first.has_best ? json(first.best_latency_us) : json(nullptr);
    out["best_gflops"] = first.has_best ? json(first.best_gflops) : json(nullptr);
    if (remote) {
      out["tuner"] = where.tuner;
      out["job_id"] = where.job_id;
      out["state"] = where.state;
      out["detached"] = where.detached;
    } else {
      out["db"] = r.db_path;
    }
    fmt::print("{}\n", out.dump());
  } else {
    fmt::print("{:<7} {:>6} {:>12} {:>10} {:>9}  {}\n", "weight", "trials", "best us", "GFLOP/s",
               "share", "workload");
    for (const tuner::TuneTaskResult& t : r.tasks) {
      const double share =
          r.objective_us > 0 ? 100 * t.weight * t.best_latency_us / r.objective_us : 0;
      if (t.has_best) {
        fmt::print("{:<7} {:>6} {:>12.1f} {:>10.1f} {:>8.1f}%  {}\n", Weight(t.weight), t.trials,
                   t.best_latency_us, t.best_gflops, share, t.workload);
      } else {
        fmt::print("{:<7} {:>6} {:>12} {:>10} {:>9}  {}\n", Weight(t.weight), t.trials, "-", "-",
                   "-", t.workload);
      }
    }
    if (r.objective_us > 0) {
      fmt::print("objective {:.1f} us (sum of weight x best latency over {} tasks)\n",
                 r.objective_us, r.tasks.size());
    } else {
      fmt::print("objective - ({} of {} tasks have no ok record)\n", without_record,
                 r.tasks.size());
    }
    std::string parts;
    for (const auto& [cls, n] : r.errors) {
      parts += fmt::format("{}{} {}", parts.empty() ? " (" : ", ", cls, n);
    }
    if (!parts.empty()) parts += ")";
    if (remote) {
      fmt::print("trials    {} in job {} ({}); errors {}{}\n", r.trials, where.job_id, where.state,
                 errors_total, parts);
      fmt::print("stored    on lathed at {}, device {}\n", where.tuner, r.device_class);
    } else {
      fmt::print("trials    {} this run ({} scheduler); errors {}{}\n", r.trials, o.scheduler,
                 errors_total, parts);
      fmt::print("stored    {}, device {}\n", r.db_path, r.device_class);
    }
  }
  if (without_record > 0 && !where.detached) {
    return Fail("lathe tune", fmt::format("{} of {} tasks have no candidate that ran correctly",
                                          without_record, r.tasks.size()));
  }
  return kExitOk;
}

}  // namespace lathe::tools
