#include "daemon/service.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/host.h"
#include "daemon/job_runner.h"
#include "daemon/lease_registry.h"
#include "daemon/log_text.h"
#include "daemon/metrics.h"
#include "daemon/service_state.h"
#include "db/database.h"
#include "db/lookup.h"
#include "db/record.h"
#include "ir/target.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "spdlog/spdlog.h"
#include "tuner/space.h"
#include "tuner/space_factory.h"
#include "tuner/tune.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

namespace {

constexpr int kDefaultTrials = 300;
constexpr int kDefaultBatch = 64;
constexpr double kDefaultMinRepeatMs = 100;
constexpr int kMaxWorkloadsPerJob = 256;
constexpr int kMaxTrials = 1000000;
constexpr int kMaxBatch = 4096;
constexpr int kMaxRemeasureTop = 1000;  // as lathed --remeasure-top

bool Terminal(db::JobState s) {
  return s == db::JobState::kDone || s == db::JobState::kFailed || s == db::JobState::kCancelled;
}

bool Finite(double v) { return std::isfinite(v); }

LeaseRegistryOptions RegistryOptions(const ServiceOptions& o) {
  LeaseRegistryOptions r;
  r.heartbeat_interval_ms = o.heartbeat_interval_ms;
  r.lease_duration_ms = o.lease_duration_ms;
  r.lost_after_heartbeats = o.lost_after_heartbeats;
  r.max_tasks_per_lease = o.max_tasks_per_lease;
  r.max_lease_bytes = o.max_lease_bytes;
  r.max_wait_ms = o.max_wait_ms;
  r.reaper_interval_ms = o.reaper_interval_ms;
  r.forget_lost_after_ms = o.forget_lost_after_ms;
  r.max_workers = o.max_workers;
  r.metrics = o.metrics;
  return r;
}

JobRunnerOptions RunnerOptions(const ServiceOptions& o) {
  JobRunnerOptions r;
  r.db_path = o.db_path;
  r.search = o.search;
  r.seed_records = o.seed_records;
  r.use_cost_model = o.use_cost_model;
  r.search_nice = o.search_nice;
  r.remeasure_top = o.remeasure_top;
  r.remeasure_factor = o.remeasure_factor;
  r.search_pool = o.search_pool;
  return r;
}

}  // namespace

int DefaultSearchThreads() { return std::max(1, codegen::HostCpu().cores); }

TunerService::State::State(const ServiceOptions& o, std::unique_ptr<db::Database> database)
    : options(o),
      db(std::move(database)),
      registry(RegistryOptions(o)),
      runner(RunnerOptions(o), &registry, db.get()) {}

TunerService::TunerService(std::unique_ptr<State> state) : s_(std::move(state)) {}

TunerService::~TunerService() { Shutdown(); }

