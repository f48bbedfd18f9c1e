#include "bench/tasks_section.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "ir/workload.h"
#include "tuner/tune.h"

namespace lathe::bench {

namespace {

struct ResnetConv {
  const char* spec;
  int count;  // how often ResNet-18 runs it at batch 1
};

// ResNet-18 (torchvision) at 1x3x224x224: its 20 convolutions, 11 distinct.
const std::vector<ResnetConv>& ResnetConvs() {
  static const std::vector<ResnetConv> c = {
      {"conv2d:n=1,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3", 1},
      {"conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1", 4},
      {"conv2d:n=1,c=64,h=56,w=56,k=128,r=3,s=3,stride=2,pad=1", 1},
      {"conv2d:n=1,c=64,h=56,w=56,k=128,r=1,s=1,stride=2", 1},
      {"conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", 3},
      {"conv2d:n=1,c=128,h=28,w=28,k=256,r=3,s=3,stride=2,pad=1", 1},
      {"conv2d:n=1,c=128,h=28,w=28,k=256,r=1,s=1,stride=2", 1},
      {"conv2d:n=1,c=256,h=14,w=14,k=256,r=3,s=3,pad=1", 3},
      {"conv2d:n=1,c=256,h=14,w=14,k=512,r=3,s=3,stride=2,pad=1", 1},
      {"conv2d:n=1,c=256,h=14,w=14,k=512,r=1,s=1,stride=2", 1},
      {"conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1", 3},
  };
  return c;
}

// The objective after `trial` trials of a run: sum(weight x best latency by then); 0 when a
// task had no ok record yet.
double ObjectiveAt(const tuner::TuneResult& r, int trial) {
  double sum = 0;
  for (const tuner::TuneTaskResult& t : r.tasks) {
    double gflops = 0;
    for (const auto& [i, g] : t.curve) {
      if (i <= trial) gflops = g;
    }
    if (gflops <= 0) return 0;
    sum += t.weight * t.flops / (gflops * 1e3);
  }
  return sum;
}

// The first trial after which every task had an ok record (the end of the warm-up), and the
// objective then; {0, 0} when some task never had one.
std::pair<int, double> WarmUpEnd(const tuner::TuneResult& r) {
  int trial = 0;
  for (const tuner::TuneTaskResult& t : r.tasks) {
    int first = 0;
    for (const auto& [i, g] : t.curve) {
      if (g > 0) {
        first = i;
        break;
      }
    }
    if (first == 0) return {0, 0};
    trial = std::max(trial, first);
  }
  return {trial, ObjectiveAt(r, trial)};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

int RunTasksSection(const TasksSectionOptions& o) {
  std::printf("\n## Multi-task: ResNet-18's %zu distinct convolutions, %d trials per run\n",
              ResnetConvs().size(), o.budget);
  std::printf(
      "\nweights = times each conv runs in the network; objective = sum(weight x best "
      "latency), us (lower is better)\n\n");
  std::printf("| seed | scheduler |");
  for (int c : o.checkpoints) std::printf(" objective @%d |", c);
  std::printf(" trials per task | run s |\n|---|---|");
  for (size_t k = 0; k < o.checkpoints.size(); ++k) std::printf("---|");
  std::printf("---|---|\n");
  // objective[scheduler][checkpoint] over the seeds
  std::map<std::string, std::vector<std::vector<double>>> objective;
  // The best latency of each task over every run (both schedulers, every seed), and the
  // warm-up figures of each run.
  std::vector<double> floor_us(ResnetConvs().size(), INFINITY);
  std::vector<double> warm_trials, warm_objective;
  for (uint64_t seed : o.seeds) {
    for (const char* scheduler : {"gradient", "round-robin"}) {
      tuner::TuneOptions t;
      for (const ResnetConv& c : ResnetConvs()) {
        t.tasks.push_back(tuner::TuneTask{c.spec, static_cast<double>(c.count)});
      }
      t.scheduler = scheduler;
      t.trials = o.budget;
      t.seed = seed;
      t.min_repeat_ms = o.min_repeat_ms;
      // The runs are compared on the figures they measured as they went.
      t.remeasure_top = 0;
      t.db_path = o.dir + "/resnet18-" + scheduler + "-" + std::to_string(seed) + ".db";
      t.measure_child = LATHE_MEASURE_BIN;
      t.on_progress = [&](const tuner::TuneProgress& p) {
        if (!p.end_of_round) return;
        std::fprintf(stderr, "  resnet18 %s seed %llu: %d/%d trials, objective %.0f us, %.0f s\n",
                     scheduler, static_cast<unsigned long long>(seed), p.trials_done,
                     p.trials_target, p.objective_us, p.elapsed_s);
      };
      absl::StatusOr<tuner::TuneResult> r = tuner::Tune(t);
      if (!r.ok()) {
        std::fprintf(stderr, "resnet18 %s seed %llu: %s\n", scheduler,
                     static_cast<unsigned long long>(seed), r.status().ToString().c_str());
        return 1;
      }
      for (size_t i = 0; i < r->tasks.size() && i < floor_us.size(); ++i) {
        if (r->tasks[i].has_best) {
          floor_us[i] = std::min(floor_us[i], r->tasks[i].best_latency_us);
        }
      }
      if (auto [t, v] = WarmUpEnd(*r); t > 0) {
        warm_trials.push_back(t);
        warm_objective.push_back(v);
      }
      auto& rows = objective[scheduler];
      rows.resize(o.checkpoints.size());
      std::printf("| %llu | %s |", static_cast<unsigned long long>(seed), scheduler);
      for (size_t k = 0; k < o.checkpoints.size(); ++k) {
        const double v = ObjectiveAt(*r, o.checkpoints[k]);
        rows[k].push_back(v > 0 ? v : INFINITY);
        if (v > 0) {
          std::printf(" %.0f |", v);
        } else {
          std::printf(" - |");
        }
      }
      std::string trials;
      for (const tuner::TuneTaskResult& task : r->tasks) {
        trials += (trials.empty() ? "" : " ") + std::to_string(task.trials);
      }
      std::printf(" %s | %.0f |\n", trials.c_str(), r->seconds);
      std::fflush(stdout);
    }
  }
  std::printf(
      "\nMedians over %zu seeds (\"-\": some task had no result yet; the last column pairs the "
      "runs of one seed):\n\n| trials | gradient | round-robin | gradient / round-robin | "
      "median of the per-seed ratios |\n|---|---|---|---|---|\n",
      o.seeds.size());
  auto cell = [](double v, const char* fmt) {
    char buf[32];
    if (!std::isfinite(v)) return std::string("-");
    std::snprintf(buf, sizeof(buf), fmt, v);
    return std::string(buf);
  };
  for (size_t k = 0; k < o.checkpoints.size(); ++k) {
    const std::vector<double>& gs = objective["gradient"][k];
    const std::vector<double>& rs = objective["round-robin"][k];
    const double g = Median(gs);
    const double rr = Median(rs);
    std::vector<double> paired;
    for (size_t i = 0; i < gs.size() && i < rs.size(); ++i) {
      if (std::isfinite(gs[i]) && std::isfinite(rs[i])) paired.push_back(gs[i] / rs[i]);
    }
    std::printf("| %d | %s | %s | %s | %s |\n", o.checkpoints[k], cell(g, "%.0f").c_str(),
                cell(rr, "%.0f").c_str(), cell(g / rr, "%.3f").c_str(),
                cell(paired.empty() ? NAN : Median(paired), "%.3f").c_str());
  }
  // How much any scheduler could gain: every task at the best latency some run found for it
  // (a floor no allocation of the same budget beats unless it finds better programs), beside
  // the objective the warm-up round alone reached.
  double floor = 0;
  for (size_t i = 0; i < floor_us.size(); ++i) floor += ResnetConvs()[i].count * floor_us[i];
  std::printf(
      "\nheadroom: the warm-up (every task's first round) ends after %s trials at objective "
      "%s us (medians over the runs); every task at the best latency any run found for it: "
      "%s us\n",
      cell(Median(warm_trials), "%.0f").c_str(), cell(Median(warm_objective), "%.0f").c_str(),
      cell(floor, "%.0f").c_str());
  for (size_t k = 0; k < o.checkpoints.size(); ++k) {
    const double rr = Median(objective["round-robin"][k]);
    if (!std::isfinite(rr)) continue;  // some task had no result yet
    std::printf(
        "  floor / round-robin at %d trials: %s (the lowest ratio a scheduler could reach)\n",
        o.checkpoints[k], cell(floor / rr, "%.3f").c_str());
  }
  std::printf("\ntarget: gradient <= 0.85x round-robin at 300 trials (median of the seeds)\n");
  return 0;
}

}  // namespace lathe::bench
