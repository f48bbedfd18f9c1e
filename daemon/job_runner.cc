#include "daemon/job_runner.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cost_model/database_io.h"
#include "daemon/niced_runner.h"
#include "daemon/search_pool.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "spdlog/spdlog.h"
#include "tuner/driver.h"
#include "tuner/runner.h"
#include "tuner/space.h"
#include "tuner/tune.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

namespace v1 = lathe::v1;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kPersistEvery{1000};
// How often a job thread with tasks in the queue looks whether workers have drained it below
// half a batch (leases touch only the registry, which never calls into the runner).
constexpr std::chrono::milliseconds kQueuePoll{20};
// In-flight tasks of a workload (queued + leased, not reported) at most this many batches: a
// fleet larger than a batch keeps every worker busy, while a greedy lease cannot make the
// search run far ahead of the results that teach its cost model.
constexpr int kMaxInflightBatches = 4;
// How often the re-timing phase looks at the database's best records even without a result.
constexpr std::chrono::milliseconds kRetimePoll{1000};

bool Terminal(db::JobState s) {
  return s == db::JobState::kDone || s == db::JobState::kFailed || s == db::JobState::kCancelled;
}

v1::JobState ToProto(db::JobState s) {
  switch (s) {
    case db::JobState::kQueued:
      return v1::QUEUED;
    case db::JobState::kRunning:
      return v1::RUNNING;
    case db::JobState::kDone:
      return v1::DONE;
    case db::JobState::kFailed:
      return v1::FAILED;
    case db::JobState::kCancelled:
      return v1::CANCELLED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

}  // namespace

int WorkloadTarget(const v1::JobSpec& spec) {
  const int cap = spec.tasks_size() > 0 ? spec.max_trials_per_task() : 0;
  return cap > 0 ? std::min(cap, spec.trials()) : spec.trials();
}

int JobBudget(const JobEntry& job) {
  if (job.spec.tasks_size() > 0) {
    // Capped tasks cannot take more than their caps together.
    const int64_t caps = int64_t{WorkloadTarget(job.spec)} * job.spec.tasks_size();
    return static_cast<int>(std::min<int64_t>(job.spec.trials(), caps));
  }
  return job.spec.trials() * static_cast<int>(job.workloads.size());
}

std::string JobSpecJson(const JobEntry& job) {
  std::string text;
  google::protobuf::util::JsonPrintOptions jo;
  jo.always_print_primitive_fields = true;
  nlohmann::json doc = nlohmann::json::object();
  if (google::protobuf::util::MessageToJsonString(job.spec, &text, jo).ok()) {
    doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) doc = nlohmann::json::object();
  }
  std::vector<int64_t> baseline, done, remeasured, remeasure_failed;
  for (const WorkloadRun& w : job.workloads) {
    baseline.push_back(w.baseline);
    done.push_back(w.done);
    remeasured.push_back(w.remeasured);
    remeasure_failed.push_back(w.remeasure_failed);
  }
  doc["baselineMeasured"] = baseline;
  doc["doneMeasured"] = done;
  // The re-timing's progress, so that a reloaded job shows it (the records keep the repeats).
  doc["remeasuredCount"] = remeasured;
  doc["remeasureFailedCount"] = remeasure_failed;
  nlohmann::json history = nlohmann::json::array();
  for (const v1::ObjectivePoint& p : job.objective_history) {
    history.push_back({p.at_ms(), p.trials_done(), p.objective_us()});
  }
  doc["objectiveHistory"] = std::move(history);
  return doc.dump();
}

std::vector<v1::ObjectivePoint> ObjectiveHistoryFromSpecJson(const nlohmann::json& doc) {
  std::vector<v1::ObjectivePoint> points;
  if (!doc.is_object()) return points;
  auto it = doc.find("objectiveHistory");
  if (it == doc.end() || !it->is_array()) return points;
  for (const nlohmann::json& p : *it) {
    if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() || !p[1].is_number_integer() ||
        !p[2].is_number()) {
      continue;
    }
    const double objective = p[2].get<double>();
    if (!(objective > 0) || !std::isfinite(objective)) continue;
    v1::ObjectivePoint point;
    point.set_at_ms(p[0].get<int64_t>());
    point.set_trials_done(
        static_cast<int32_t>(std::clamp<int64_t>(p[1].get<int64_t>(), 0, INT32_MAX)));
    point.set_objective_us(objective);
    points.push_back(std::move(point));
  }
  if (points.size() > kMaxObjectivePoints) {
    // Written by a daemon that kept more: the first and the newest points stay.
    points.erase(points.begin() + 1, points.end() - (kMaxObjectivePoints - 1));
  }
  return points;
}

