// \file
// bench_tune's multi-task section (`--sections tasks`): the distinct convolutions of a
// ResNet-18 at batch 1 (the 7x7 stride-2 stem, the 3x3s at 56/28/14/7, the stride-2 3x3s and
// 1x1 downsamples between stages), each weighted by how often the network runs it, tuned as
// one multi-task run on a fresh database, once under the gradient task scheduler and once
// round-robin, with the same budget and seed; for each seed the objective (sum of weight x best
// latency) after a few trial counts, then the medians over the seeds and their ratio. Last,
// the headroom: the objective when the warm-up round ends, and the floor that every task at
// the best latency any run found for it gives (floor / round-robin is the lowest ratio a
// scheduler could reach at that budget without finding better programs than all the runs).
#ifndef LATHE_BENCH_TASKS_SECTION_H_
#define LATHE_BENCH_TASKS_SECTION_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lathe::bench {

struct TasksSectionOptions {
  std::string dir;   // where the runs' databases go
  int budget = 600;  // trials of each run over all tasks
  std::vector<int> checkpoints = {150, 300, 600};
  std::vector<uint64_t> seeds = {11, 21, 31};
  double min_repeat_ms = 100;
};

// Runs the section and prints its tables on stdout (progress on stderr). Returns 0, or 1 when
// a run failed.
int RunTasksSection(const TasksSectionOptions& options);

}  // namespace lathe::bench

#endif  // LATHE_BENCH_TASKS_SECTION_H_
