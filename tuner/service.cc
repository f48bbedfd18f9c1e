#include "tuner/service.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/host.h"
#include "cost_model/database_io.h"
#include "db/database.h"
#include "db/lookup.h"
#include "db/record.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "spdlog/spdlog.h"
#include "tuner/metrics.h"
#include "tuner/space.h"
#include "tuner/tune.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

namespace v1 = lathe::v1;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kDefaultTrials = 300;
constexpr int kDefaultBatch = 64;
constexpr double kDefaultMinRepeatMs = 100;
constexpr int kMaxWorkloadsPerJob = 256;
constexpr int kMaxTrials = 1000000;
constexpr int kMaxBatch = 4096;
constexpr int kMaxDevicesPerWorker = 64;

// Progress of one workload of a job; guarded by State::mu.
struct WorkloadRun {
  std::string canonical;
  std::string key;
  double flops = 0;
  int target = 0;
  int64_t baseline = 0;  // traces stored for the workload when the job was created
  int done = 0;
  int outstanding = 0;  // dispatched, not reported
  bool finished = false;
  bool stalled = false;  // the search found nothing new; wait for a result before retrying
  double best_latency_us = 0;
  double best_gflops = 0;
  std::map<std::string, int> errors;
};

struct Reported {
  int workload = 0;
  std::string candidate_id;
  double throughput = 0;  // 1 / median for ok results, else 0
};

struct JobEntry {
  std::string id;
  v1::JobSpec spec;  // normalised
  std::string device_class;
  db::JobState state = db::JobState::kQueued;
  std::string message;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
  std::vector<WorkloadRun> workloads;
  uint64_t version = 1;
  bool cancel = false;
  std::vector<Reported> inbox;  // results the job thread has not seen yet
  std::thread thread;
};

struct TaskEntry {
  v1::Task task;
  int workload = 0;
  std::string lease_id;  // empty: queued
};

struct LeaseEntry {
  std::string worker_id;
  Clock::time_point deadline;
  std::set<std::string> tasks;  // unreported candidate ids
};

struct WorkerEntry {
  std::string hostname;
  std::string version;
  std::vector<v1::DeviceInfo> devices;
  Clock::time_point last_seen;
  int64_t last_seen_ms = 0;
  int64_t measured = 0;
  bool lost = false;
};

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

bool Finite(double v) { return std::isfinite(v); }

// Distinct programs (search keys) among the stored traces of a workload on a device class.
absl::StatusOr<std::set<std::string>> MeasuredKeys(db::Database& database,
                                                   const std::string& workload_key,
                                                   const std::string& device_class) {
  absl::StatusOr<std::vector<std::string>> traces =
      database.MeasuredTraces(workload_key, device_class);
  if (!traces.ok()) return traces.status();
  std::set<std::string> keys;
  for (const std::string& t : *traces) keys.insert(KeyOfStoredTrace(t));
  return keys;
}

}  // namespace

struct TunerService::State {
  ServiceOptions options;
  std::unique_ptr<db::Database> db;  // the service's connection (Report, Submit, queries)
  std::mutex mu;
  std::condition_variable work_cv;    // tasks queued, or stopping
  std::condition_variable change_cv;  // a job changed, a result arrived, cancel, stopping
  std::condition_variable reaper_cv;  // stopping
  bool stopping = false;
  bool shut_down = false;
  std::map<std::string, std::unique_ptr<JobEntry>> jobs;
  std::map<std::string, TaskEntry> tasks;                 // candidate id -> task
  std::map<std::string, std::deque<std::string>> queues;  // device class -> candidate ids
  std::map<std::string, LeaseEntry> leases;
  std::map<std::string, WorkerEntry> workers;
  std::thread reaper;
  std::mt19937_64 id_rng{std::random_device{}() ^
                         static_cast<uint64_t>(Clock::now().time_since_epoch().count())};

  Metrics* metrics() { return options.metrics; }

  // --- helpers; all expect `mu` held unless said otherwise ---

