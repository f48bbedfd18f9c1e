#include "tools/cli_gpu_model.h"

#include <utility>

#include "codegen/cuda/gpu_schedule.h"
#include "tools/model_schedules.h"

namespace lathe::tools {

std::unique_ptr<model::ScheduleSource> GpuModelSchedules(db::Database* db, const ir::Target& target,
                                                         const std::string& device_class) {
  const std::string built = target.Built().ToString();
  return model::DatabaseSchedules(db, device_class,
                                  [built](const ir::Workload& w) -> absl::StatusOr<ir::Schedule> {
                                    absl::StatusOr<ir::Schedule> rule = RuleSchedule(w, built);
                                    if (rule.ok()) return rule;
                                    return codegen::cuda::DefaultGpuSchedule(w);
                                  });
}

absl::StatusOr<std::unique_ptr<gpumodel::GpuModel>> CreateGpuModel(model::Plan plan,
                                                                   const ir::Target& target,
                                                                   db::Database* db,
                                                                   bool default_schedules) {
  absl::StatusOr<std::unique_ptr<gpumodel::GpuDevice>> device = gpumodel::OpenGpuDevice(target);
  if (!device.ok()) return device.status();
  std::unique_ptr<model::ScheduleSource> schedules =
      default_schedules ? model::DatabaseSchedules(nullptr, "", codegen::cuda::DefaultGpuSchedule)
                        : GpuModelSchedules(db, target, (*device)->device_class());
  return gpumodel::GpuModel::Create(std::move(plan), *schedules, *std::move(device));
}

}  // namespace lathe::tools
