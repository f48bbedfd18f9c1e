// The task schedulers on synthetic tasks whose best latency follows a known curve of their
// trials: who gets the rounds, and what the weighted objective is after a budget.
#include "tuner/task_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tuner/driver.h"

namespace lathe::tuner {
namespace {

// A task of the simulation: weight, flops, operator and its best latency after t trials.
struct SimTask {
  double weight = 1;
  double flops = 1e6;
  std::string op = "conv2d";
  std::function<double(int)> best;  // latency in us after t >= 1 trials
};

struct SimResult {
  std::vector<int> trials;  // per task
  std::vector<int> picks;   // task of each round, in order
  double objective = 0;     // sum(weight x best) at the end
};

// Runs `scheduler` for `budget` trials in rounds of `round` trials.
SimResult Simulate(TaskScheduler& scheduler, const std::vector<SimTask>& sim, int budget, int round,
                   uint64_t seed = 1) {
  std::vector<TaskView> views(sim.size());
  for (size_t i = 0; i < sim.size(); ++i) {
    views[i].weight = sim[i].weight;
    views[i].flops = sim[i].flops;
    views[i].op = sim[i].op;
  }
  std::mt19937_64 rng(seed);
  SimResult r;
  r.trials.assign(sim.size(), 0);
  for (int spent = 0; spent + round <= budget;) {
    const int i = scheduler.Next(views, rng);
    if (i < 0) break;
    r.picks.push_back(i);
    TaskView& v = views[i];
    v.trials += round;
    ++v.rounds;
    v.best_us = sim[i].best(v.trials);
    v.history.emplace_back(v.trials, v.best_us);
    r.trials[i] += round;
    spent += round;
  }
  for (size_t i = 0; i < sim.size(); ++i) r.objective += sim[i].weight * views[i].best_us;
  return r;
}

// A task that keeps improving: from `start` us towards `floor` us, halving the gap every
// `half` trials.
std::function<double(int)> Improving(double start, double floor, double half) {
  return [=](int t) { return floor + (start - floor) * std::pow(0.5, t / half); };
}
std::function<double(int)> Flat(double v) {
  return [=](int) { return v; };
}

TEST(TaskSchedulerTest, WarmUpGivesEveryTaskARoundFirst) {
  std::vector<SimTask> sim(5);
  for (size_t i = 0; i < sim.size(); ++i) sim[i].best = Improving(100 + 10 * i, 10, 40);
  sim[3].weight = 50;  // the heaviest still waits for the warm-up to end
  auto s = MakeGradientScheduler();
  SimResult r = Simulate(*s, sim, 200, 8);
  ASSERT_GE(r.picks.size(), 5u);
  EXPECT_EQ(std::vector<int>(r.picks.begin(), r.picks.begin() + 5),
            (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(TaskSchedulerTest, TheBudgetGoesWhereTheObjectiveFalls) {
  // Task 0 runs ten times per model run and keeps improving; tasks 1 and 2 are flat from the
  // first round on: after the warm-up they fade, and task 0 gets almost every round.
  std::vector<SimTask> sim(3);
  sim[0] = {10, 1e6, "conv2d", Improving(1000, 100, 60)};
  sim[1] = {1, 1e6, "conv2d", Flat(300)};
  sim[2] = {1, 1e6, "matmul", Flat(200)};
  GradientSchedulerOptions o;
  o.eps = 0;
  auto g = MakeGradientScheduler(o);
  SimResult gr = Simulate(*g, sim, 400, 8);
  EXPECT_GE(gr.trials[0], 400 * 3 / 4);
  auto rr = MakeRoundRobinScheduler();
  SimResult rrr = Simulate(*rr, sim, 400, 8);
  EXPECT_LT(gr.objective, 0.85 * rrr.objective)
      << "gradient " << gr.objective << " vs round-robin " << rrr.objective;
}

TEST(TaskSchedulerTest, SlowerThanItsSiblingsGetsRounds) {
  // Same operator, same flops: task 1 is 4x slower than task 0 but improves only slowly by its
  // own history; the forward estimate from its sibling's throughput still sends rounds there.
  std::vector<SimTask> sim(2);
  sim[0] = {1, 1e6, "conv2d", Flat(100)};
  sim[1] = {1, 1e6, "conv2d", Improving(400, 100, 80)};
  GradientSchedulerOptions o;
  o.eps = 0;
  auto g = MakeGradientScheduler(o);
  SimResult r = Simulate(*g, sim, 160, 8);
  EXPECT_GE(r.trials[1], 3 * r.trials[0]);
}

TEST(TaskSchedulerTest, SingleTaskAndIneligibleTasks) {
  std::vector<TaskView> views(3);
  std::mt19937_64 rng(1);
  auto g = MakeGradientScheduler();
  auto rr = MakeRoundRobinScheduler();
  for (TaskView& v : views) v.eligible = false;
  EXPECT_EQ(g->Next(views, rng), -1);
  EXPECT_EQ(rr->Next(views, rng), -1);
  views[2].eligible = true;
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(g->Next(views, rng), 2);
    EXPECT_EQ(rr->Next(views, rng), 2);
    views[2].rounds++;
    views[2].trials += 8;
    views[2].best_us = 10;
    views[2].history.emplace_back(views[2].trials, 10);
  }
  std::vector<TaskView> one(1);
  EXPECT_EQ(g->Next(one, rng), 0);
  EXPECT_EQ(rr->Next(one, rng), 0);
}

TEST(TaskSchedulerTest, EqualTasksShareTheRounds) {
  std::vector<SimTask> sim(3);
  for (SimTask& t : sim) t.best = Improving(100, 10, 50);
  GradientSchedulerOptions o;
  o.eps = 0;
  auto g = MakeGradientScheduler(o);
  SimResult r = Simulate(*g, sim, 240, 8);
  for (int t : r.trials) EXPECT_EQ(t, 80);
  auto rr = MakeRoundRobinScheduler();
  r = Simulate(*rr, sim, 240, 8);
  EXPECT_EQ(r.picks, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2,
                                       0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
}

TEST(TaskSchedulerTest, ATaskWithoutARecordGoesFirstUntilItGivesUp) {
  std::vector<SimTask> sim(2);
  sim[0] = {1, 1e6, "conv2d", Improving(100, 10, 40)};
  sim[1] = {1, 1e6, "conv2d", [](int) { return 0.0; }};  // never an ok candidate
  GradientSchedulerOptions o;
  o.eps = 0;
  o.no_record_trials = 32;
  auto g = MakeGradientScheduler(o);
  SimResult r = Simulate(*g, sim, 200, 8);
  ASSERT_GE(r.picks.size(), 6u);
  // Warm-up, then task 1 until it has 32 trials, then task 0 (task 1 has faded).
  EXPECT_EQ(std::vector<int>(r.picks.begin(), r.picks.begin() + 5),
            (std::vector<int>{0, 1, 1, 1, 1}));
  EXPECT_EQ(r.trials[1], 32);
}

TEST(TaskSchedulerTest, GradientPrefersTheHeavierOfTwoEqualCurves) {
  std::vector<TaskView> v(2);
  for (TaskView& t : v) {
    t.trials = 16;
    t.rounds = 2;
    t.best_us = 50;
    t.history = {{8, 80}, {16, 50}};
  }
  v[1].weight = 3;
  GradientSchedulerOptions o;
  EXPECT_LT(ExpectedGradient(v, 1, o), ExpectedGradient(v, 0, o));
  EXPECT_LT(ExpectedGradient(v, 0, o), 0);
  o.eps = 0;
  auto g = MakeGradientScheduler(o);
  std::mt19937_64 rng(1);
  EXPECT_EQ(g->Next(v, rng), 1);
}

TEST(TaskSchedulerTest, FadesAfterNoImprovement) {
  GradientSchedulerOptions o;
  TaskView t;
  t.best_us = 10;
  for (int k = 1; k <= 10; ++k) t.history.emplace_back(8 * k, 10);
  t.trials = 80;
  t.rounds = 10;
  EXPECT_TRUE(TaskFaded(t, o));
  t.history.back().second = 9;  // improved in its last round
  t.best_us = 9;
  EXPECT_FALSE(TaskFaded(t, o));
}

// The warm-up round over every task fits the budget: rounds of 8 or more where it allows,
// what each task can get where it does not (a model of 61 tasks tuned with 480 trials).
TEST(TaskSchedulerTest, RoundSizeLetsTheWarmUpReachEveryTask) {
  EXPECT_EQ(RoundSize(64, 300, 1), 64);
  EXPECT_EQ(RoundSize(64, 600, 11), 13);
  EXPECT_EQ(RoundSize(64, 100, 11), 8);
  EXPECT_EQ(RoundSize(16, 100000, 3), 16);
  for (const auto& [budget, tasks] : std::vector<std::pair<int, int>>{
           {480, 61}, {100, 30}, {61, 61}, {10, 61}, {600, 11}, {88, 11}}) {
    const int round = RoundSize(64, budget, tasks);
    EXPECT_GE(round, 1);
    if (budget >= tasks) {
      EXPECT_LE(round * tasks, budget) << budget << " trials, " << tasks << " tasks";
    }
  }
}

TEST(TaskSchedulerTest, ByName) {
  EXPECT_EQ((*MakeTaskScheduler("gradient"))->name(), "gradient");
  EXPECT_EQ((*MakeTaskScheduler("round-robin"))->name(), "round-robin");
  absl::StatusOr<std::unique_ptr<TaskScheduler>> bad = MakeTaskScheduler("greedy");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("greedy"), std::string::npos);
}

// The end-of-run re-timing spends its records where the objective is: a model's big tasks
// re-time `top`, its many tiny ones one (their best), a task not measured yet `top`.
TEST(RetimeCountsTest, FewerRecordsForTasksWithASmallShareOfTheObjective) {
  // Shares 60 %, 30 %, 8 %, 2 % of four tasks (the average share is 25 %).
  EXPECT_EQ(RetimeCounts({1, 1, 2, 1}, {600, 300, 40, 20}, 5), (std::vector<int>{5, 5, 2, 1}));
  // The weight counts: 10 x 20 us is as big as 200 us once.
  EXPECT_EQ(RetimeCounts({10, 1}, {20, 200}, 5), (std::vector<int>{5, 5}));
  // One task, or one without a latency yet: as many as asked.
  EXPECT_EQ(RetimeCounts({1}, {0.5}, 3), (std::vector<int>{3}));
  EXPECT_EQ(RetimeCounts({1, 1, 1}, {1000, 0, 1}, 4), (std::vector<int>{4, 4, 1}));
  EXPECT_EQ(RetimeCounts({1, 1}, {0, 0}, 5), (std::vector<int>{5, 5}));
}

}  // namespace
}  // namespace lathe::tuner