class JobRunner::Impl {
 public:
  Impl(const JobRunnerOptions& o, LeaseRegistry* r, db::Database* d)
      : options(o),
        registry(r),
        db(d),
        own_searches(o.search_pool != nullptr
                         ? nullptr
                         : std::make_unique<NicedSearchPool>(
                               o.search.threads > 0 ? o.search.threads
                                                    : static_cast<int>(std::max(
                                                          1u, std::thread::hardware_concurrency())),
                               o.search_nice)),
        searches(o.search_pool != nullptr ? o.search_pool : own_searches.get()) {}

  JobRunnerOptions options;
  LeaseRegistry* registry;
  db::Database* db;
  // The search threads every job's driver shares (job_runner.h); joined after the job threads.
  std::unique_ptr<NicedSearchPool> own_searches;
  tuner::SearchPool* searches;
  std::mutex mu;
  std::condition_variable change_cv;  // a job changed, a result arrived, cancel, stopping
  bool stopping = false;
  bool stopped = false;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs;
  std::mt19937_64 id_rng{std::random_device{}() ^
                         static_cast<uint64_t>(Clock::now().time_since_epoch().count())};

  // --- helpers; all expect `mu` held unless said otherwise ---

  void Touch(JobEntry& job) {
    ++job.version;
    job.updated_ms = tuner::NowUnixMs();
    NoteObjective(job);
    change_cv.notify_all();
  }

  // The job's objective (tuner::Objective over its workloads): the sum of weight x best
  // latency, 0 until every workload has a best. No allocation: Touch runs it per result.
  static double JobObjective(const JobEntry& job) {
    double sum = 0;
    for (const WorkloadRun& w : job.workloads) {
      if (!(w.best_latency_us > 0)) return 0;
      sum += w.weight * w.best_latency_us;
    }
    return sum;
  }

  // Appends a point to the job's objective history when the objective changed.
  void NoteObjective(JobEntry& job) const {
    const double objective = JobObjective(job);
    std::vector<v1::ObjectivePoint>& h = job.objective_history;
    if (objective <= 0 || (!h.empty() && h.back().objective_us() == objective)) return;
    if (h.size() >= kMaxObjectivePoints) {
      // Every other point of the older ones goes; the first and the newest stay.
      std::vector<v1::ObjectivePoint> kept;
      for (size_t i = 0; i < h.size(); ++i) {
        if (i == 0 || i + 1 == h.size() || i % 2 == 0) kept.push_back(h[i]);
      }
      h = std::move(kept);
    }
    v1::ObjectivePoint p;
    p.set_at_ms(job.updated_ms);
    p.set_trials_done(TotalDone(job));
    p.set_objective_us(objective);
    h.push_back(std::move(p));
  }

  v1::JobStatus StatusOf(const JobEntry& job) const {
    v1::JobStatus st;
    st.set_job_id(job.id);
    st.set_state(ToProto(job.state));
    st.set_device_class(job.device_class);
    st.set_message(job.message);
    st.set_created_at_ms(job.created_ms);
    st.set_updated_at_ms(job.updated_ms);
    for (const WorkloadRun& w : job.workloads) {
      v1::WorkloadProgress* p = st.add_workloads();
      p->set_workload(w.canonical);
      p->set_trials_done(w.done);
      // A tasks job's scheduler decides each task's share: no target of its own unless the
      // job caps every task.
      p->set_trials_target(
          job.spec.tasks_size() == 0 || job.spec.max_trials_per_task() > 0 ? w.target : 0);
      p->set_weight(w.weight);
      p->set_best_latency_us(w.best_latency_us);
      p->set_best_gflops(w.best_gflops);
      for (const auto& [name, n] : w.errors) (*p->mutable_errors())[name] = n;
      p->set_remeasured(w.remeasured);
      p->set_remeasure_failed(w.remeasure_failed);
      p->set_remeasure_pending(w.remeasure_pending);
    }
    st.set_objective_us(JobObjective(job));
    st.set_trials_done(TotalDone(job));
    st.set_trials_budget(JobBudget(job));
    for (const v1::ObjectivePoint& p : job.objective_history) *st.add_objective_history() = p;
    return st;
  }

