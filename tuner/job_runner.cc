#include "tuner/job_runner.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
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
#include "ir/trace.h"
#include "ir/workload.h"
#include "spdlog/spdlog.h"
#include "tuner/niced_runner.h"
#include "tuner/space.h"
#include "tuner/tune.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

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
  return doc.dump();
}

class JobRunner::Impl {
 public:
  Impl(const JobRunnerOptions& o, LeaseRegistry* r, db::Database* d)
      : options(o), registry(r), db(d) {}

  JobRunnerOptions options;
  LeaseRegistry* registry;
  db::Database* db;
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
      p->set_remeasured(w.remeasured);
      p->set_remeasure_failed(w.remeasure_failed);
      p->set_remeasure_pending(w.remeasure_pending);
    }
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
  // The re-timing phase (see the header). False when the job thread must return at once
  // (stopping, cancelled); true when the job is ready to be DONE. `mu` must NOT be held.
  bool RetimeBest(JobEntry* job, db::Database& jdb, const std::vector<ir::Workload>& wls);
  // Sets workload `i`'s best from the database. `mu` must NOT be held.
  void RefreshBest(JobEntry* job, db::Database& jdb, size_t i, const ir::Workload& w);
};

void JobRunner::Impl::RefreshBest(JobEntry* job, db::Database& jdb, size_t i,
                                  const ir::Workload& w) {
  absl::StatusOr<std::optional<db::Record>> b = jdb.Best(w.key, job->device_class);
  if (!b.ok() || !b->has_value()) return;
  std::lock_guard<std::mutex> lock(mu);
  WorkloadRun& run = job->workloads[i];
  if (run.best_latency_us == (*b)->median_us) return;
  run.best_latency_us = (*b)->median_us;
  run.best_gflops = (*b)->Gflops();
  Touch(*job);
}

bool JobRunner::Impl::RetimeBest(JobEntry* job, db::Database& jdb,
                                 const std::vector<ir::Workload>& wls) {
  const int top = RemeasureTop(*job);
  const size_t n = wls.size();
  const std::string& dc = job->device_class;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping || job->cancel) return false;
    // The trials are done: what still waits in the queue is past every target.
    registry->DropQueued(job->id);
  }
  if (top <= 0) return true;
  std::vector<std::set<std::string>> tried(n);
  std::vector<bool> settled(n, false);  // nothing (more) to re-time
  std::vector<int> seen(n, -1);         // re-timings reported when the best was last read
  for (;;) {
    for (size_t i = 0; i < n; ++i) {
      if (settled[i]) continue;
      int pending, reported;
      {
        std::lock_guard<std::mutex> lock(mu);
        const WorkloadRun& run = job->workloads[i];
        pending = run.remeasure_pending;
        reported = run.remeasured + run.remeasure_failed;
      }
      if (reported != seen[i]) {
        RefreshBest(job, jdb, i, wls[i]);
        seen[i] = reported;
      }
      if (pending > 0) continue;
      absl::StatusOr<std::vector<db::Record>> best = jdb.TopK(wls[i].key, dc, top);
      if (!best.ok()) {
        spdlog::warn("event=remeasure_skipped job={} workload=\"{}\" error=\"{}\"", job->id,
                     wls[i].canonical, best.status().ToString());
        settled[i] = true;
        continue;
      }
      std::vector<v1::Task> tasks;
      for (const db::Record& r : *best) {
        if (r.remeasured_at_ms != 0 || tried[i].count(r.candidate_id) > 0) continue;
        if (static_cast<int>(tried[i].size()) >= 2 * top) break;
        tried[i].insert(r.candidate_id);
        v1::Task t;
        t.set_candidate_id(r.candidate_id);
        t.set_job_id(job->id);
        t.set_device_class(dc);
        t.set_remeasure(true);
        v1::MeasureRequest* req = t.mutable_request();
        req->set_candidate_id(r.candidate_id);
        req->set_workload(wls[i].canonical);
        req->set_trace_json(r.trace_json);
        req->set_min_repeat_ms(job->spec.min_repeat_ms() * options.remeasure_factor);
        req->set_flush_cache(IsGpuDeviceClass(dc));
        tasks.push_back(std::move(t));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (stopping || job->cancel) return false;
      if (tasks.empty()) {
        settled[i] = true;
        continue;
      }
      const size_t want = tasks.size();
      // A candidate another job is re-timing right now is skipped here (Enqueue): its record
      // is re-timed all the same.
      const int queued = registry->Enqueue(static_cast<int>(i), std::move(tasks));
      job->workloads[i].remeasure_pending += queued;
      spdlog::info("event=remeasure_queued job={} workload=\"{}\" tasks={} skipped={}", job->id,
                   wls[i].canonical, queued, static_cast<int>(want) - queued);
      Touch(*job);
    }
    std::unique_lock<std::mutex> lock(mu);
    bool all = true;
    for (size_t i = 0; i < n; ++i) all = all && settled[i];
    if (all) return true;
    auto ready = [&] {
      if (stopping || job->cancel) return true;
      for (size_t i = 0; i < n; ++i) {
        const WorkloadRun& run = job->workloads[i];
        if (!settled[i] &&
            (run.remeasure_pending == 0 || run.remeasured + run.remeasure_failed != seen[i])) {
          return true;
        }
      }
      return false;
    };
    change_cv.wait_for(lock, kRetimePoll, ready);
    if (stopping || job->cancel) return false;
    // Late results of the trials (tasks leased before the targets were reached) are stored
    // and counted by Account; the search that would learn from them has ended.
    job->inbox.clear();
  }
}

