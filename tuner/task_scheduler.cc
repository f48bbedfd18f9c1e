#include "tuner/task_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace lathe::tuner {

namespace {

// Trials per round of a task so far (at least 1).
double RoundSize(const TaskView& t) {
  const int rounds = std::max<int>(1, static_cast<int>(t.history.size()));
  return std::max(1.0, static_cast<double>(t.trials) / rounds);
}

// Trials since the task's best first reached its current value.
int TrialsSinceImprovement(const TaskView& t) {
  if (t.best_us <= 0) return t.trials;
  int reached = t.trials;
  // History latencies only fall (a re-timing at the very end aside): the earliest point at
  // the current best is where it was reached.
  for (const auto& [trials, best] : t.history) {
    if (best > 0 && best <= t.best_us * (1 + 1e-9)) {
      reached = trials;
      break;
    }
  }
  return std::max(0, t.trials - reached);
}

class GradientScheduler : public TaskScheduler {
 public:
  explicit GradientScheduler(const GradientSchedulerOptions& o) : o_(o) {}

  int Next(const std::vector<TaskView>& tasks, std::mt19937_64& rng) override {
    std::vector<size_t> eligible;
    for (size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].eligible) eligible.push_back(i);
    }
    if (eligible.empty()) return -1;
    // Warm-up: every task gets a round before any gets a second one.
    for (size_t i : eligible) {
      if (tasks[i].rounds == 0) return static_cast<int>(i);
    }
    // A task without an ok record has an unknown share of the objective: it goes first while
    // it has trials to spare.
    for (size_t i : eligible) {
      if (tasks[i].best_us <= 0 && tasks[i].trials < o_.no_record_trials) {
        return static_cast<int>(i);
      }
    }
    std::vector<size_t> live;
    for (size_t i : eligible) {
      if (!TaskFaded(tasks[i], o_)) live.push_back(i);
    }
    if (live.empty()) live = eligible;  // everything faded: spend the rest where it helps most
    std::uniform_real_distribution<double> unit(0, 1);
    if (o_.eps > 0 && unit(rng) < o_.eps) {
      std::uniform_int_distribution<size_t> pick(0, live.size() - 1);
      return static_cast<int>(live[pick(rng)]);
    }
    int best = -1;
    double best_grad = 0;
    for (size_t i : live) {
      const double g = ExpectedGradient(tasks, i, o_);
      // Ties (e.g. tasks without records, all zero) go to the task with fewer trials.
      if (best < 0 || g < best_grad - 1e-12 * std::abs(best_grad) ||
          (std::abs(g - best_grad) <= 1e-12 * std::abs(best_grad) &&
           tasks[i].trials < tasks[static_cast<size_t>(best)].trials)) {
        best = static_cast<int>(i);
        best_grad = g;
      }
    }
    return best;
  }

  std::string_view name() const override { return "gradient"; }

 private:
  GradientSchedulerOptions o_;
};

class RoundRobinScheduler : public TaskScheduler {
 public:
  int Next(const std::vector<TaskView>& tasks, std::mt19937_64&) override {
    const size_t n = tasks.size();
    for (size_t k = 1; k <= n; ++k) {
      const size_t i = (last_ + k) % n;
      if (tasks[i].eligible) {
        last_ = i;
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  std::string_view name() const override { return "round-robin"; }

 private:
  size_t last_ = static_cast<size_t>(-1);  // the first call starts at task 0
};

}  // namespace

bool TaskFaded(const TaskView& t, const GradientSchedulerOptions& o) {
  if (t.best_us <= 0) return t.trials >= o.no_record_trials;
  const double rounds_worth = o.patience_rounds * RoundSize(t);
  return static_cast<int>(t.history.size()) > o.patience_rounds &&
         TrialsSinceImprovement(t) >= std::max(rounds_worth, o.patience * t.trials);
}

double ExpectedGradient(const std::vector<TaskView>& tasks, size_t i,
                        const GradientSchedulerOptions& o) {
  const TaskView& t = tasks[i];
  if (t.best_us <= 0 || t.trials <= 0) return 0;
  const double g = t.best_us;
  const double round = RoundSize(t);
  // Backward: the slope of the best over roughly the last `backward_window` rounds.
  double backward = 0;
  const double window = o.backward_window * round;
  for (auto it = t.history.rbegin(); it != t.history.rend(); ++it) {
    if (it->first <= t.trials - window) {
      if (it->second > 0 && t.trials > it->first) {
        backward = std::min(0.0, (g - it->second) / (t.trials - it->first));
      }
      break;
    }
  }
  // Forward: optimistic, the better of the latency falling to zero at the rate so far and
  // reaching (within beta) the throughput of the best similar task, in one round.
  double forward = -g / t.trials;
  double similar = 0;  // best throughput (flops per us) of tasks of the same operator
  int siblings = 0;
  for (const TaskView& s : tasks) {
    if (s.op != t.op || s.best_us <= 0 || s.flops <= 0) continue;
    similar = std::max(similar, s.flops / s.best_us);
    ++siblings;
  }
  if (siblings > 1 && similar > 0 && t.flops > 0) {
    forward = std::min(forward, (o.beta * t.flops / similar - g) / round);
  }
  return t.weight * (o.alpha * backward + (1 - o.alpha) * forward);
}

std::unique_ptr<TaskScheduler> MakeGradientScheduler(const GradientSchedulerOptions& options) {
  return std::make_unique<GradientScheduler>(options);
}

std::unique_ptr<TaskScheduler> MakeRoundRobinScheduler() {
  return std::make_unique<RoundRobinScheduler>();
}

absl::StatusOr<std::unique_ptr<TaskScheduler>> MakeTaskScheduler(std::string_view name) {
  if (name == "gradient") return MakeGradientScheduler();
  if (name == "round-robin") return MakeRoundRobinScheduler();
  return absl::InvalidArgumentError(
      absl::StrCat("task scheduler '", std::string(name), "' (expected gradient or round-robin)"));
}

}  // namespace lathe::tuner