  int TotalDone(const JobEntry& job) const {
    int n = 0;
    for (const WorkloadRun& w : job.workloads) n += w.done;
    return n;
  }

  // Writes the job's state, trials done and spec (with each workload's progress: see
  // JobSpecJson). `mu` must NOT be held.
  void Persist(db::Database& database, JobEntry& job, db::JobState state,
               const std::string& message) {
    int done;
    std::string spec_json;
    {
      std::lock_guard<std::mutex> lock(mu);
      // A job cancelled (or failed) meanwhile keeps the state its end wrote.
      if (state == db::JobState::kRunning && Terminal(job.state)) return;
      done = TotalDone(job);
      spec_json = JobSpecJson(job);
    }
    absl::Status st = database.UpdateJobAndSpec(job.id, state, done, message, spec_json);
    if (!st.ok())
      spdlog::error("event=job_persist_failed job={} error=\"{}\"", job.id, st.ToString());
  }

  void StartJobThread(JobEntry* job) {
    job->thread = std::thread([this, job] { RunJob(job); });
  }

  // `mu` must NOT be held.
  void FailJob(JobEntry* job, db::Database& database, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (Terminal(job->state)) return;
      job->state = db::JobState::kFailed;
      job->message = message;
      registry->DropQueued(job->id);
      Touch(*job);
    }
    Persist(database, *job, db::JobState::kFailed, message);
    spdlog::error("event=job_finished job={} state=failed message=\"{}\"", job->id, message);
  }

  void RunJob(JobEntry* job);
  // Best records re-timed per workload at the end of `job`: its spec's, else the daemon's.
  int RemeasureTop(const JobEntry& job) const {
    return job.spec.has_remeasure_top() ? job.spec.remeasure_top() : options.remeasure_top;
  }
  // Sets workload `i`'s best from the database. `mu` must NOT be held.
  void RefreshBest(JobEntry* job, db::Database& jdb, size_t i);

  class LeaseRunner;
};

void JobRunner::Impl::RefreshBest(JobEntry* job, db::Database& jdb, size_t i) {
  std::string key;
  {
    std::lock_guard<std::mutex> lock(mu);
    key = job->workloads[i].key;
  }
  absl::StatusOr<std::optional<db::Record>> b = jdb.Best(key, job->device_class);
  if (!b.ok() || !b->has_value()) return;
  std::lock_guard<std::mutex> lock(mu);
  WorkloadRun& run = job->workloads[i];
  if (run.best_latency_us == (*b)->median_us) return;
  run.best_latency_us = (*b)->median_us;
  run.best_gflops = (*b)->Gflops();
  Touch(*job);
}

// ---------------------------------------------------------------------------------------
// The runner of a job's driver: its trials go to the lease registry's queue for the workers,
// its outcomes come from Report through Account (the job's inbox).

class JobRunner::Impl::LeaseRunner : public tuner::Runner {
 public:
  LeaseRunner(Impl& impl, JobEntry* job, db::Database& jdb, int batch)
      : s_(impl), job_(job), jdb_(jdb), batch_(batch) {}

  Counts Progress(int task) override {
    std::lock_guard<std::mutex> lock(s_.mu);
    const WorkloadRun& w = job_->workloads[task];
    return Counts{w.done, w.outstanding};
  }

  // Room for a round when fewer than half a batch of the job's tasks are outstanding, or
  // fewer than half a batch wait in the queue while fewer than kMaxInflightBatches batches
  // per open workload are in flight (job_runner.h).
  int Room() override {
    std::lock_guard<std::mutex> lock(s_.mu);
    return RoomLocked();
  }