  std::string NewId(const char* prefix) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%012llx", prefix,
                  static_cast<unsigned long long>(id_rng() & 0xffffffffffffull));
    return buf;
  }

  void Touch(JobEntry& job) {
    ++job.version;
    job.updated_ms = NowUnixMs();
    change_cv.notify_all();
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
      p->set_trials_target(w.target);
      p->set_best_latency_us(w.best_latency_us);
      p->set_best_gflops(w.best_gflops);
      for (const auto& [name, n] : w.errors) (*p->mutable_errors())[name] = n;
    }
    return st;
  }

  int TotalDone(const JobEntry& job) const {
    int n = 0;
    for (const WorkloadRun& w : job.workloads) n += w.done;
    return n;
  }

  // Drops the queued tasks of a job (its leased tasks stay: their results are still stored).
  void DropQueuedTasks(const std::string& job_id) {
    for (auto it = tasks.begin(); it != tasks.end();) {
      if (it->second.task.job_id() == job_id && it->second.lease_id.empty()) {
        it = tasks.erase(it);
      } else {
        ++it;
      }
    }
  }

  bool WorkerBusy(const std::string& worker_id) const {
    for (const auto& [id, l] : leases) {
      if (l.worker_id == worker_id && !l.tasks.empty()) return true;
    }
    return false;
  }

  int64_t Queued() const {
    int64_t n = 0;
    for (const auto& [id, t] : tasks) n += t.lease_id.empty() ? 1 : 0;
    return n;
  }

  // Refreshed by the reaper every reaper_interval_ms (and on Register), not on the Lease and
  // Report paths: it walks every task.
  void UpdateGauges() {
    if (metrics() == nullptr) return;
    int64_t idle = 0, busy = 0, lost = 0;
    for (const auto& [id, w] : workers) {
      if (w.lost) {
        ++lost;
      } else if (WorkerBusy(id)) {
        ++busy;
      } else {
        ++idle;
      }
    }
    metrics()->SetWorkers(idle, busy, lost);
    metrics()->SetQueueDepth(Queued());
    metrics()->SetActiveLeases(static_cast<int64_t>(leases.size()));
  }

  // The device class of a job or query without one (see the header). `mu` must NOT be held.
  absl::StatusOr<std::string> DeriveDeviceClass(const std::string& target) {
    std::set<std::string> classes;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& [id, w] : workers) {
        if (w.lost) continue;
        for (const v1::DeviceInfo& d : w.devices) {
          const bool cpu = absl::StartsWith(d.device_class(), "cpu:");
          if ((target == "cpu") == cpu) classes.insert(d.device_class());
        }
      }
    }
    if (target != "cpu") {
      if (classes.size() == 1) return *classes.begin();
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "' needs a device_class (registered GPU classes: ",
                       classes.empty() ? "none" : absl::StrJoin(classes, ", "), ")"));
    }
    if (classes.empty()) return codegen::HostDeviceClass();
    if (classes.size() == 1) return *classes.begin();
    return absl::InvalidArgumentError(
        absl::StrCat("target 'cpu' is ambiguous: registered workers have CPU classes ",
                     absl::StrJoin(classes, ", "), "; pass a device_class"));
  }

  void Persist(db::Database& database, const std::string& job_id, db::JobState state, int done,
               const std::string& message) {
    absl::Status st = database.UpdateJob(job_id, state, done, message);
    if (!st.ok())
      spdlog::error("event=job_persist_failed job={} error=\"{}\"", job_id, st.ToString());
  }

  void StartJobThread(JobEntry* job) {
    job->thread = std::thread([this, job] { RunJob(job); });
  }

  void FailJob(JobEntry* job, db::Database& database, const std::string& message) {
    int done;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (Terminal(job->state)) return;
      job->state = db::JobState::kFailed;
      job->message = message;
      DropQueuedTasks(job->id);
      done = TotalDone(*job);
      Touch(*job);
    }
    Persist(database, job->id, db::JobState::kFailed, done, message);
    spdlog::error("event=job_finished job={} state=failed message=\"{}\"", job->id, message);
  }

  void RunJob(JobEntry* job);
  void Reap();
};

// ---------------------------------------------------------------------------------------
// The search thread of one job.