absl::StatusOr<std::unique_ptr<TunerService>> TunerService::Create(const ServiceOptions& options) {
  if (options.db_path.empty()) return absl::InvalidArgumentError("empty database path");
  if (options.heartbeat_interval_ms < 1 || options.lease_duration_ms < 1 ||
      options.reaper_interval_ms < 1) {
    return absl::InvalidArgumentError("heartbeat, lease and reaper intervals must be positive");
  }
  if (absl::Status st = tuner::CreateParentDirectory(options.db_path); !st.ok()) return st;
  if (options.search_nice < 0 || options.search_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("search_nice ", options.search_nice, " (need 0..19)"));
  }
  if (options.remeasure_top < 0 || !(options.remeasure_factor > 0) ||
      !std::isfinite(options.remeasure_factor)) {
    return absl::InvalidArgumentError(absl::StrCat("remeasure_top ", options.remeasure_top,
                                                   " (need >= 0) or remeasure_factor ",
                                                   options.remeasure_factor, " (need > 0)"));
  }
  absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(options.db_path);
  if (!opened.ok()) return opened.status();
  auto state = std::make_unique<State>(options, std::move(*opened));
  State& s = *state;

  // Every job of the database: unfinished ones resume, finished ones answer queries.
  absl::StatusOr<std::vector<db::Job>> stored = s.db->ListJobs();
  if (!stored.ok()) return stored.status();
  std::vector<std::unique_ptr<JobEntry>> loaded;
  std::vector<bool> resume;
  std::vector<std::vector<int64_t>> persisted_done;  // per loaded job: "doneMeasured"
  // Unfinished jobs that another daemon sharing the store runs: they count below as jobs that
  // tuned a workload meanwhile, and are neither resumed nor listed here.
  std::vector<bool> foreign;
  std::set<std::string> held_elsewhere;
  for (const db::Job& j : *stored) {
    if (!Terminal(j.state)) held_elsewhere.insert(j.uid);
  }
  // A claim of this daemon's own job can fail for a moment after it was killed (-9), until the
  // server notices that the old session is gone: the refused claims are tried again for a
  // second before the jobs are left to whoever holds them.
  for (int round = 0; round < 6 && !held_elsewhere.empty(); ++round) {
    if (round > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (auto it = held_elsewhere.begin(); it != held_elsewhere.end();) {
      absl::StatusOr<bool> claimed = s.db->ClaimJob(*it);
      if (!claimed.ok()) return claimed.status();
      it = *claimed ? held_elsewhere.erase(it) : std::next(it);
    }
  }
  for (const db::Job& j : *stored) {
    const bool theirs = held_elsewhere.count(j.uid) > 0;
    if (theirs) {
      spdlog::info("event=job_skipped job={} reason=\"run by another daemon on the store\"", j.uid);
    }
    foreign.push_back(theirs);
    auto job = std::make_unique<JobEntry>();
    job->id = j.uid;
    job->device_class = j.device_class;
    job->state = j.state;
    job->message = j.error_msg;
    job->created_ms = j.created_at_ms;
    job->updated_ms = j.updated_at_ms;
    std::vector<int64_t> baseline, done, remeasured, remeasure_failed;
    nlohmann::json doc = nlohmann::json::parse(j.spec_json, nullptr, /*allow_exceptions=*/false);
    google::protobuf::util::JsonParseOptions po;
    po.ignore_unknown_fields = true;
    absl::Status parsed = absl::InvalidArgumentError("spec is not a JSON object");
    if (doc.is_object()) {
      // Per-workload counts that JobSpecJson adds to the spec (absent in older databases).
      auto ints = [&](const char* name, std::vector<int64_t>* out) {
        if (!doc.contains(name) || !doc[name].is_array()) return;
        for (const auto& v : doc[name]) {
          out->push_back(v.is_number_integer() ? v.get<int64_t>() : 0);
        }
      };
      ints("baselineMeasured", &baseline);
      ints("doneMeasured", &done);
      ints("remeasuredCount", &remeasured);
      ints("remeasureFailedCount", &remeasure_failed);
      job->objective_history = ObjectiveHistoryFromSpecJson(doc);
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
      run.target = WorkloadTarget(job->spec);
      if (i < job->spec.tasks_size() && job->spec.tasks(i).weight() > 0) {
        run.weight = job->spec.tasks(i).weight();
      }
      run.baseline = i < static_cast<int>(baseline.size()) ? baseline[i] : 0;
      if (i < static_cast<int>(remeasured.size())) {
        run.remeasured =
            static_cast<int>(std::clamp<int64_t>(remeasured[i], 0, kMaxRemeasureTop * 2));
      }
      if (i < static_cast<int>(remeasure_failed.size())) {
        run.remeasure_failed =
            static_cast<int>(std::clamp<int64_t>(remeasure_failed[i], 0, kMaxRemeasureTop * 2));
      }
      // Progress as committed: the traces stored since the job was created (see below when
      // another job of the workload ran meanwhile).
      {
        if (auto keys = tuner::MeasuredPrograms(*s.db, w->key, j.device_class); keys.ok()) {
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
    if (!Terminal(j.state) && !theirs) {
      if (!parsed.ok()) {
        job->state = db::JobState::kFailed;
        job->message = absl::StrCat("cannot resume: stored spec: ", parsed.message());
        if (absl::Status st = s.db->UpdateJob(job->id, job->state, 0, job->message); !st.ok()) {
          spdlog::error("event=job_persist_failed job={} error=\"{}\"", job->id, st.ToString());
        }
      }
    }
    resume.push_back(!Terminal(job->state) && !theirs);
    loaded.push_back(std::move(job));
    persisted_done.push_back(std::move(done));
  }
  // A job whose workload another job (of the same device class) tuned since it was created
  // did not store every trace counted above: it starts from its own persisted progress
  // (job_runner.h).
  for (size_t a = 0; a < loaded.size(); ++a) {
    if (!resume[a]) continue;
    JobEntry& job = *loaded[a];
    for (size_t i = 0; i < job.workloads.size() && i < persisted_done[a].size(); ++i) {
      WorkloadRun& run = job.workloads[i];
      bool shared = false;
      for (size_t b = 0; b < loaded.size() && !shared; ++b) {
        const JobEntry& other = *loaded[b];
        if (b == a || other.device_class != job.device_class) continue;
        if (Terminal(other.state) && other.updated_ms < job.created_ms) continue;  // before
        for (const WorkloadRun& o : other.workloads) shared = shared || o.key == run.key;
      }
      if (!shared) continue;
      const int own = static_cast<int>(std::clamp<int64_t>(persisted_done[a][i], 0, run.target));
      if (own < run.done) {
        spdlog::info(
            "event=job_progress_shared job={} workload=\"{}\" stored_since_created={} "
            "own={}",
            job.id, run.canonical, run.done, own);
        run.done = own;
      }
    }
  }
  std::unique_ptr<TunerService> service(new TunerService(std::move(state)));
  State* sp = service->s_.get();
  for (size_t i = 0; i < loaded.size(); ++i) {
    if (foreign[i]) continue;
    if (resume[i]) {
      spdlog::info("event=job_resumed job={} device_class=\"{}\"", loaded[i]->id,
                   loaded[i]->device_class);
    }
    sp->runner.Add(std::move(loaded[i]), resume[i]);
  }
  sp->registry.Start();
  return service;
}

void TunerService::BeginShutdown() {
  s_->registry.BeginShutdown();
  s_->runner.BeginShutdown();
}

void TunerService::Shutdown() {
  std::call_once(s_->shutdown_once, [this] {
    BeginShutdown();
    s_->runner.Stop();
    s_->registry.Stop();
  });
}

int64_t TunerService::QueueDepth() { return s_->registry.Queued(); }

int64_t TunerService::WaitingLeases() { return s_->registry.Waiting(); }

// --- clients ---

absl::StatusOr<v1::SubmitJobResponse> TunerService::SubmitJob(const v1::SubmitJobRequest& req) {
  v1::JobSpec spec = req.spec();
  const bool tasks_job = spec.tasks_size() > 0;
  if (tasks_job && spec.workloads_size() > 0) {
    return absl::InvalidArgumentError("spec sets both workloads and tasks (set one)");
  }
  if (tasks_job) {
    // A tasks job is stored with its workloads filled in (the rest of the daemon reads them)
    // and each task's weight.
    for (int i = 0; i < spec.tasks_size(); ++i) {
      v1::TaskSpec* t = spec.mutable_tasks(i);
      if (t->weight() == 0) t->set_weight(1);
      if (!Finite(t->weight()) || t->weight() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("spec.tasks[", i, "].weight ", t->weight(), " (need a positive number)"));
      }
      spec.add_workloads(t->workload());
    }
  }
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
  if (spec.max_trials_per_task() < 0 || spec.max_trials_per_task() > kMaxTrials) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.max_trials_per_task ", spec.max_trials_per_task(), " (need 0..", kMaxTrials, ")"));
  }
  if (spec.max_trials_per_task() > 0 && !tasks_job) {
    return absl::InvalidArgumentError(
        "spec.max_trials_per_task applies to a tasks job (a workloads job gives each workload "
        "its trials)");
  }
  if (spec.min_repeat_ms() == 0) spec.set_min_repeat_ms(kDefaultMinRepeatMs);
  if (!Finite(spec.min_repeat_ms()) || spec.min_repeat_ms() < 0 || spec.min_repeat_ms() > 6e4) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.min_repeat_ms ", spec.min_repeat_ms(), " (need 0..60000)"));
  }
  if (spec.has_remeasure_top() &&
      (spec.remeasure_top() < 0 || spec.remeasure_top() > kMaxRemeasureTop)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.remeasure_top ", spec.remeasure_top(),
                                                   " (need 0..", kMaxRemeasureTop, ")"));
  }
  if (spec.target().empty()) spec.set_target("cpu");
  const std::string& tgt = spec.target();
  // "cuda-emu:sm_XX" (the GPU emulator) is its own device class. A job names a GPU by ordinal
  // (the workers' GPUs are matched by class), not by architecture.
  absl::StatusOr<ir::Target> target = ir::ParseTarget(tgt);
  if (!target.ok() || (target->kind == ir::TargetKind::kCuda && !target->arch.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.target '", tgt, "' (expected cpu, cuda, cuda:N or cuda-emu:sm_XX)"));
  }
  const bool emulated = target->emulated();
  if (emulated && spec.device_class().empty()) spec.set_device_class(tgt);
  std::vector<ir::Workload> wls;
  for (int i = 0; i < spec.workloads_size(); ++i) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec.workloads(i));
    if (!w.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.workloads[", i, "] '", spec.workloads(i),
                                                     "': ", w.status().message()));
    }
    spec.set_workloads(i, w->canonical);
    if (tasks_job) spec.mutable_tasks(i)->set_workload(w->canonical);
    for (const ir::Workload& other : wls) {
      if (other.key == w->key) {
        return absl::InvalidArgumentError(
            absl::StrCat("spec.workloads[", i, "] '", w->canonical, "' is given twice"));
      }
    }
    wls.push_back(std::move(*w));
  }
  if (spec.device_class().empty()) {
    absl::StatusOr<std::string> dc = s_->DeriveDeviceClass(target->is_gpu() ? "cuda" : "cpu");
    if (!dc.ok()) return dc.status();
    spec.set_device_class(*dc);
  }
  const std::string dc = spec.device_class();
  if (absl::StatusOr<tuner::CpuTarget> cpu = tuner::CpuTargetForDeviceClass(dc);
      !cpu.ok() && !ir::TargetOfDeviceClass(dc).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.device_class: '", dc,
        "' is neither a CPU class (cpu:<model>:<isa>:<N>c) nor a GPU class (cuda:<name> (sm_XX))"));
  }
  std::vector<int64_t> baseline;
  for (size_t i = 0; i < wls.size(); ++i) {
    absl::StatusOr<std::unique_ptr<tuner::SearchSpace>> sp = tuner::SpaceForDeviceClass(wls[i], dc);
    if (!sp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.workloads[", i, "] '", wls[i].canonical,
                                                     "': ", sp.status().message()));
    }
    absl::StatusOr<tuner::ProgramSet> keys = tuner::MeasuredPrograms(*s_->db, wls[i].key, dc);
    if (!keys.ok()) return keys.status();
    baseline.push_back(static_cast<int64_t>(keys->size()));
  }

  if (s_->runner.ShuttingDown()) return absl::UnavailableError("lathed is shutting down");
  auto job = std::make_unique<JobEntry>();
  job->spec = spec;
  job->device_class = dc;
  job->created_ms = job->updated_ms = tuner::NowUnixMs();
  for (size_t i = 0; i < wls.size(); ++i) {
    WorkloadRun run;
    run.canonical = wls[i].canonical;
    run.key = wls[i].key;
    run.flops = wls[i].flops;
    run.target = WorkloadTarget(spec);
    run.weight = tasks_job ? spec.tasks(static_cast<int>(i)).weight() : 1;
    run.baseline = baseline[i];
    job->workloads.push_back(std::move(run));
  }
  // The job is claimed before it exists, so that another daemon sharing the store that starts
  // meanwhile never resumes it; a uid taken elsewhere (held, or stored) draws a new one.
  for (int attempt = 0;; ++attempt) {
    job->id = s_->runner.NewJobId();
    absl::StatusOr<bool> claimed = s_->db->ClaimJob(job->id);
    if (!claimed.ok()) return claimed.status();
    absl::Status created = absl::AlreadyExistsError(absl::StrCat("job ", job->id, " is held"));
    if (*claimed) {
      db::Job row;
      row.uid = job->id;
      row.spec_json = JobSpecJson(*job);
      row.device_class = dc;
      row.state = db::JobState::kQueued;
      row.trials_requested = JobBudget(*job);
      created = s_->db->CreateJob(row);
      if (!created.ok()) (void)s_->db->ReleaseJob(job->id);
    }
    if (created.ok()) break;
    if (!absl::IsAlreadyExists(created) || attempt == 3) return created;
  }

  v1::SubmitJobResponse resp;
  resp.set_job_id(job->id);
  spdlog::info(
      "event=job_submitted job={} device_class=\"{}\" workloads=\"{}\" trials={} batch={} "
      "tasks_job={}",
      job->id, LogText(dc), absl::StrJoin(spec.workloads(), ";"), spec.trials(), spec.batch(),
      tasks_job);
  // Shutting down: persisted as QUEUED, the next start runs it.
  (void)s_->runner.Add(std::move(job), /*start=*/true);
  return resp;
}

