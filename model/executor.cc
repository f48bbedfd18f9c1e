#include "model/executor.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/lower.h"
#include "db/lookup.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"

namespace lathe::model {
namespace {

class DbSchedules : public ScheduleSource {
 public:
  DbSchedules(db::Database* db, std::string device, DefaultScheduleFn fallback)
      : db_(db), device_(std::move(device)), fallback_(std::move(fallback)) {}

  absl::StatusOr<ir::Schedule> Get(const ir::Workload& w, std::string* origin) const override {
    std::string why;
    if (db_ != nullptr) {
      absl::StatusOr<db::LookupResult> r;
      {
        std::lock_guard<std::mutex> lock(mu_);
        r = db::Lookup(*db_, {w.canonical, w.key}, device_);
      }
      if (!r.ok()) return r.status();
      if (r->record) {
        absl::StatusOr<ir::Trace> t = traceio::TraceFromJson(r->record->trace_json);
        absl::StatusOr<ir::Schedule> s =
            t.ok() ? ir::ApplyTrace(w, *t) : absl::StatusOr<ir::Schedule>(t.status());
        if (s.ok()) {
          *origin = RecordOrigin(r->record->median_us);
          return s;
        }
        why = absl::StrCat(" (the stored record does not replay: ", s.status().message(), ")");
      }
    }
    *origin = "default" + why;
    if (fallback_) return fallback_(w);
    return ir::Schedule(w);
  }

 private:
  db::Database* db_;
  std::string device_;
  DefaultScheduleFn fallback_;
  mutable std::mutex mu_;  // the database handle is used from one thread at a time
};

// Runs fn(i) for i in [0, n) on up to `jobs` threads; the first error wins.
absl::Status ParallelFor(int n, int jobs, const std::function<absl::Status(int)>& fn) {
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status first;
  auto work = [&] {
    for (int i = next++; i < n; i = next++) {
      absl::Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < std::min(jobs, n); ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  return first;
}

}  // namespace

std::string RecordOrigin(double median_us) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "record %.1f us", median_us);
  return buf;
}

double RecordUsOf(const std::string& origin) {
  double us = -1;
  if (std::sscanf(origin.c_str(), "record %lf us", &us) != 1) return -1;
  return us;
}

std::unique_ptr<ScheduleSource> DatabaseSchedules(db::Database* db, std::string device_class,
                                                  DefaultScheduleFn fallback) {
  return std::make_unique<DbSchedules>(db, std::move(device_class), std::move(fallback));
}

absl::StatusOr<std::vector<ir::LoweredFunc>> LowerKernels(const Plan& plan,
                                                          const ScheduleSource& schedules, int jobs,
                                                          std::vector<std::string>* origins) {
  const int n = static_cast<int>(plan.kernels.size());
  std::vector<ir::LoweredFunc> funcs(n);
  std::vector<std::string> from(n);
  absl::Status st = ParallelFor(n, jobs, [&](int i) -> absl::Status {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(plan.kernels[i]);
    if (!w.ok()) return w.status();
    absl::StatusOr<ir::Schedule> s = schedules.Get(*w, &from[i]);
    if (!s.ok()) return s.status();
    absl::StatusOr<ir::LoweredFunc> f = codegen::Lower(*s, absl::StrCat("lathe_k", i));
    if (!f.ok()) {
      return absl::InternalError(
          absl::StrCat("kernel ", plan.kernels[i], " (", from[i], "): ", f.status().message()));
    }
    funcs[i] = *std::move(f);
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  if (origins) *origins = std::move(from);
  return funcs;
}

absl::StatusOr<std::unique_ptr<CompiledModel>> CompiledModel::Create(
    Plan plan, const ScheduleSource& schedules, int jobs) {
  std::unique_ptr<CompiledModel> m(new CompiledModel());
  m->plan_ = std::move(plan);
  const Plan& p = m->plan_;
  absl::StatusOr<std::vector<ir::LoweredFunc>> funcs =
      LowerKernels(p, schedules, jobs, &m->origins_);
  if (!funcs.ok()) return funcs.status();
  const int n = static_cast<int>(funcs->size());
  m->kernels_.resize(n);
  absl::Status st = ParallelFor(n, jobs, [&](int i) -> absl::Status {
    absl::StatusOr<std::unique_ptr<codegen::CpuKernel>> k = codegen::JitCompile((*funcs)[i]);
    if (!k.ok()) {
      return absl::InternalError(absl::StrCat("kernel ", p.kernels[i], ": ", k.status().message()));
    }
    m->kernels_[i] = *std::move(k);
    return absl::OkStatus();
  });
  if (!st.ok()) return st;
  for (const auto& k : m->kernels_) m->fns_.push_back(k->fn());
  for (const PlanStep& s : p.steps) {
    lathe_model_step step{s.kernel, static_cast<int32_t>(m->args_.size()),
                          static_cast<int32_t>(s.args.size()), 0};
    for (const BufferRef& r : s.args) {
      m->args_.push_back({static_cast<int32_t>(r.kind), r.index, r.offset});
    }
    m->steps_.push_back(step);
  }
  lathe_model_desc& d = m->desc_;
  d.kernels = m->fns_.data();
  d.steps = m->steps_.data();
  d.args = m->args_.data();
  d.weights = p.weights.data();
  d.io_json = nullptr;
  d.arena_bytes = p.arena_bytes;
  d.num_steps = static_cast<int32_t>(m->steps_.size());
  d.num_inputs = static_cast<int32_t>(p.inputs.size());
  d.num_outputs = static_cast<int32_t>(p.outputs.size());
  return m;
}

CompiledModel::~CompiledModel() {
  for (int i = 0; i < pool_.count; ++i) lathe_free(pool_.free[i]);
}

absl::Status CompiledModel::Run(const float* const* inputs, float* const* outputs) const {
  void* arena = lathe_arena_acquire(&pool_, plan_.arena_bytes);
  if (arena == nullptr) return absl::ResourceExhaustedError("no memory for the activation arena");
  const int rc = lathe_model_exec(&desc_, arena, inputs, outputs);
  lathe_arena_release(&pool_, arena);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("kernel of step ", rc - 1, " (",
                                            plan_.kernels[plan_.steps[rc - 1].kernel], ") failed"));
  }
  return absl::OkStatus();
}

absl::Status CompiledModel::RunProfiled(const float* const* inputs, float* const* outputs,
                                        std::vector<double>* step_seconds) const {
  step_seconds->resize(steps_.size(), 0.0);
  void* arena = lathe_arena_acquire(&pool_, plan_.arena_bytes);
  if (arena == nullptr) return absl::ResourceExhaustedError("no memory for the activation arena");
  lathe_model_desc one = desc_;
  absl::Status st;
  for (size_t s = 0; s < steps_.size() && st.ok(); ++s) {
    one.steps = &steps_[s];
    one.num_steps = 1;
    const auto t0 = std::chrono::steady_clock::now();
    if (lathe_model_exec(&one, arena, inputs, outputs) != 0) {
      st = absl::InternalError(absl::StrCat("kernel of step ", s, " failed"));
    }
    (*step_seconds)[s] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  lathe_arena_release(&pool_, arena);
  return st;
}

}  // namespace lathe::model