void TunerService::State::RunJob(JobEntry* job) {
  db::OpenOptions oo;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path, oo);
  if (!opened.ok()) {
    FailJob(job, *db, absl::StrCat("cannot open database: ", opened.status().ToString()));
    return;
  }
  db::Database& jdb = **opened;
  const std::string dc = job->device_class;
  const int batch = job->spec.batch();

  absl::StatusOr<CpuTarget> target = CpuTargetForDeviceClass(dc);
  if (!target.ok()) {
    FailJob(job, jdb, std::string(target.status().message()));
    return;
  }
  const size_t n = job->workloads.size();
  std::vector<ir::Workload> wls;
  std::vector<std::unique_ptr<SearchSpace>> spaces;
  std::vector<std::set<std::string>> measured(n);
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(job->workloads[i].canonical);
    if (!w.ok()) {
      FailJob(job, jdb, std::string(w.status().message()));
      return;
    }
    absl::StatusOr<std::unique_ptr<SearchSpace>> sp = SearchSpace::Create(*w, *target);
    if (!sp.ok()) {
      FailJob(job, jdb, absl::StrCat("workload '", w->canonical, "': ", sp.status().message()));
      return;
    }
    absl::StatusOr<std::set<std::string>> keys = MeasuredKeys(jdb, w->key, dc);
    if (!keys.ok()) {
      FailJob(job, jdb, absl::StrCat("database: ", keys.status().ToString()));
      return;
    }
    measured[i] = std::move(*keys);
    double best_lat = 0, best_g = 0;
    if (auto b = jdb.Best(w->key, dc); b.ok() && b->has_value()) {
      best_lat = (*b)->median_us;
      best_g = (*b)->Gflops();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      WorkloadRun& run = job->workloads[i];
      run.done = static_cast<int>(
          std::max<int64_t>(0, static_cast<int64_t>(measured[i].size()) - run.baseline));
      run.finished = run.done >= run.target;
      run.best_latency_us = best_lat;
      run.best_gflops = best_g;
    }
    wls.push_back(std::move(*w));
    spaces.push_back(std::move(*sp));
  }

  int done_total;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (job->cancel || stopping) return;
    job->state = db::JobState::kRunning;
    done_total = TotalDone(*job);
    Touch(*job);
  }
  Persist(jdb, job->id, db::JobState::kRunning, done_total, "");
  spdlog::info("event=job_started job={} device_class=\"{}\" workloads={} trials_done={}", job->id,
               dc, n, done_total);

  cost_model::CostModel model = options.use_cost_model && !wls.empty()
                                    ? InitialModel(jdb, wls[0], dc)
                                    : cost_model::CostModel();
  int64_t saved_trained_on = model.trained() ? model.trained_on() : 0;
  const uint64_t seed =
      job->spec.seed() != 0
          ? job->spec.seed()
          : static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ std::random_device{}();
  std::mt19937_64 rng(seed);
  // Dispatched candidates not yet reported: candidate id -> (workload, candidate).
  std::map<std::string, std::pair<int, Candidate>> inflight;

  for (;;) {
    std::vector<Reported> inbox;
    std::vector<int> need_round;
    bool all_finished = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto needs = [&](const WorkloadRun& w) {
        return !w.finished && !w.stalled && w.target - w.done - w.outstanding > 0 &&
               w.outstanding <= batch / 2;
      };
      auto ready = [&] {
        if (stopping || job->cancel || !job->inbox.empty()) return true;
        bool all = true;
        for (const WorkloadRun& w : job->workloads) {
          if (needs(w)) return true;
          all = all && w.finished;
        }
        return all;
      };
      change_cv.wait(lock, ready);
      if (stopping || job->cancel) return;  // cancel was persisted by CancelJob
      inbox.swap(job->inbox);
      all_finished = true;
      for (size_t i = 0; i < n; ++i) {
        WorkloadRun& w = job->workloads[i];
        if (!w.finished && w.done >= w.target) w.finished = true;
        all_finished = all_finished && w.finished;
        if (needs(w)) need_round.push_back(static_cast<int>(i));
      }
      if (all_finished) {
        job->state = db::JobState::kDone;
        DropQueuedTasks(job->id);
        done_total = TotalDone(*job);
        Touch(*job);
      }
    }
    if (all_finished) {
      Persist(jdb, job->id, db::JobState::kDone, done_total, "");
      spdlog::info("event=job_finished job={} state=done trials_done={}", job->id, done_total);
      return;
    }

    if (!inbox.empty()) {
      std::vector<cost_model::FeatureMatrix> programs;
      std::vector<double> throughputs;
      std::vector<std::string> keys;
      for (const Reported& r : inbox) {
        auto it = inflight.find(r.candidate_id);
        if (it == inflight.end()) continue;
        if (options.use_cost_model) {
          absl::StatusOr<cost_model::FeatureMatrix> f =
              CandidateFeatures(*spaces[it->second.first], it->second.second);
          if (f.ok()) {
            programs.push_back(std::move(*f));
            throughputs.push_back(r.throughput);
            keys.push_back(wls[it->second.first].key);
          }
        }
        inflight.erase(it);
      }
      if (!programs.empty()) {
        // A failed retraining keeps the previous model; tuning goes on with it.
        (void)model.Update(programs, throughputs, keys);
        if (model.trained() && model.trained_on() != saved_trained_on) {
          if (absl::Status st = cost_model::SaveToDatabase(jdb, dc, model); st.ok()) {
            saved_trained_on = model.trained_on();
          } else {
            spdlog::warn("event=cost_model_save_failed job={} error=\"{}\"", job->id,
                         st.ToString());
          }
        }
      }
      int done_now;
      {
        std::lock_guard<std::mutex> lock(mu);
        done_now = TotalDone(*job);
      }
      Persist(jdb, job->id, db::JobState::kRunning, done_now, "");
    }

    for (int i : need_round) {
      int want;
      {
        std::lock_guard<std::mutex> lock(mu);
        const WorkloadRun& w = job->workloads[i];
        want = std::min(batch, w.target - w.done - w.outstanding);
      }
      if (want <= 0) continue;
      std::vector<Candidate> seeds =
          SeedsFromDatabase(jdb, *spaces[i], wls[i], dc, options.seed_records);
      absl::StatusOr<std::vector<Candidate>> next =
          NextBatch(*spaces[i], model, seeds, measured[i], want, options.search, rng);
      if (!next.ok()) {
        FailJob(job, jdb,
                absl::StrCat("search for '", wls[i].canonical, "': ", next.status().message()));
        return;
      }
      std::vector<v1::Task> fresh;
      for (Candidate& c : *next) {
        std::string key = CandidateKey(c);
        if (!measured[i].insert(key).second) continue;
        v1::Task t;
        t.set_candidate_id(CandidateId(wls[i].key, key, dc));
        t.set_job_id(job->id);
        t.set_device_class(dc);
        v1::MeasureRequest* req = t.mutable_request();
        req->set_candidate_id(t.candidate_id());
        req->set_workload(wls[i].canonical);
        req->set_trace_json(ir::TraceToJson(c.trace));
        req->set_min_repeat_ms(job->spec.min_repeat_ms());
        inflight.emplace(t.candidate_id(), std::make_pair(i, std::move(c)));
        fresh.push_back(std::move(t));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (stopping || job->cancel || Terminal(job->state)) return;
      WorkloadRun& w = job->workloads[i];
      if (fresh.empty()) {
        if (w.outstanding == 0) {
          // Nothing new to measure: the space (as the search sees it) is exhausted.
          w.finished = true;
          spdlog::info("event=workload_exhausted job={} workload=\"{}\" trials_done={}", job->id,
                       w.canonical, w.done);
        } else {
          w.stalled = true;
        }
        Touch(*job);
        continue;
      }
      std::deque<std::string>& q = queues[dc];
      for (v1::Task& t : fresh) {
        const std::string id = t.candidate_id();
        TaskEntry e;
        e.task = std::move(t);
        e.workload = i;
        if (!tasks.emplace(id, std::move(e)).second) continue;  // another job dispatched it
        q.push_back(id);
        ++w.outstanding;
      }
      work_cv.notify_all();
    }
  }
}

// ---------------------------------------------------------------------------------------
// Lease expiry and lost workers.

