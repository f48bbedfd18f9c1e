#include "tools/cli_gpu_model.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "codegen/cuda/contraction.h"
#include "codegen/cuda/gpu_schedule.h"
#include "proto/trace_io.h"
#include "tools/model_schedules.h"

namespace lathe::tools {

namespace {

bool UsesTf32(const ir::Schedule& s) {
  for (const ir::Instruction& i : s.trace().instructions) {
    if (i.kind == "tensorize" && codegen::cuda::IsTf32ContractionTemplate(i.tag)) return true;
  }
  return false;
}

// The records of `inner`, except those that use TF32 tensor cores when the user did not allow
// them (records of one device class hold both): such a kernel gets the fastest fp32 record of
// its workload (the database's top records), else `fallback`.
class Fp32Schedules : public model::ScheduleSource {
 public:
  // Records a TF32 best record is replaced from: enough to reach past a tuning run's TF32 ones.
  static constexpr int kFp32Candidates = 64;

  Fp32Schedules(std::unique_ptr<model::ScheduleSource> inner, db::Database* db,
                std::string device_class, model::DefaultScheduleFn fallback)
      : inner_(std::move(inner)),
        db_(db),
        device_class_(std::move(device_class)),
        fallback_(std::move(fallback)) {}
  absl::StatusOr<ir::Schedule> Get(const ir::Workload& w, std::string* origin) const override {
    absl::StatusOr<ir::Schedule> s = inner_->Get(w, origin);
    if (!s.ok() || !UsesTf32(*s)) return s;
    if (db_ != nullptr) {
      // The database serializes its callers.
      absl::StatusOr<std::vector<db::Record>> top =
          db_->TopK(w.key, device_class_, kFp32Candidates);
      if (top.ok()) {
        for (const db::Record& r : *top) {
          absl::StatusOr<ir::Trace> t = traceio::TraceFromJson(r.trace_json);
          if (!t.ok()) continue;
          absl::StatusOr<ir::Schedule> fp32 = ir::ApplyTrace(w, *t);
          if (!fp32.ok() || UsesTf32(*fp32)) continue;
          if (origin) {
            char buf[96];
            std::snprintf(buf, sizeof(buf), "record %.1f us (the fastest fp32 one)", r.median_us);
            *origin = buf;
          }
          return fp32;
        }
      }
    }
    if (origin) *origin = "default (the records use tf32; --gpu-math fp32)";
    return fallback_(w);
  }

 private:
  std::unique_ptr<model::ScheduleSource> inner_;
  db::Database* db_;
  std::string device_class_;
  model::DefaultScheduleFn fallback_;
};

}  // namespace

std::unique_ptr<model::ScheduleSource> GpuModelSchedules(db::Database* db, const ir::Target& target,
                                                         const std::string& device_class,
                                                         bool tf32) {
  const ir::Target built = target.Built();
  model::DefaultScheduleFn rule = [built,
                                   tf32](const ir::Workload& w) -> absl::StatusOr<ir::Schedule> {
    absl::StatusOr<ir::Schedule> rule = RuleSchedule(w, built, tf32);
    if (rule.ok()) return rule;
    return codegen::cuda::DefaultGpuSchedule(w);
  };
  std::unique_ptr<model::ScheduleSource> records = model::DatabaseSchedules(db, device_class, rule);
  if (tf32) return records;
  return std::make_unique<Fp32Schedules>(std::move(records), db, device_class, rule);
}

absl::StatusOr<std::unique_ptr<gpumodel::GpuModel>> CreateGpuModel(model::Plan plan,
                                                                   const ir::Target& target,
                                                                   db::Database* db,
                                                                   bool default_schedules,
                                                                   bool tf32) {
  absl::StatusOr<std::unique_ptr<gpumodel::GpuDevice>> device = gpumodel::OpenGpuDevice(target);
  if (!device.ok()) return device.status();
  std::unique_ptr<model::ScheduleSource> schedules =
      default_schedules ? model::DatabaseSchedules(nullptr, "", codegen::cuda::DefaultGpuSchedule)
                        : GpuModelSchedules(db, target, (*device)->device_class(), tf32);
  // NVRTC compiles the kernels' modules on every core (up to 16): a model's 60-90 kernels took
  // 13-19 s on two threads of an H100 host.
  const int jobs = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 2u, 16u));
  return gpumodel::GpuModel::Create(std::move(plan), *schedules, *std::move(device), jobs);
}

}  // namespace lathe::tools