absl::StatusOr<v1::JobStatus> TunerService::GetJob(const std::string& job_id) {
  return s_->runner.Get(job_id);
}

absl::StatusOr<v1::JobStatus> TunerService::WatchJob(const std::string& job_id, uint64_t* version,
                                                     int timeout_ms) {
  if (job_id.empty()) return absl::InvalidArgumentError("empty job_id");
  return s_->runner.Watch(job_id, version, timeout_ms);
}

absl::StatusOr<v1::CancelJobResponse> TunerService::CancelJob(const v1::CancelJobRequest& req) {
  if (req.job_id().empty()) return absl::InvalidArgumentError("empty job_id");
  return s_->runner.Cancel(req.job_id());
}

absl::StatusOr<v1::ListJobsResponse> TunerService::ListJobs(const v1::ListJobsRequest&) {
  return s_->runner.List();
}

absl::StatusOr<v1::ListWorkersResponse> TunerService::ListWorkers(const v1::ListWorkersRequest&) {
  return s_->registry.ListWorkers();
}

namespace {

void FillQueryBest(const std::string& canonical, const db::LookupResult& found,
                   v1::QueryBestResponse* resp) {
  resp->set_workload(canonical);
  resp->set_device_class(found.device_class);
  resp->set_explanation(found.explanation);
  if (!found.record.has_value()) return;
  const db::Record& r = *found.record;
  resp->set_found(true);
  resp->set_latency_us(r.median_us);
  resp->set_gflops(r.Gflops());
  resp->set_trace_json(r.trace_json);
  resp->set_measured_at_ms(r.measured_at_ms);
  resp->set_worker(r.worker);
}

}  // namespace

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
  FillQueryBest(w->canonical, *found, &resp);
  return resp;
}