void TunerService::State::Reap() {
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    reaper_cv.wait_for(lock, std::chrono::milliseconds(options.reaper_interval_ms),
                       [&] { return stopping; });
    if (stopping) break;
    const Clock::time_point now = Clock::now();
    bool requeued = false;
    for (auto it = leases.begin(); it != leases.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      int back = 0;
      // Back to the front of the queue: these candidates waited longest.
      for (auto t = it->second.tasks.rbegin(); t != it->second.tasks.rend(); ++t) {
        auto task = tasks.find(*t);
        if (task == tasks.end() || task->second.lease_id != it->first) continue;
        task->second.lease_id.clear();
        queues[task->second.task.device_class()].push_front(*t);
        ++back;
      }
      spdlog::warn("event=lease_expired lease={} worker={} requeued={}", it->first,
                   it->second.worker_id, back);
      requeued = requeued || back > 0;
      it = leases.erase(it);
    }
    const auto lost_after = std::chrono::milliseconds(int64_t{options.heartbeat_interval_ms} *
                                                      std::max(1, options.lost_after_heartbeats));
    for (auto& [id, w] : workers) {
      if (!w.lost && now - w.last_seen > lost_after) {
        w.lost = true;
        spdlog::warn("event=worker_lost worker={} hostname=\"{}\" last_seen_ms={}", id, w.hostname,
                     w.last_seen_ms);
      }
    }
    UpdateGauges();
    if (requeued) work_cv.notify_all();
  }
}

// ---------------------------------------------------------------------------------------

TunerService::TunerService(std::unique_ptr<State> state) : s_(std::move(state)) {}

TunerService::~TunerService() { Shutdown(); }

absl::StatusOr<std::unique_ptr<TunerService>> TunerService::Create(const ServiceOptions& options) {
  if (options.db_path.empty()) return absl::InvalidArgumentError("empty database path");
  if (options.heartbeat_interval_ms < 1 || options.lease_duration_ms < 1 ||
      options.reaper_interval_ms < 1) {
    return absl::InvalidArgumentError("heartbeat, lease and reaper intervals must be positive");
  }
  std::filesystem::path parent = std::filesystem::path(options.db_path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create directory ", parent.string(), ": ", ec.message()));
    }
  }
  auto state = std::make_unique<State>();
  state->options = options;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path);
  if (!opened.ok()) return opened.status();
  state->db = std::move(*opened);
  State& s = *state;

  // Every job of the database: unfinished ones resume, finished ones answer queries.
  absl::StatusOr<std::vector<db::Job>> stored = s.db->ListJobs();
  if (!stored.ok()) return stored.status();
  std::vector<JobEntry*> resume;
  for (const db::Job& j : *stored) {
    auto job = std::make_unique<JobEntry>();
    job->id = j.uid;
    job->device_class = j.device_class;
    job->state = j.state;
    job->message = j.error_msg;
    job->created_ms = j.created_at_ms;
    job->updated_ms = j.updated_at_ms;
    std::vector<int64_t> baseline;
    nlohmann::json doc = nlohmann::json::parse(j.spec_json, nullptr, /*allow_exceptions=*/false);
    google::protobuf::util::JsonParseOptions po;
    po.ignore_unknown_fields = true;
    absl::Status parsed = absl::InvalidArgumentError("spec is not a JSON object");
    if (doc.is_object()) {
      if (doc.contains("baselineMeasured") && doc["baselineMeasured"].is_array()) {
        for (const auto& v : doc["baselineMeasured"]) {
          baseline.push_back(v.is_number_integer() ? v.get<int64_t>() : 0);
        }
      }
      auto st = google::protobuf::util::JsonStringToMessage(j.spec_json, &job->spec, po);
      parsed = st.ok() ? absl::OkStatus() : absl::InvalidArgumentError(st.ToString());
    }
    for (int i = 0; parsed.ok() && i < job->spec.workloads_size(); ++i) {
      absl::StatusOr<ir::Workload> w = ir::MakeWorkload(job->spec.workloads(i));
      if (!w.ok()) {
        parsed = w.status();
        break;
      }
      WorkloadRun run;
      run.canonical = w->canonical;
      run.key = w->key;
      run.flops = w->flops;
      run.target = job->spec.trials();
      run.baseline = i < static_cast<int>(baseline.size()) ? baseline[i] : 0;
      // Progress as committed (the job thread recomputes it when it starts).
      {
        if (auto keys = MeasuredKeys(*s.db, w->key, j.device_class); keys.ok()) {
          run.done = static_cast<int>(std::clamp<int64_t>(
              static_cast<int64_t>(keys->size()) - run.baseline, 0, run.target));
        }
        if (auto b = s.db->Best(w->key, j.device_class); b.ok() && b->has_value()) {
          run.best_latency_us = (*b)->median_us;
          run.best_gflops = (*b)->Gflops();
        }
      }
      job->workloads.push_back(std::move(run));
    }
    if (!Terminal(j.state)) {
      if (!parsed.ok()) {
        job->state = db::JobState::kFailed;
        job->message = absl::StrCat("cannot resume: stored spec: ", parsed.message());
        s.Persist(*s.db, job->id, job->state, 0, job->message);
      } else {
        resume.push_back(job.get());
      }
    }
    s.jobs.emplace(job->id, std::move(job));
  }
  std::unique_ptr<TunerService> service(new TunerService(std::move(state)));
  State* sp = service->s_.get();
  for (JobEntry* job : resume) {
    spdlog::info("event=job_resumed job={} device_class=\"{}\"", job->id, job->device_class);
    sp->StartJobThread(job);
  }
  sp->reaper = std::thread([sp] { sp->Reap(); });
  return service;
}

void TunerService::BeginShutdown() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->stopping = true;
  s_->work_cv.notify_all();
  s_->change_cv.notify_all();
  s_->reaper_cv.notify_all();
}

