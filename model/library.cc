#include "model/library.h"

#include "codegen/model_library.h"

namespace lathe::model {

absl::Status BuildModelLibrary(const Plan& plan, const ScheduleSource& schedules,
                               const std::string& path, std::vector<std::string>* origins) {
  absl::StatusOr<std::vector<ir::LoweredFunc>> funcs = LowerKernels(plan, schedules, 2, origins);
  if (!funcs.ok()) return funcs.status();
  codegen::ModelTables t;
  for (const ir::LoweredFunc& f : *funcs) t.kernels.push_back(f.name);
  for (const PlanStep& s : plan.steps) {
    t.steps.push_back(
        {s.kernel, static_cast<int32_t>(t.args.size()), static_cast<int32_t>(s.args.size()), 0});
    for (const BufferRef& r : s.args) {
      t.args.push_back({static_cast<int32_t>(r.kind), r.index, r.offset});
    }
  }
  t.weights = plan.weights;
  t.arena_bytes = plan.arena_bytes;
  t.num_inputs = static_cast<int32_t>(plan.inputs.size());
  t.num_outputs = static_cast<int32_t>(plan.outputs.size());
  t.io_json = plan.IoJson();
  return codegen::WriteModelLibrary(*funcs, t, path);
}

}  // namespace lathe::model