// ---------------------------------------------------------------------------------------
// The search thread of one job.

void JobRunner::Impl::RunJob(JobEntry* job) {
  db::OpenOptions oo;
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path, oo);
  if (!opened.ok()) {
    FailJob(job, *db, absl::StrCat("cannot open database: ", opened.status().ToString()));
    return;
  }
  db::Database& jdb = **opened;
  const std::string dc = job->device_class;
  const int batch = job->spec.batch();

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
    absl::StatusOr<std::unique_ptr<SearchSpace>> sp = SpaceForDeviceClass(*w, dc);
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
      // run.done is not recounted here: the service counted the stored traces before any
      // report could arrive, and Account has added every result stored since. A recount
      // would count a result twice when it is committed before the count and accounted
      // after it (a worker re-sending its spool to a restarted daemon).
      std::lock_guard<std::mutex> lock(mu);
      WorkloadRun& run = job->workloads[i];
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
  Persist(jdb, *job, db::JobState::kRunning, "");
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
  Clock::time_point persisted_at = Clock::now();
  NicedRunner niced(options.search_nice);

  for (;;) {
    std::vector<Reported> inbox;
    std::vector<int> need_round;
    bool all_finished = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      // A round when fewer than half a batch of the workload's tasks wait in the queue (so
      // that workers never run dry while a round is searched, however many there are), as
      // long as its in-flight tasks stay under kMaxInflightBatches batches.
      auto needs = [&](size_t i) {
        const WorkloadRun& w = job->workloads[i];
        if (w.finished || w.stalled || w.target - w.done - w.outstanding <= 0) return false;
        if (w.outstanding <= batch / 2) return true;
        return w.outstanding < kMaxInflightBatches * batch &&
               registry->QueuedOf(job->id, static_cast<int>(i)) < batch / 2;
      };
      auto ready = [&] {
        if (stopping || job->cancel || !job->inbox.empty()) return true;
        bool all = true;
        for (size_t i = 0; i < n; ++i) {
          if (needs(i)) return true;
          all = all && job->workloads[i].finished;
        }
        return all;
      };
      while (!ready()) change_cv.wait_for(lock, kQueuePoll);
      if (stopping || job->cancel) return;  // cancel was persisted by Cancel
      inbox.swap(job->inbox);
      all_finished = true;
      for (size_t i = 0; i < n; ++i) {
        WorkloadRun& w = job->workloads[i];
        if (!w.finished && w.done >= w.target) w.finished = true;
        all_finished = all_finished && w.finished;
        if (needs(i)) need_round.push_back(static_cast<int>(i));
      }
    }
    if (all_finished) {
      if (RemeasureTop(*job) > 0) Persist(jdb, *job, db::JobState::kRunning, "");
      if (!RetimeBest(job, jdb, wls)) return;
      if (RemeasureTop(*job) > 0) {
        for (size_t i = 0; i < n; ++i) RefreshBest(job, jdb, i, wls[i]);
      }
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
      return;
    }

    if (!inbox.empty()) {
      niced.Run([&] {
        std::vector<cost_model::FeatureMatrix> programs;
        std::vector<double> throughputs;
        std::vector<std::string> keys;
        for (const Reported& r : inbox) {
          auto it = inflight.find(r.candidate_id);
          if (r.withdrawn) {
            // Never measured: the search may propose it again.
            if (it != inflight.end()) {
              measured[it->second.first].erase(CandidateKey(it->second.second));
              inflight.erase(it);
            }
            continue;
          }
          if (it == inflight.end()) {
            // Not dispatched by this run: never propose it again.
            if (!r.program_key.empty() && r.workload >= 0 && static_cast<size_t>(r.workload) < n) {
              measured[r.workload].insert(r.program_key);
            }
            continue;
          }
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
      });
      // Written at most once per kPersistEvery: each write takes SQLite's write lock, which
      // Report's inserts on the service's connection would otherwise keep waiting for. A
      // resumed job recounts its stored traces, unless another job of its workloads ran
      // meanwhile: then it starts from these counts (a little behind after a crash, exact
      // after a graceful stop, which writes them last).
      if (Clock::now() - persisted_at >= kPersistEvery) {
        Persist(jdb, *job, db::JobState::kRunning, "");
        persisted_at = Clock::now();
      }
    }

    for (int i : need_round) {
      int want;
      {
        std::lock_guard<std::mutex> lock(mu);
        const WorkloadRun& w = job->workloads[i];
        want = std::min(batch, w.target - w.done - w.outstanding);
      }
      if (want <= 0) continue;
      absl::StatusOr<std::vector<Candidate>> next = absl::UnknownError("no search ran");
      niced.Run([&] {
        std::vector<Candidate> seeds =
            SeedsFromDatabase(jdb, *spaces[i], wls[i], dc, options.seed_records);
        // Before the model has learned anything, the space's rule-picked candidates lead.
        next = NextRound(*spaces[i], model, seeds, measured[i], want, options.search, rng);
      });
      if (!next.ok()) {
        FailJob(job, jdb,
                absl::StrCat("search for '", wls[i].canonical, "': ", next.status().message()));
        return;
      }
      std::vector<v1::Task> fresh;
      int stored_elsewhere = 0;
      for (Candidate& c : *next) {
        std::string key = CandidateKey(c);
        if (!measured[i].insert(key).second) continue;
        std::string id = CandidateId(wls[i].key, key, dc);
        // Stored since this job read its measured set (another job of the workload measured
        // it): its result would be a duplicate, not a trial of this job.
        if (auto stored = jdb.GetByCandidateId(id); stored.ok() && stored->has_value()) {
          ++stored_elsewhere;
          continue;
        }
        v1::Task t;
        t.set_candidate_id(std::move(id));
        t.set_job_id(job->id);
        t.set_device_class(dc);
        v1::MeasureRequest* req = t.mutable_request();
        req->set_candidate_id(t.candidate_id());
        req->set_workload(wls[i].canonical);
        req->set_trace_json(ir::TraceToJson(c.trace));
        req->set_min_repeat_ms(job->spec.min_repeat_ms());
        req->set_flush_cache(IsGpuDeviceClass(dc));
        inflight.emplace(t.candidate_id(), std::make_pair(i, std::move(c)));
        fresh.push_back(std::move(t));
      }
      std::lock_guard<std::mutex> lock(mu);
      if (stopping || job->cancel || Terminal(job->state)) return;
      WorkloadRun& w = job->workloads[i];
      // Only candidates another job measured meanwhile: they are in `measured` now, so the
      // next round proposes others.
      if (fresh.empty() && stored_elsewhere > 0) continue;
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
      // Under `mu` (then the registry's): a concurrent Cancel drops them or never sees them.
      w.outstanding += registry->Enqueue(i, std::move(fresh));
    }
  }
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
    if (r.remeasure) {
      run.remeasure_pending = std::max(0, run.remeasure_pending - 1);
      ++(r.error_class == db::ErrorClass::kOk ? run.remeasured : run.remeasure_failed);
      s.Touch(job);
      continue;
    }
    const bool dispatched_here = r.program_key.empty();
    if (dispatched_here) run.outstanding = std::max(0, run.outstanding - 1);
    run.stalled = false;
    if (Terminal(job.state)) continue;
    // The best is the database's best for the workload (as a job starts with), so a result
    // past the target still improves it.
    if (r.error_class == db::ErrorClass::kOk &&
        (run.best_latency_us == 0 || r.median_us < run.best_latency_us)) {
      run.best_latency_us = r.median_us;
      run.best_gflops = r.gflops;
    }
    job.inbox.push_back(Reported{r.workload, r.candidate_id, r.program_key,
                                 r.error_class == db::ErrorClass::kOk ? 1.0 / r.median_us : 0.0});
    s.Touch(job);
    // Past the target (results of a worker's spool arrived after the resumed job had
    // dispatched its trials anew): stored, but not a trial of the job.
    if (run.done >= run.target) continue;
    ++run.done;
    if (r.error_class != db::ErrorClass::kOk) {
      ++run.errors[std::string(db::ErrorClassName(r.error_class))];
    }
    if (!dispatched_here) {
      // A result this daemon did not dispatch adds a trial that no task stands for: the
      // job's queued tasks beyond its target are withdrawn (leased ones are measured anyway
      // and stored, past the target).
      const int excess = run.done + run.outstanding - run.target;
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

}  // namespace lathe::tuner