void TunerService::Shutdown() {
  BeginShutdown();
  std::vector<std::thread*> threads;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->shut_down) return;
    s_->shut_down = true;
    for (auto& [id, job] : s_->jobs) {
      if (job->thread.joinable()) threads.push_back(&job->thread);
    }
  }
  for (std::thread* t : threads) t->join();
  if (s_->reaper.joinable()) s_->reaper.join();
}

int64_t TunerService::QueueDepth() {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->Queued();
}

// --- clients ---

absl::StatusOr<v1::SubmitJobResponse> TunerService::SubmitJob(const v1::SubmitJobRequest& req) {
  v1::JobSpec spec = req.spec();
  if (spec.workloads().empty()) return absl::InvalidArgumentError("spec.workloads is empty");
  if (spec.workloads_size() > kMaxWorkloadsPerJob) {
    return absl::InvalidArgumentError(absl::StrCat("spec.workloads has ", spec.workloads_size(),
                                                   " entries (at most ", kMaxWorkloadsPerJob, ")"));
  }
  if (spec.trials() == 0) spec.set_trials(kDefaultTrials);
  if (spec.trials() < 0 || spec.trials() > kMaxTrials) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.trials ", spec.trials(), " (need 1..", kMaxTrials, ")"));
  }
  if (spec.batch() == 0) spec.set_batch(kDefaultBatch);
  if (spec.batch() < 0 || spec.batch() > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.batch ", spec.batch(), " (need 1..", kMaxBatch, ")"));
  }
  if (spec.min_repeat_ms() == 0) spec.set_min_repeat_ms(kDefaultMinRepeatMs);
  if (!Finite(spec.min_repeat_ms()) || spec.min_repeat_ms() < 0 || spec.min_repeat_ms() > 6e4) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.min_repeat_ms ", spec.min_repeat_ms(), " (need 0..60000)"));
  }
  if (spec.target().empty()) spec.set_target("cpu");
  const std::string& tgt = spec.target();
  int gpu = 0;
  if (tgt != "cpu" && tgt != "cuda" &&
      !(absl::StartsWith(tgt, "cuda:") && absl::SimpleAtoi(tgt.substr(5), &gpu) && gpu >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.target '", tgt, "' (expected cpu, cuda or cuda:N)"));
  }
  std::vector<ir::Workload> wls;
  for (int i = 0; i < spec.workloads_size(); ++i) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec.workloads(i));
    if (!w.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.workloads[", i, "] '", spec.workloads(i),
                                                     "': ", w.status().message()));
    }
    spec.set_workloads(i, w->canonical);
    wls.push_back(std::move(*w));
  }
  if (spec.device_class().empty()) {
    absl::StatusOr<std::string> dc = s_->DeriveDeviceClass(tgt == "cpu" ? "cpu" : "cuda");
    if (!dc.ok()) return dc.status();
    spec.set_device_class(*dc);
  }
  const std::string dc = spec.device_class();
  absl::StatusOr<CpuTarget> target = CpuTargetForDeviceClass(dc);
  if (!target.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.device_class: ", target.status().message()));
  }
  std::vector<int64_t> baseline;
  for (size_t i = 0; i < wls.size(); ++i) {
    absl::StatusOr<std::unique_ptr<SearchSpace>> sp = SearchSpace::Create(wls[i], *target);
    if (!sp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.workloads[", i, "] '", wls[i].canonical,
                                                     "': ", sp.status().message()));
    }
    absl::StatusOr<std::set<std::string>> keys = MeasuredKeys(*s_->db, wls[i].key, dc);
    if (!keys.ok()) return keys.status();
    baseline.push_back(static_cast<int64_t>(keys->size()));
  }

  std::string spec_text;
  google::protobuf::util::JsonPrintOptions jo;
  jo.always_print_primitive_fields = true;
  if (auto st = google::protobuf::util::MessageToJsonString(spec, &spec_text, jo); !st.ok()) {
    return absl::InternalError(absl::StrCat("spec to JSON: ", st.ToString()));
  }
  nlohmann::json doc = nlohmann::json::parse(spec_text);
  doc["baselineMeasured"] = baseline;

  auto job = std::make_unique<JobEntry>();
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->stopping) return absl::UnavailableError("lathed is shutting down");
    job->id = s_->NewId("job-");
  }
  job->spec = spec;
  job->device_class = dc;
  job->created_ms = job->updated_ms = NowUnixMs();
  for (size_t i = 0; i < wls.size(); ++i) {
    WorkloadRun run;
    run.canonical = wls[i].canonical;
    run.key = wls[i].key;
    run.flops = wls[i].flops;
    run.target = spec.trials();
    run.baseline = baseline[i];
    job->workloads.push_back(std::move(run));
  }
  db::Job row;
  row.uid = job->id;
  row.spec_json = doc.dump();
  row.device_class = dc;
  row.state = db::JobState::kQueued;
  row.trials_requested = int64_t{spec.trials()} * spec.workloads_size();
  if (absl::Status st = s_->db->CreateJob(row); !st.ok()) return st;

  v1::SubmitJobResponse resp;
  resp.set_job_id(job->id);
  std::lock_guard<std::mutex> lock(s_->mu);
  if (s_->stopping) {
    // Persisted as QUEUED: the next start runs it.
    return resp;
  }
  JobEntry* raw = job.get();
  s_->jobs.emplace(job->id, std::move(job));
  spdlog::info("event=job_submitted job={} device_class=\"{}\" workloads=\"{}\" trials={} batch={}",
               raw->id, dc, absl::StrJoin(spec.workloads(), ";"), spec.trials(), spec.batch());
  s_->StartJobThread(raw);
  return resp;
}

