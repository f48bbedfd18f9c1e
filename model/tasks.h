// \file
// Task extraction: the distinct workloads of a compiled model, each with how many of its
// kernels use it (its weight in whole-model tuning), its FLOPs and its share of the model's
// FLOPs, and the ONNX nodes it computes.
#ifndef LATHE_MODEL_TASKS_H_
#define LATHE_MODEL_TASKS_H_

#include <string>
#include <vector>

#include "model/compile.h"

namespace lathe::model {

struct Task {
  std::string workload;   // canonical spec
  int weight = 0;         // kernels of the model that run it
  double flops = 0;       // of one call
  double flop_share = 0;  // weight * flops / the model's FLOPs
  std::vector<std::string> nodes;
};

// Tasks in order of first use. Every kernel is a task: the task scheduler gives the cheap
// ones (copies, small elementwise kernels) few trials.
std::vector<Task> ExtractTasks(const Program& p);

// The model's FLOPs (every kernel once).
double ModelFlops(const std::vector<Task>& tasks);

}  // namespace lathe::model

#endif  // LATHE_MODEL_TASKS_H_