// One device-class derivation for the whole call, and the spec parser (canonical form, key)
// rather than the whole workload definition that QueryBest builds: 1,000 queries in one call
// are a model's worth of operators, answered well under the 200 ms a compiler waits.
absl::StatusOr<v1::QueryBestManyResponse> TunerService::QueryBestMany(
    const v1::QueryBestManyRequest& req) {
  if (req.queries_size() > kMaxQueryBestMany) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.queries_size(), " queries in one call (at most ", kMaxQueryBestMany, ")"));
  }
  std::optional<std::string> default_dc;
  v1::QueryBestManyResponse resp;
  resp.mutable_results()->Reserve(req.queries_size());
  for (int i = 0; i < req.queries_size(); ++i) {
    const v1::QueryBestRequest& q = req.queries(i);
    if (q.workload().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("queries[", i, "]: empty workload"));
    }
    absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(q.workload());
    if (!spec.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("queries[", i, "]: workload '", q.workload(),
                                                     "': ", spec.status().message()));
    }
    std::string dc = q.device_class();
    if (dc.empty()) {
      if (!default_dc.has_value()) {
        absl::StatusOr<std::string> d = s_->DeriveDeviceClass("cpu");
        if (!d.ok()) return d.status();
        default_dc = *d;
      }
      dc = *default_dc;
    }
    const std::string canonical = spec->ToString();
    absl::StatusOr<db::LookupResult> found =
        db::Lookup(*s_->db, {canonical, ir::WorkloadKey(canonical)}, dc);
    if (!found.ok()) return found.status();
    FillQueryBest(canonical, *found, resp.add_results());
  }
  return resp;
}

// --- workers ---

absl::StatusOr<v1::RegisterResponse> TunerService::Register(const v1::RegisterRequest& req) {
  return s_->registry.Register(req);
}

absl::StatusOr<v1::LeaseResponse> TunerService::Lease(const v1::LeaseRequest& req,
                                                      const std::function<bool()>& cancelled) {
  return s_->registry.Lease(req, cancelled);
}

uint64_t TunerService::StartLease(const v1::LeaseRequest& req, LeaseDone done) {
  return s_->registry.StartLease(req, std::move(done));
}

void TunerService::CancelLease(uint64_t wait_id) { s_->registry.CancelLease(wait_id); }

absl::StatusOr<v1::HeartbeatResponse> TunerService::Heartbeat(const v1::HeartbeatRequest& req) {
  return s_->registry.Heartbeat(req);
}

absl::StatusOr<v1::ReleaseResponse> TunerService::Release(const v1::ReleaseRequest& req) {
  return s_->registry.Release(req);
}

}  // namespace lathe::daemon
