// \file
// Running a compiled model in-process: every distinct kernel of the plan lowered from the
// schedule a ScheduleSource picks (the best database record, else a default schedule) and
// JIT-compiled, then the plan executed by the model runtime (codegen/runtime/model_runtime.h)
// with arenas from a pool: no allocation per run once warm.
#ifndef LATHE_MODEL_EXECUTOR_H_
#define LATHE_MODEL_EXECUTOR_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cpu_kernel.h"
#include "codegen/runtime/model_runtime.h"
#include "db/database.h"
#include "ir/schedule.h"
#include "ir/stmt.h"
#include "model/plan.h"

namespace lathe::model {

// Picks the schedule of each kernel. Thread-safe: Get may run on several threads.
class ScheduleSource {
 public:
  virtual ~ScheduleSource() = default;
  // The schedule of `w`; *origin says where it came from ("default", "record 12.3 us").
  virtual absl::StatusOr<ir::Schedule> Get(const ir::Workload& w, std::string* origin) const = 0;
};

// A record's origin text ("record 812.5 us", its median latency), and the latency back from
// such a text (negative for any other origin: "default", ...).
std::string RecordOrigin(double median_us);
double RecordUsOf(const std::string& origin);

using DefaultScheduleFn = std::function<absl::StatusOr<ir::Schedule>(const ir::Workload&)>;

// The best record of `db` for `device_class` (null db: none), else `fallback` (null: the
// untouched schedule). A stored trace that no longer replays falls back too, and says so.
std::unique_ptr<ScheduleSource> DatabaseSchedules(db::Database* db, std::string device_class,
                                                  DefaultScheduleFn fallback);

// Lowers every kernel of `plan` (named lathe_k0, lathe_k1, ...) with the source's schedules,
// on up to `jobs` threads. `origins` (optional) receives each kernel's origin.
absl::StatusOr<std::vector<ir::LoweredFunc>> LowerKernels(const Plan& plan,
                                                          const ScheduleSource& schedules, int jobs,
                                                          std::vector<std::string>* origins);

class CompiledModel {
 public:
  // Lowers and JIT-compiles every kernel (on up to `jobs` threads).
  static absl::StatusOr<std::unique_ptr<CompiledModel>> Create(Plan plan,
                                                               const ScheduleSource& schedules,
                                                               int jobs = 2);
  ~CompiledModel();

  const Plan& plan() const { return plan_; }
  const std::vector<std::string>& origins() const { return origins_; }

  // Runs the model: one buffer per input and output, in plan order. Thread-safe.
  absl::Status Run(const float* const* inputs, float* const* outputs) const;
  // Runs step by step, adding each step's wall time (seconds) to (*step_seconds)[i].
  absl::Status RunProfiled(const float* const* inputs, float* const* outputs,
                           std::vector<double>* step_seconds) const;

 private:
  CompiledModel() = default;
  Plan plan_;
  std::vector<std::string> origins_;
  std::vector<std::unique_ptr<codegen::CpuKernel>> kernels_;
  std::vector<lathe_kernel_fn> fns_;
  std::vector<lathe_model_step> steps_;
  std::vector<lathe_model_arg> args_;
  lathe_model_desc desc_{};
  mutable lathe_arena_pool pool_{};
};

}  // namespace lathe::model

#endif  // LATHE_MODEL_EXECUTOR_H_
