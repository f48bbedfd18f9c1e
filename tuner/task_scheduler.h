// \file
// Task schedulers: which task of a multi-task tuning run gets the next round of trials
// (DESIGN.md "Search": multi-workload jobs share trials through a gradient-based task
// scheduler). A run tunes several workloads (a model's distinct operators), each with a weight
// (how often it runs); its objective is sum(weight x best latency), and each round goes where
// it is expected to lower that objective most.
//
// The gradient scheduler follows Ansor (OSDI'20, section 6): after a warm-up that gives every
// task one round, each task's expected decrease of the objective per trial is
//   weight x (alpha x backward + (1 - alpha) x forward)
// with backward the slope of its own best latency over its last rounds (trials of the
// `backward_window` rounds before), and forward an optimistic look ahead: the smaller (more
// negative) of -best / trials (the latency falling to zero at the rate so far) and
// beta x flops / (the best throughput of tasks of the same operator) - best (reaching, within
// a factor beta, the throughput its siblings already reach). The task with the most negative
// estimate gets the round; with probability eps a random eligible task does (exploration).
// A task that has not improved for `patience` of its trials (and at least `patience_rounds`
// rounds) fades out: it gets rounds only when every other task has faded too. A task without
// any ok record after its warm-up is picked first (its best is unknown, its share of the
// objective unbounded) until it has `no_record_trials` trials, after which it fades.
//
// The round-robin scheduler gives rounds to eligible tasks in turn (the baseline of the
// benchmark, and what a job of fixed per-workload budgets amounts to).
//
// Thread-safety: a scheduler is used by one tuning driver thread; Next has no other state than
// its own rotation and the views it is given.
#ifndef LATHE_TUNER_TASK_SCHEDULER_H_
#define LATHE_TUNER_TASK_SCHEDULER_H_

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lathe::tuner {

// What a scheduler knows of one task when it picks the next round.
struct TaskView {
  double weight = 1;
  double flops = 0;    // of one run of the workload
  std::string op;      // tasks of the same operator are "similar"
  int trials = 0;      // measured (reported) trials
  int rounds = 0;      // rounds given to the task so far (dispatched, measured or not)
  double best_us = 0;  // best latency so far (earlier runs included); 0: no ok record
  // (trials measured, best latency in us) at the end of each of its rounds so far, oldest
  // first; 0 latency where there was no ok record yet.
  std::vector<std::pair<int, double>> history;
  // The task can take a round now (has budget left, is not exhausted, not too far ahead of
  // its results). A scheduler never picks an ineligible task.
  bool eligible = true;
};

class TaskScheduler {
 public:
  virtual ~TaskScheduler() = default;
  // The task that gets the next round, or -1 when no task is eligible.
  virtual int Next(const std::vector<TaskView>& tasks, std::mt19937_64& rng) = 0;
  virtual std::string_view name() const = 0;
};

struct GradientSchedulerOptions {
  double alpha = 0.2;       // weight of the backward (history) slope
  double beta = 2.0;        // slack on the throughput of similar tasks
  double eps = 0.05;        // chance of a random eligible task
  int backward_window = 3;  // rounds the backward slope looks back
  // A task fades once its best has not improved for max(patience_rounds rounds, patience x
  // its trials) of trials.
  int patience_rounds = 4;
  double patience = 0.5;
  // Trials a task may take without any ok record before it fades.
  int no_record_trials = 64;
};

std::unique_ptr<TaskScheduler> MakeGradientScheduler(const GradientSchedulerOptions& options = {});
std::unique_ptr<TaskScheduler> MakeRoundRobinScheduler();

// "gradient" or "round-robin"; InvalidArgument naming the choices for anything else.
absl::StatusOr<std::unique_ptr<TaskScheduler>> MakeTaskScheduler(std::string_view name);

// The decrease of sum(weight x best latency) per trial that the gradient scheduler expects
// from one more round of task `i` (<= 0; more negative is better); exposed for tests.
double ExpectedGradient(const std::vector<TaskView>& tasks, size_t i,
                        const GradientSchedulerOptions& options);

// True when the gradient scheduler considers task `i` faded (see the file comment).
bool TaskFaded(const TaskView& task, const GradientSchedulerOptions& options);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_TASK_SCHEDULER_H_