  absl::StatusOr<std::vector<std::string>> Dispatch(std::vector<tuner::Trial> trials) override {
    std::vector<std::string> skipped;
    std::map<int, std::vector<v1::Task>> by_workload;
    std::map<int, std::vector<std::string>> trace_json;  // the stored forms, by workload
    // Stored since the driver read its measured set (another job of the workload measured
    // it): its result would be a duplicate, not a trial of this job. One look-up for the
    // round; when it fails, every trial is queued (a duplicate result is stored once anyway).
    std::vector<std::string> ids;
    ids.reserve(trials.size());
    for (const tuner::Trial& t : trials) ids.push_back(t.candidate_id);
    absl::StatusOr<std::vector<bool>> stored = jdb_.HasCandidates(ids);
    for (size_t k = 0; k < trials.size(); ++k) {
      tuner::Trial& t = trials[k];
      if (stored.ok() && (*stored)[k]) {
        skipped.push_back(std::move(t.candidate_id));
        continue;
      }
      v1::Task task;
      task.set_candidate_id(t.candidate_id);
      task.set_job_id(job_->id);
      task.set_device_class(job_->device_class);
      *task.mutable_request() = std::move(t.request);
      by_workload[t.task].push_back(std::move(task));
      trace_json[t.task].push_back(std::move(t.trace_json));
    }
    std::lock_guard<std::mutex> lock(s_.mu);
    if (s_.stopping || job_->cancel || Terminal(job_->state)) {
      // A stopping or cancelled job queues nothing: every trial comes back as skipped.
      for (const auto& [i, tasks] : by_workload) {
        for (const v1::Task& t : tasks) skipped.push_back(t.candidate_id());
      }
      return skipped;
    }
    for (auto& [i, tasks] : by_workload) {
      // Under `mu` (then the registry's): a concurrent Cancel drops them or never sees them.
      // A candidate the registry already holds (another job's) is not queued again.
      job_->workloads[i].outstanding +=
          s_.registry->Enqueue(i, std::move(tasks), &skipped, std::move(trace_json[i]));
    }
    s_.Touch(*job_);
    return skipped;
  }

  absl::StatusOr<std::vector<tuner::TrialOutcome>> Wait(bool until_room) override {
    std::vector<Reported> inbox;
    {
      std::unique_lock<std::mutex> lock(s_.mu);
      auto ready = [&] {
        return s_.stopping || job_->cancel || !job_->inbox.empty() || woken_ ||
               (until_room && RoomLocked() > 0);
      };
      // The queue draining wakes nobody (leases touch only the registry): look every
      // kQueuePoll.
      if (!ready()) s_.change_cv.wait_for(lock, kQueuePoll, ready);
      woken_ = false;
      if (s_.stopping || job_->cancel) return std::vector<tuner::TrialOutcome>{};
      inbox.swap(job_->inbox);
    }
    std::vector<tuner::TrialOutcome> out;
    for (Reported& r : inbox) {
      if (r.remeasure) continue;  // a re-timing reported after the job's re-timing ended
      tuner::TrialOutcome o;
      o.kind = r.withdrawn             ? tuner::TrialOutcome::Kind::kWithdrawn
               : r.program.has_value() ? tuner::TrialOutcome::Kind::kForeign
                                       : tuner::TrialOutcome::Kind::kMeasured;
      o.task = r.workload;
      o.candidate_id = std::move(r.candidate_id);
      if (r.program.has_value()) o.program = *r.program;
      o.error_class = r.error_class;
      o.median_us = r.median_us;
      o.counted = r.counted;
      out.push_back(std::move(o));
    }
    // Written at most once per kPersistEvery: each write takes SQLite's write lock, which
    // Report's inserts on the service's connection would otherwise keep waiting for. A
    // resumed job recounts its stored traces, unless another job of its workloads ran
    // meanwhile: then it starts from these counts (a little behind after a crash, exact
    // after a graceful stop, which writes them last).
    if (!out.empty() && Clock::now() - persisted_at_ >= kPersistEvery) {
      s_.Persist(jdb_, *job_, db::JobState::kRunning, "");
      persisted_at_ = Clock::now();
    }
    return out;
  }

