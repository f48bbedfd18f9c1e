#include "model/tasks.h"

#include <map>

#include "ir/op_registry.h"
#include "ir/workload.h"

namespace lathe::model {

std::vector<Task> ExtractTasks(const Program& p) {
  std::vector<Task> tasks;
  std::map<std::string, size_t> index;
  for (const KernelCall& k : p.kernels) {
    auto it = index.find(k.spec);
    if (it == index.end()) {
      Task t;
      t.workload = k.spec;
      absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(k.spec);
      absl::StatusOr<double> flops = spec.ok() ? ir::WorkloadFlops(*spec) : spec.status();
      t.flops = flops.ok() ? *flops : 0;
      it = index.emplace(k.spec, tasks.size()).first;
      tasks.push_back(std::move(t));
    }
    Task& t = tasks[it->second];
    ++t.weight;
    t.nodes.insert(t.nodes.end(), k.nodes.begin(), k.nodes.end());
  }
  const double total = ModelFlops(tasks);
  for (Task& t : tasks) t.flop_share = total > 0 ? t.weight * t.flops / total : 0;
  return tasks;
}

double ModelFlops(const std::vector<Task>& tasks) {
  double total = 0;
  for (const Task& t : tasks) total += t.weight * t.flops;
  return total;
}

}  // namespace lathe::model
