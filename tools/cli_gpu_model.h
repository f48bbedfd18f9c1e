// \file
// The GPU half of `lathe run --model F --target cuda[:N]|cuda-emu:sm_XX` (built with the
// CUDA backend only): the device opened, the schedule of every kernel picked (the best
// record of the device's class, else the GPU search space's rule-picked candidate, else the
// default GPU schedule), the model compiled for it (gpumodel/gpu_model.h).
#ifndef LATHE_TOOLS_CLI_GPU_MODEL_H_
#define LATHE_TOOLS_CLI_GPU_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "db/database.h"
#include "gpumodel/gpu_model.h"
#include "ir/target.h"
#include "model/executor.h"
#include "model/plan.h"

namespace lathe::tools {

// The schedules of a model's kernels for `target` (a GPU or the emulator): the best record
// of `device_class` in `db` (may be null), else the rule-picked candidate of the GPU search
// space of the architecture `target` builds for, else the default GPU schedule.
// `tf32`: the user allows TF32 tensor cores (`--gpu-math tf32`); without it a record whose
// kernel uses them is passed over for the rule.
std::unique_ptr<model::ScheduleSource> GpuModelSchedules(db::Database* db, const ir::Target& target,
                                                         const std::string& device_class,
                                                         bool tf32 = false);

// Opens `target`'s device and compiles `plan` for it; `default_schedules`: every kernel's
// default GPU schedule, the database unread (`db` may be null).
absl::StatusOr<std::unique_ptr<gpumodel::GpuModel>> CreateGpuModel(model::Plan plan,
                                                                   const ir::Target& target,
                                                                   db::Database* db,
                                                                   bool default_schedules,
                                                                   bool tf32 = false);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_GPU_MODEL_H_