  bool Stopping() override {
    std::lock_guard<std::mutex> lock(s_.mu);
    return s_.stopping || job_->cancel || Terminal(job_->state);
  }

  // A background search ended: Wait returns so that the driver dispatches its round.
  void Wake() override {
    std::lock_guard<std::mutex> lock(s_.mu);
    woken_ = true;
    s_.change_cv.notify_all();
  }

  void TrialsFinished() override {
    if (s_.RemeasureTop(*job_) > 0) s_.Persist(jdb_, *job_, db::JobState::kRunning, "");
    std::lock_guard<std::mutex> lock(s_.mu);
    // The trials are done: what still waits in the queue is past every target.
    s_.registry->DropQueued(job_->id);
  }

  // Queues the re-timings as Task.remeasure tasks and waits until each is reported (Account
  // counts them in the workload's re-timing progress; a failed one leaves its record as it
  // was). A candidate another job is re-timing right now is skipped (Enqueue): its record is
  // re-timed all the same, and counts as not added here.
  absl::StatusOr<std::vector<bool>> Retime(const std::vector<tuner::RetimeRequest>& requests,
                                           double ms,
                                           const std::function<void(int, int)>&) override {
    std::vector<bool> added(requests.size(), false);
    std::map<std::string, size_t> waiting;  // candidate id -> request index
    std::map<int, std::vector<v1::Task>> by_workload;
    for (size_t k = 0; k < requests.size(); ++k) {
      const tuner::RetimeRequest& r = requests[k];
      v1::Task t;
      t.set_candidate_id(r.candidate_id);
      t.set_job_id(job_->id);
      t.set_device_class(job_->device_class);
      t.set_remeasure(true);
      v1::MeasureRequest* req = t.mutable_request();
      req->set_candidate_id(r.candidate_id);
      req->set_workload(r.workload);
      traceio::SetRequestTraceJson(r.trace_json, req);
      req->set_min_repeat_ms(ms);
      req->set_flush_cache(tuner::IsGpuDeviceClass(job_->device_class));
      req->set_cold_weights(r.cold_weights);
      by_workload[r.task].push_back(std::move(t));
      waiting.emplace(r.candidate_id, k);
    }
    {
      std::lock_guard<std::mutex> lock(s_.mu);
      if (s_.stopping || job_->cancel) return added;
      for (auto& [i, tasks] : by_workload) {
        const size_t want = tasks.size();
        std::vector<std::string> skipped;
        const int queued = s_.registry->Enqueue(i, std::move(tasks), &skipped);
        for (const std::string& id : skipped) waiting.erase(id);
        job_->workloads[i].remeasure_pending += queued;
        spdlog::info("event=remeasure_queued job={} workload=\"{}\" tasks={} skipped={}", job_->id,
                     job_->workloads[i].canonical, queued, static_cast<int>(want) - queued);
      }
      s_.Touch(*job_);
    }
    while (!waiting.empty()) {
      std::vector<Reported> inbox;
      {
        std::unique_lock<std::mutex> lock(s_.mu);
        s_.change_cv.wait_for(lock, kRetimePoll,
                              [&] { return s_.stopping || job_->cancel || !job_->inbox.empty(); });
        if (s_.stopping || job_->cancel) return added;
        inbox.swap(job_->inbox);
      }
      std::set<int> moved;
      // Late results of the trials (tasks leased before the budget was reached) are stored
      // and counted by Account; the search that would learn from them has ended.
      for (const Reported& r : inbox) {
        if (!r.remeasure) continue;
        auto it = waiting.find(r.candidate_id);
        if (it == waiting.end()) continue;
        added[it->second] = r.error_class == db::ErrorClass::kOk;
        moved.insert(r.workload);
        waiting.erase(it);
      }
      for (int i : moved) s_.RefreshBest(job_, jdb_, static_cast<size_t>(i));
    }
    return added;
  }