absl::StatusOr<v1::JobStatus> TunerService::GetJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(s_->mu);
  auto it = s_->jobs.find(job_id);
  if (it == s_->jobs.end())
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  return s_->StatusOf(*it->second);
}

absl::StatusOr<v1::JobStatus> TunerService::WatchJob(const std::string& job_id, uint64_t* version,
                                                     int timeout_ms) {
  if (job_id.empty()) return absl::InvalidArgumentError("empty job_id");
  std::unique_lock<std::mutex> lock(s_->mu);
  auto it = s_->jobs.find(job_id);
  if (it == s_->jobs.end())
    return absl::NotFoundError(absl::StrCat("job '", job_id, "' not found"));
  JobEntry& job = *it->second;
  s_->change_cv.wait_for(lock, std::chrono::milliseconds(std::max(0, timeout_ms)),
                         [&] { return s_->stopping || job.version > *version; });
  *version = job.version;
  return s_->StatusOf(job);
}

absl::StatusOr<v1::CancelJobResponse> TunerService::CancelJob(const v1::CancelJobRequest& req) {
  if (req.job_id().empty()) return absl::InvalidArgumentError("empty job_id");
  v1::CancelJobResponse resp;
  int done;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    auto it = s_->jobs.find(req.job_id());
    if (it == s_->jobs.end()) {
      return absl::NotFoundError(absl::StrCat("job '", req.job_id(), "' not found"));
    }
    JobEntry& job = *it->second;
    if (Terminal(job.state)) {
      *resp.mutable_status() = s_->StatusOf(job);
      return resp;
    }
    job.cancel = true;
    job.state = db::JobState::kCancelled;
    s_->DropQueuedTasks(job.id);
    done = s_->TotalDone(job);
    s_->Touch(job);
    *resp.mutable_status() = s_->StatusOf(job);
  }
  s_->Persist(*s_->db, req.job_id(), db::JobState::kCancelled, done, "");
  spdlog::info("event=job_finished job={} state=cancelled trials_done={}", req.job_id(), done);
  return resp;
}

absl::StatusOr<v1::ListJobsResponse> TunerService::ListJobs(const v1::ListJobsRequest&) {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::vector<const JobEntry*> all;
  for (const auto& [id, job] : s_->jobs) all.push_back(job.get());
  std::stable_sort(all.begin(), all.end(), [](const JobEntry* a, const JobEntry* b) {
    return a->created_ms < b->created_ms;
  });
  v1::ListJobsResponse resp;
  for (const JobEntry* j : all) *resp.add_jobs() = s_->StatusOf(*j);
  return resp;
}

absl::StatusOr<v1::ListWorkersResponse> TunerService::ListWorkers(const v1::ListWorkersRequest&) {
  std::lock_guard<std::mutex> lock(s_->mu);
  v1::ListWorkersResponse resp;
  for (const auto& [id, w] : s_->workers) {
    v1::WorkerInfo* info = resp.add_workers();
    info->set_worker_id(id);
    info->set_hostname(w.hostname);
    std::vector<std::string> classes;
    for (const v1::DeviceInfo& d : w.devices) classes.push_back(d.device_class());
    info->set_device_class(absl::StrJoin(classes, ";"));
    info->set_state(w.lost ? "lost" : s_->WorkerBusy(id) ? "busy" : "idle");
    info->set_measured(w.measured);
    info->set_last_seen_ms(w.last_seen_ms);
  }
  return resp;
}

absl::StatusOr<v1::QueryBestResponse> TunerService::QueryBest(const v1::QueryBestRequest& req) {
  if (req.workload().empty()) return absl::InvalidArgumentError("empty workload");
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(req.workload());
  if (!w.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload '", req.workload(), "': ", w.status().message()));
  }
  std::string dc = req.device_class();
  if (dc.empty()) {
    absl::StatusOr<std::string> d = s_->DeriveDeviceClass("cpu");
    if (!d.ok()) return d.status();
    dc = *d;
  }
  absl::StatusOr<db::LookupResult> found = db::Lookup(*s_->db, {w->canonical, w->key}, dc);
  if (!found.ok()) return found.status();
  v1::QueryBestResponse resp;
  resp.set_workload(w->canonical);
  resp.set_device_class(found->device_class);
  resp.set_explanation(found->explanation);
  if (found->record.has_value()) {
    const db::Record& r = *found->record;
    resp.set_found(true);
    resp.set_latency_us(r.median_us);
    resp.set_gflops(r.Gflops());
    resp.set_trace_json(r.trace_json);
    resp.set_measured_at_ms(r.measured_at_ms);
    resp.set_worker(r.worker);
  }
  return resp;
}

// --- workers ---

absl::StatusOr<v1::RegisterResponse> TunerService::Register(const v1::RegisterRequest& req) {
  if (req.hostname().empty()) return absl::InvalidArgumentError("empty hostname");
  if (req.devices().empty()) return absl::InvalidArgumentError("no devices");
  if (req.devices_size() > kMaxDevicesPerWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.devices_size(), " devices (at most ", kMaxDevicesPerWorker, ")"));
  }
  for (int i = 0; i < req.devices_size(); ++i) {
    if (req.devices(i).device_class().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("devices[", i, "].device_class is empty"));
    }
  }
  if (req.worker_id().size() > 128) return absl::InvalidArgumentError("worker_id too long");
  std::lock_guard<std::mutex> lock(s_->mu);
  const std::string id = req.worker_id().empty() ? s_->NewId("w-") : req.worker_id();
  WorkerEntry& w = s_->workers[id];
  w.hostname = req.hostname();
  w.version = req.lathe_version();
  w.devices.assign(req.devices().begin(), req.devices().end());
  w.last_seen = Clock::now();
  w.last_seen_ms = NowUnixMs();
  w.lost = false;
  std::vector<std::string> classes;
  for (const v1::DeviceInfo& d : w.devices) classes.push_back(d.device_class());
  spdlog::info("event=worker_registered worker={} hostname=\"{}\" devices=\"{}\" version={}", id,
               w.hostname, absl::StrJoin(classes, ";"), w.version);
  s_->UpdateGauges();
  v1::RegisterResponse resp;
  resp.set_worker_id(id);
  resp.set_heartbeat_interval_ms(s_->options.heartbeat_interval_ms);
  resp.set_lease_duration_ms(s_->options.lease_duration_ms);
  return resp;
}

absl::StatusOr<v1::LeaseResponse> TunerService::Lease(const v1::LeaseRequest& req) {
  const Clock::time_point start = Clock::now();
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  if (req.max_tasks() < 1 || req.max_tasks() > s_->options.max_tasks_per_lease) {
    return absl::InvalidArgumentError(absl::StrCat("max_tasks ", req.max_tasks(), " (need 1..",
                                                   s_->options.max_tasks_per_lease, ")"));
  }
  if (req.wait_ms() < 0 || req.wait_ms() > s_->options.max_wait_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("wait_ms ", req.wait_ms(), " (need 0..", s_->options.max_wait_ms, ")"));
  }
  std::unique_lock<std::mutex> lock(s_->mu);
  auto wit = s_->workers.find(req.worker_id());
  if (wit == s_->workers.end()) {
    return absl::NotFoundError(
        absl::StrCat("worker '", req.worker_id(), "' is not registered; register again"));
  }
  std::string dc = req.device_class();
  {
    WorkerEntry& w = wit->second;
    if (dc.empty()) dc = w.devices.front().device_class();
    bool known = false;
    for (const v1::DeviceInfo& d : w.devices) known = known || d.device_class() == dc;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("device_class '", dc, "' is not one this worker registered"));
    }
    w.last_seen = Clock::now();
    w.last_seen_ms = NowUnixMs();
    w.lost = false;
  }
  const Clock::time_point deadline = start + std::chrono::milliseconds(req.wait_ms());
  Clock::duration waited{};
  v1::LeaseResponse resp;
  std::vector<std::string> taken;
  for (;;) {
    std::deque<std::string>& q = s_->queues[dc];
    while (!q.empty() && static_cast<int>(taken.size()) < req.max_tasks()) {
      std::string id = std::move(q.front());
      q.pop_front();
      auto t = s_->tasks.find(id);
      if (t == s_->tasks.end() || !t->second.lease_id.empty()) continue;  // stale entry
      taken.push_back(std::move(id));
    }
    if (!taken.empty() || s_->stopping) break;
    const Clock::time_point before = Clock::now();
    if (before >= deadline) break;
    s_->work_cv.wait_until(lock, deadline);
    waited += Clock::now() - before;
  }
  if (taken.empty()) return resp;
  const std::string lease_id = s_->NewId("lease-");
  LeaseEntry& lease = s_->leases[lease_id];
  lease.worker_id = req.worker_id();
  lease.deadline = Clock::now() + std::chrono::milliseconds(s_->options.lease_duration_ms);
  for (const std::string& id : taken) {
    TaskEntry& t = s_->tasks[id];
    t.lease_id = lease_id;
    lease.tasks.insert(id);
    *resp.add_tasks() = t.task;
  }
  resp.set_lease_id(lease_id);
  resp.set_deadline_ms(NowUnixMs() + s_->options.lease_duration_ms);
  if (Metrics* m = s_->metrics()) {
    m->AddLeaseGranted(static_cast<int64_t>(taken.size()));
    m->ObserveDispatchLatency(std::chrono::duration<double>(Clock::now() - start - waited).count());
  }
  return resp;
}