 private:
  int RoomLocked() {
    int outstanding = 0, open = 0;
    for (const WorkloadRun& w : job_->workloads) {
      outstanding += w.outstanding;
      open += w.done < w.target ? 1 : 0;
    }
    if (outstanding <= batch_ / 2) return batch_;
    if (outstanding < kMaxInflightBatches * batch_ * std::max(1, open) &&
        s_.registry->QueuedOf(job_->id) < batch_ / 2) {
      return batch_;
    }
    return 0;
  }

  Impl& s_;
  JobEntry* job_;
  db::Database& jdb_;
  const int batch_;
  Clock::time_point persisted_at_ = Clock::now();
  bool woken_ = false;  // Wake() since the last Wait (under s_.mu)
};

// ---------------------------------------------------------------------------------------
// The thread of one job: the tuning driver with the lease runner.

void JobRunner::Impl::RunJob(JobEntry* job) {
  NameThisThread("lathe-job");
  db::OpenOptions oo;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path, oo);
  if (!opened.ok()) {
    FailJob(job, *db, absl::StrCat("cannot open database: ", opened.status().ToString()));
    return;
  }
  db::Database& jdb = **opened;
  const std::string dc = job->device_class;

  std::vector<tuner::DriverTask> tasks;
  std::vector<std::string> canonicals;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const WorkloadRun& w : job->workloads) canonicals.push_back(w.canonical);
  }
  for (size_t i = 0; i < canonicals.size(); ++i) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(canonicals[i]);
    if (!w.ok()) {
      FailJob(job, jdb, std::string(w.status().message()));
      return;
    }
    absl::StatusOr<std::unique_ptr<tuner::SearchSpace>> sp = tuner::SpaceForDeviceClass(*w, dc);
    if (!sp.ok()) {
      FailJob(job, jdb, absl::StrCat("workload '", w->canonical, "': ", sp.status().message()));
      return;
    }
    tuner::DriverTask t;
    t.workload = std::move(*w);
    t.space = std::move(*sp);
    {
      std::lock_guard<std::mutex> lock(mu);
      const WorkloadRun& run = job->workloads[i];
      t.weight = run.weight;
      // A workloads job gives each its trials; a tasks job has its budget and, when it sets
      // one, the cap of each task.
      t.cap = job->spec.tasks_size() > 0 ? job->spec.max_trials_per_task() : run.target;
    }
    tasks.push_back(std::move(t));
  }
  for (size_t i = 0; i < tasks.size(); ++i) RefreshBest(job, jdb, i);

  int done_total;
  tuner::DriverOptions d;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (job->cancel || stopping) return;
    job->state = db::JobState::kRunning;
    done_total = TotalDone(*job);
    d.budget = JobBudget(*job);
    Touch(*job);
  }
  Persist(jdb, *job, db::JobState::kRunning, "");
  spdlog::info("event=job_started job={} device_class=\"{}\" workloads={} trials_done={}", job->id,
               dc, tasks.size(), done_total);

  d.device_class = dc;
  d.batch = job->spec.batch();
  d.search = options.search;
  d.seed_records = options.seed_records;
  d.use_cost_model = options.use_cost_model;
  d.seed = job->spec.seed() != 0 ? job->spec.seed()
                                 : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                                       std::random_device{}();
  d.min_repeat_ms = job->spec.min_repeat_ms();
  d.flush_cache = tuner::IsGpuDeviceClass(dc);
  d.cold_weights = job->spec.cold_weights() && !d.flush_cache;
  d.remeasure_top = RemeasureTop(*job);
  d.remeasure_ms = job->spec.min_repeat_ms() * options.remeasure_factor;
  // The search, featurization and retraining run niced (job_runner.h); the locks are taken on
  // this thread only.
  NicedRunner niced(options.search_nice);
  d.run_heavy = [&niced](const std::function<void()>& fn) { niced.Run(fn); };
  // The rounds themselves run on the daemon's search threads, several tasks (and jobs) at once.
  d.search_pool = searches;

  LeaseRunner runner(*this, job, jdb, d.batch);
  absl::StatusOr<tuner::DriverResult> result = tuner::RunDriver(tasks, d, jdb, runner, nullptr);
  if (!result.ok()) {
    FailJob(job, jdb, std::string(result.status().message()));
    return;
  }
  if (result->stopped) return;  // cancelled (persisted by Cancel) or shutting down
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping || job->cancel) return;
    job->state = db::JobState::kDone;
    registry->DropQueued(job->id);
    done_total = TotalDone(*job);
    Touch(*job);
  }
  Persist(jdb, *job, db::JobState::kDone, "");
  spdlog::info("event=job_finished job={} state=done trials_done={}", job->id, done_total);
}
// ---------------------------------------------------------------------------------------

JobRunner::JobRunner(const JobRunnerOptions& options, LeaseRegistry* registry, db::Database* db)
    : impl_(std::make_unique<Impl>(options, registry, db)) {}

JobRunner::~JobRunner() { Stop(); }

std::string JobRunner::NewJobId() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  char buf[32];
  std::snprintf(buf, sizeof buf, "job-%012llx",
                static_cast<unsigned long long>(impl_->id_rng() & 0xffffffffffffull));
  return buf;
}

bool JobRunner::Add(std::unique_ptr<JobEntry> job, bool start) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopping) return false;
  JobEntry* raw = job.get();
  impl_->jobs.emplace(job->id, std::move(job));
  if (start) impl_->StartJobThread(raw);
  return true;
}

bool JobRunner::ShuttingDown() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stopping;
}

void JobRunner::BeginShutdown() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stopping = true;
  impl_->change_cv.notify_all();
}

void JobRunner::Stop() {
  BeginShutdown();
  std::vector<std::thread*> threads;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    for (auto& [id, job] : impl_->jobs) {
      if (job->thread.joinable()) threads.push_back(&job->thread);
    }
  }
  for (std::thread* t : threads) t->join();
  // The exact progress of every unfinished job, for the next start (see JobSpecJson).
  std::vector<JobEntry*> unfinished;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [id, job] : impl_->jobs) {
      if (job->state == db::JobState::kRunning) unfinished.push_back(job.get());
    }
  }
  for (JobEntry* job : unfinished) impl_->Persist(*impl_->db, *job, db::JobState::kRunning, "");
}

absl::StatusOr<v1::JobStatus> JobRunner::Get(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->jobs.find(job_id);
  if (it == impl_->jobs.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  }
  return impl_->StatusOf(*it->second);
}

absl::StatusOr<v1::JobStatus> JobRunner::Watch(const std::string& job_id, uint64_t* version,
                                               int timeout_ms) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lock(s.mu);
  auto it = s.jobs.find(job_id);
  if (it == s.jobs.end()) return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  JobEntry& job = *it->second;
  s.change_cv.wait_for(lock, std::chrono::milliseconds(std::max(0, timeout_ms)),
                       [&] { return s.stopping || job.version > *version; });
  *version = job.version;
  return s.StatusOf(job);
}

absl::StatusOr<v1::CancelJobResponse> JobRunner::Cancel(const std::string& job_id) {
  Impl& s = *impl_;
  v1::CancelJobResponse resp;
  int done;
  JobEntry* entry;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.jobs.find(job_id);
    if (it == s.jobs.end()) {
      return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
    }
    JobEntry& job = *it->second;
    entry = &job;
    if (Terminal(job.state)) {
      *resp.mutable_status() = s.StatusOf(job);
      return resp;
    }
    job.cancel = true;
    job.state = db::JobState::kCancelled;
    s.registry->DropQueued(job.id);
    done = s.TotalDone(job);
    s.Touch(job);
    *resp.mutable_status() = s.StatusOf(job);
  }
  s.Persist(*s.db, *entry, db::JobState::kCancelled, "");
  spdlog::info("event=job_finished job={} state=cancelled trials_done={}", job_id, done);
  return resp;
}

v1::ListJobsResponse JobRunner::List() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<const JobEntry*> all;
  for (const auto& [id, job] : impl_->jobs) all.push_back(job.get());
  std::stable_sort(all.begin(), all.end(), [](const JobEntry* a, const JobEntry* b) {
    return a->created_ms < b->created_ms;
  });
  v1::ListJobsResponse resp;
  for (const JobEntry* j : all) *resp.add_jobs() = impl_->StatusOf(*j);
  return resp;
}