absl::StatusOr<v1::ReportResponse> TunerService::Report(const v1::ReportRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  for (int i = 0; i < req.results_size(); ++i) {
    const v1::MeasureResult& r = req.results(i);
    if (r.candidate_id().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].candidate_id is empty"));
    }
    if (!Finite(r.median_us()) || r.median_us() < 0 || !Finite(r.cv()) || r.cv() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "] ('", r.candidate_id(),
                                                     "'): median_us and cv must be finite and "
                                                     ">= 0"));
    }
    for (double v : r.repeats_us()) {
      if (!Finite(v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat("results[", i, "] ('", r.candidate_id(),
                                                       "'): repeats_us must be finite and >= 0"));
      }
    }
    if (!v1::ErrorClass_IsValid(r.error_class())) {
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "]: unknown error class"));
    }
  }
  if (Metrics* m = s_->metrics()) m->AddReport();

  // 1. Records for the candidates this daemon dispatched (under the lock: copies only).
  std::vector<db::Record> records;
  std::vector<int> record_of(req.results_size(), -1);
  std::vector<std::string> unknown;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    std::string worker = req.worker_id();
    if (auto w = s_->workers.find(req.worker_id()); w != s_->workers.end()) {
      worker = absl::StrCat(req.worker_id(), "@", w->second.hostname);
      w->second.last_seen = Clock::now();
      w->second.last_seen_ms = NowUnixMs();
      w->second.lost = false;
    }
    std::set<std::string> in_request;
    for (int i = 0; i < req.results_size(); ++i) {
      const v1::MeasureResult& m = req.results(i);
      if (!in_request.insert(m.candidate_id()).second) continue;  // repeated in this request
      auto t = s_->tasks.find(m.candidate_id());
      if (t == s_->tasks.end()) {
        unknown.push_back(m.candidate_id());
        continue;
      }
      const v1::Task& task = t->second.task;
      const JobEntry* job = nullptr;
      if (auto j = s_->jobs.find(task.job_id()); j != s_->jobs.end()) job = j->second.get();
      db::Record r;
      r.candidate_id = m.candidate_id();
      r.workload = task.request().workload();
      r.device_class = task.device_class();
      r.trace_json = task.request().trace_json();
      if (job != nullptr) {
        const WorkloadRun& run = job->workloads[t->second.workload];
        r.workload_key = run.key;
        r.flops = run.flops;
      } else {
        r.workload_key = ir::WorkloadKey(r.workload);
      }
      r.repeats_us.assign(m.repeats_us().begin(), m.repeats_us().end());
      r.median_us = m.median_us();
      r.cv = m.cv();
      r.error_class = ErrorClassFromProto(m.error_class());
      r.error_msg = m.error_msg();
      r.worker = worker;
      r.lathe_version = kLatheVersion;
      r.measured_at_ms = NowUnixMs();
      if (r.error_class == db::ErrorClass::kOk && !(r.median_us > 0)) {
        r.error_class = db::ErrorClass::kRuntimeError;
        r.error_msg = "ok result without a positive median latency";
      }
      record_of[i] = static_cast<int>(records.size());
      records.push_back(std::move(r));
    }
  }

  // 2. One transaction; acknowledged only after its commit.
  v1::ReportResponse resp;
  std::vector<db::InsertResult> inserted;
  if (!records.empty()) {
    absl::StatusOr<std::vector<db::InsertResult>> ins = s_->db->InsertBatch(records);
    if (!ins.ok()) return ins.status();
    inserted = std::move(*ins);
  }
  for (const std::string& id : unknown) {
    absl::StatusOr<std::optional<db::Record>> existing = s_->db->GetByCandidateId(id);
    if (!existing.ok()) return existing.status();
    if (existing->has_value()) {
      resp.set_duplicates(resp.duplicates() + 1);
    } else {
      spdlog::warn("event=report_unknown_candidate worker={} candidate={}", req.worker_id(), id);
    }
  }

  // 3. Progress: whoever finds the task still present accounts for it, once.
  std::lock_guard<std::mutex> lock(s_->mu);
  int64_t stored_now = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    const db::Record& r = records[k];
    if (inserted[k].inserted) {
      resp.set_accepted(resp.accepted() + 1);
      ++stored_now;
      if (Metrics* m = s_->metrics()) m->AddResult(db::ErrorClassName(r.error_class));
    } else {
      resp.set_duplicates(resp.duplicates() + 1);
    }
    auto t = s_->tasks.find(r.candidate_id);
    if (t == s_->tasks.end()) continue;
    TaskEntry task = std::move(t->second);
    s_->tasks.erase(t);
    if (!task.lease_id.empty()) {
      if (auto l = s_->leases.find(task.lease_id); l != s_->leases.end()) {
        l->second.tasks.erase(r.candidate_id);
        if (l->second.tasks.empty()) s_->leases.erase(l);
      }
    }
    auto j = s_->jobs.find(task.task.job_id());
    if (j == s_->jobs.end()) continue;
    JobEntry& job = *j->second;
    WorkloadRun& run = job.workloads[task.workload];
    run.outstanding = std::max(0, run.outstanding - 1);
    run.stalled = false;
    if (Terminal(job.state)) continue;
    ++run.done;
    if (r.error_class == db::ErrorClass::kOk) {
      const double g = r.Gflops();
      if (run.best_latency_us == 0 || r.median_us < run.best_latency_us) {
        run.best_latency_us = r.median_us;
        run.best_gflops = g;
      }
    } else {
      ++run.errors[std::string(db::ErrorClassName(r.error_class))];
    }
    job.inbox.push_back(Reported{task.workload, r.candidate_id,
                                 r.error_class == db::ErrorClass::kOk ? 1.0 / r.median_us : 0.0});
    s_->Touch(job);
  }
  if (auto w = s_->workers.find(req.worker_id()); w != s_->workers.end()) {
    w->second.measured += stored_now;
  }
  return resp;
}

absl::StatusOr<v1::HeartbeatResponse> TunerService::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  if (req.lease_ids_size() > 4096) return absl::InvalidArgumentError("too many lease_ids");
  for (int i = 0; i < req.lease_ids_size(); ++i) {
    if (req.lease_ids(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("lease_ids[", i, "] is empty"));
    }
  }
  v1::HeartbeatResponse resp;
  std::lock_guard<std::mutex> lock(s_->mu);
  auto w = s_->workers.find(req.worker_id());
  if (w == s_->workers.end()) {
    resp.set_reregister(true);
    return resp;
  }
  const Clock::time_point now = Clock::now();
  w->second.last_seen = now;
  w->second.last_seen_ms = NowUnixMs();
  if (w->second.lost) {
    w->second.lost = false;
    spdlog::info("event=worker_back worker={}", req.worker_id());
  }
  for (const std::string& id : req.lease_ids()) {
    auto l = s_->leases.find(id);
    if (l == s_->leases.end() || l->second.worker_id != req.worker_id()) continue;
    l->second.deadline = now + std::chrono::milliseconds(s_->options.lease_duration_ms);
  }
  return resp;
}

}  // namespace lathe::tuner