std::optional<JobRunner::WorkloadInfo> JobRunner::Workload(const std::string& job_id,
                                                           int workload) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto j = impl_->jobs.find(job_id);
  if (j == impl_->jobs.end()) return std::nullopt;
  const std::vector<WorkloadRun>& runs = j->second->workloads;
  if (workload < 0 || static_cast<size_t>(workload) >= runs.size()) return std::nullopt;
  return WorkloadInfo{runs[workload].key, runs[workload].flops};
}

absl::StatusOr<int> JobRunner::KnownWorkload(const std::string& job_id,
                                             const std::string& canonical,
                                             const std::string& device_class) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto j = impl_->jobs.find(job_id);
  if (j == impl_->jobs.end()) {
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' is unknown to this daemon"));
  }
  const JobEntry& job = *j->second;
  if (job.device_class != device_class) {
    return absl::InvalidArgumentError(absl::StrCat("job '", job_id, "' tunes for device class '",
                                                   job.device_class, "', not '", device_class,
                                                   "'"));
  }
  for (size_t i = 0; i < job.workloads.size(); ++i) {
    if (job.workloads[i].canonical == canonical) return static_cast<int>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("job '", job_id, "' has no workload '", canonical, "'"));
}

void JobRunner::Account(const std::vector<StoredResult>& results) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const StoredResult& r : results) {
    auto j = s.jobs.find(r.job_id);
    if (j == s.jobs.end()) continue;
    JobEntry& job = *j->second;
    if (r.workload < 0 || static_cast<size_t>(r.workload) >= job.workloads.size()) continue;
    WorkloadRun& run = job.workloads[r.workload];
    Reported rep;
    rep.workload = r.workload;
    rep.candidate_id = r.candidate_id;
    rep.program = r.program;
    rep.error_class = r.error_class;
    rep.median_us = r.median_us;
    if (r.remeasure) {
      run.remeasure_pending = std::max(0, run.remeasure_pending - 1);
      ++(r.error_class == db::ErrorClass::kOk ? run.remeasured : run.remeasure_failed);
      rep.remeasure = true;
      job.inbox.push_back(std::move(rep));
      s.Touch(job);
      continue;
    }
    const bool dispatched_here = !r.program.has_value();
    if (dispatched_here) run.outstanding = std::max(0, run.outstanding - 1);
    if (Terminal(job.state)) continue;
    // The best is the database's best for the workload (as a job starts with), so a result
    // past the target still improves it.
    if (r.error_class == db::ErrorClass::kOk &&
        (run.best_latency_us == 0 || r.median_us < run.best_latency_us)) {
      run.best_latency_us = r.median_us;
      run.best_gflops = r.gflops;
    }
    // Past the target or the budget (results of a worker's spool arrived after the resumed
    // job had dispatched its trials anew): stored, but not a trial of the job.
    const int budget = JobBudget(job);
    int total = s.TotalDone(job);
    rep.counted = run.done < run.target && total < budget;
    job.inbox.push_back(std::move(rep));
    s.Touch(job);
    if (!job.inbox.back().counted) continue;
    ++run.done;
    ++total;
    if (r.error_class != db::ErrorClass::kOk) {
      ++run.errors[std::string(db::ErrorClassName(r.error_class))];
    }
    if (!dispatched_here) {
      // A result this daemon did not dispatch adds a trial that no task stands for: the
      // job's queued tasks beyond its target (or budget) are withdrawn (leased ones are
      // measured anyway and stored, past the target).
      int outstanding = 0;
      for (const WorkloadRun& w : job.workloads) outstanding += w.outstanding;
      const int excess =
          std::max(run.done + run.outstanding - run.target, total + outstanding - budget);
      if (excess > 0) {
        std::vector<std::string> withdrawn = s.registry->Withdraw(job.id, r.workload, excess);
        run.outstanding -= static_cast<int>(withdrawn.size());
        for (std::string& id : withdrawn) {
          Reported w;
          w.workload = r.workload;
          w.candidate_id = std::move(id);
          w.withdrawn = true;
          job.inbox.push_back(std::move(w));
        }
      }
    }
  }
}

}  // namespace lathe::daemon
