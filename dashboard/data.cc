#include "dashboard/data.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dashboard/job_rates.h"
#include "db/database.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "nlohmann/json.hpp"
#include "proto/trace_io.h"

namespace lathe::dashboard {

namespace v1 = lathe::v1;
using json = nlohmann::json;

namespace {

// Text from the database is stored byte-exact and may hold invalid UTF-8: replaced, not thrown.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* StateName(v1::JobState s) {
  switch (s) {
    case v1::QUEUED:
      return "queued";
    case v1::RUNNING:
      return "running";
    case v1::DONE:
      return "done";
    case v1::FAILED:
      return "failed";
    case v1::CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

bool Final(v1::JobState s) { return s == v1::DONE || s == v1::FAILED || s == v1::CANCELLED; }

// Fields that multi-task jobs (issue 13) add to the protocol, read by name so that this code
// shows them once the proto has them and falls back meanwhile: a task's weight (1 without
// it), a job's trials done and budget (the sums over its tasks) and objective (the sum of
// weight x best latency, once every task has a best).
std::optional<double> DoubleField(const google::protobuf::Message& m, const char* name) {
  const google::protobuf::FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  if (f == nullptr || f->is_repeated()) return std::nullopt;
  const google::protobuf::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
      return r->GetDouble(m, f);
    case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
      return r->GetInt32(m, f);
    case google::protobuf::FieldDescriptor::CPPTYPE_INT64:
      return static_cast<double>(r->GetInt64(m, f));
    default:
      return std::nullopt;
  }
}

double TaskWeight(const v1::WorkloadProgress& p) {
  std::optional<double> w = DoubleField(p, "weight");
  return w.has_value() && *w > 0 ? *w : 1.0;
}

json JobJson(const v1::JobStatus& st, const JobRates& rates, int64_t now_ms) {
  json tasks = json::array();
  int64_t done = 0, budget = 0;
  double objective = 0;
  bool all_best = st.workloads_size() > 0;
  bool retiming = false;
  for (const v1::WorkloadProgress& p : st.workloads()) {
    const double weight = TaskWeight(p);
    json errors = json::object();
    for (const auto& [name, n] : p.errors()) errors[name] = n;
    tasks.push_back(
        {{"workload", p.workload()},
         {"weight", weight},
         {"trials_done", p.trials_done()},
         {"trials_target", p.trials_target()},
         {"best_latency_us", p.best_latency_us() > 0 ? json(p.best_latency_us()) : json(nullptr)},
         {"best_gflops", p.best_gflops() > 0 ? json(p.best_gflops()) : json(nullptr)},
         {"errors", errors},
         {"remeasured", p.remeasured()},
         {"remeasure_failed", p.remeasure_failed()},
         {"remeasure_pending", p.remeasure_pending()}});
    done += p.trials_done();
    budget += p.trials_target();
    if (p.remeasure_pending() > 0) retiming = true;
    if (p.best_latency_us() > 0) {
      objective += weight * p.best_latency_us();
    } else {
      all_best = false;
    }
  }
  if (std::optional<double> d = DoubleField(st, "trials_done"); d && *d > 0) {
    done = static_cast<int64_t>(*d);
  }
  if (std::optional<double> b = DoubleField(st, "trials_budget"); b && *b > 0) {
    budget = static_cast<int64_t>(*b);
  }
  json objective_us = all_best ? json(objective) : json(nullptr);
  if (std::optional<double> o = DoubleField(st, "objective_us"); o && *o > 0) objective_us = *o;
  // Each task's part of the objective, and how the objective fell (the daemon's points).
  if (objective_us.is_number()) {
    const double total = objective_us.get<double>();
    for (json& t : tasks) {
      t["share"] =
          t["best_latency_us"].is_number()
              ? json(t["weight"].get<double>() * t["best_latency_us"].get<double>() / total)
              : json(nullptr);
    }
  }
  json history = json::array();
  for (const v1::ObjectivePoint& p : st.objective_history()) {
    history.push_back({{"at_ms", p.at_ms()},
                       {"trials_done", p.trials_done()},
                       {"objective_us", p.objective_us()}});
  }

  // Multi-task jobs give their tasks no targets: the job's budget says when trials are done.
  const bool trials_finished = budget > 0 && done >= budget;
  std::string phase = StateName(st.state());
  if (st.state() == v1::RUNNING) phase = trials_finished && retiming ? "re-timing" : "tuning";
  json rate = nullptr, eta = nullptr;
  if (st.state() == v1::RUNNING) {
    std::optional<double> r = rates.Rate(st.job_id(), now_ms);
    if (r.has_value()) rate = *r;
    if (phase == "tuning") {
      std::optional<double> left = SecondsLeft(budget - done, r);
      if (left.has_value()) eta = *left;
    }
  }
  return {{"id", st.job_id()},
          {"state", StateName(st.state())},
          {"phase", phase},
          {"device_class", st.device_class()},
          {"message", st.message()},
          {"created_at_ms", st.created_at_ms()},
          {"updated_at_ms", st.updated_at_ms()},
          {"trials_done", done},
          {"trials_budget", budget},
          {"objective_us", objective_us},
          {"objective_history", std::move(history)},
          {"rate_per_s", rate},
          {"eta_s", eta},
          {"tasks", std::move(tasks)}};
}

// Figures measured for libraries (see data.h), keyed by (canonical workload, device class).
class LibraryFigures {
 public:
  struct Figure {
    std::string library;
    double gflops = 0;
  };

  explicit LibraryFigures(std::string path) : path_(std::move(path)) {}

  std::optional<Figure> Find(const std::string& canonical, const std::string& device_class) {
    if (path_.empty()) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    Reload();
    auto it = figures_.find({canonical, device_class});
    if (it == figures_.end()) return std::nullopt;
    return it->second;
  }

  bool configured() const { return !path_.empty(); }

 private:
  // Reads the file again when its modification time changed since the last read.
  void Reload() {
    std::error_code ec;
    auto mtime = std::filesystem::last_write_time(path_, ec);
    if (ec) {
      figures_.clear();
      return;
    }
    if (loaded_ && mtime == mtime_) return;
    loaded_ = true;
    mtime_ = mtime;
    figures_.clear();
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) continue;
      auto str = [&](const char* k) {
        return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
      };
      const std::string workload = str("workload"), dc = str("device_class"),
                        library = str("library");
      if (workload.empty() || dc.empty() || library.empty()) continue;
      if (!j.contains("library_gflops") || !j["library_gflops"].is_number()) continue;
      const double gflops = j["library_gflops"].get<double>();
      if (!(gflops > 0)) continue;
      absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(workload);
      if (!spec.ok()) continue;
      figures_[{spec->ToString(), dc}] = Figure{library, gflops};
    }
  }

  std::string path_;
  std::mutex mu_;
  bool loaded_ = false;
  std::filesystem::file_time_type mtime_;
  std::map<std::pair<std::string, std::string>, Figure> figures_;
};

json RecordJson(const v1::QueryBestResponse& r) {
  json out = {{"workload", r.workload()},
              {"device_class", r.device_class()},
              {"found", r.found()},
              {"explanation", r.explanation()}};
  if (!r.found()) return out;
  out["latency_us"] = r.latency_us();
  out["gflops"] = r.gflops();
  out["worker"] = r.worker();
  out["measured_at_ms"] = r.measured_at_ms();
  absl::StatusOr<ir::Trace> trace = traceio::TraceFromJson(r.trace_json());
  out["schedule"] = trace.ok() ? ir::TraceToText(*trace)
                               : absl::StrCat("(unreadable trace: ", trace.status().message(), ")");
  return out;
}

// A JSON string literal of `s`: quotes, backslashes and control characters escaped (bytes
// of invalid UTF-8 pass through; the browser's decoder replaces them).
void AppendJsonString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

// One worker of State(), written directly: with hundreds of workers this is most of the
// answer, and building it through json objects costs several times more.
void AppendWorker(std::string* out, const v1::WorkerInfo& w) {
  absl::StrAppend(out, "{\"id\":");
  AppendJsonString(out, w.worker_id());
  absl::StrAppend(out, ",\"host\":");
  AppendJsonString(out, w.hostname());
  absl::StrAppend(out, ",\"device_class\":");
  AppendJsonString(out, w.device_class());
  absl::StrAppend(out, ",\"state\":");
  AppendJsonString(out, w.state());
  absl::StrAppend(out, ",\"measured\":", w.measured(), ",\"last_seen_ms\":", w.last_seen_ms(),
                  ",\"leased_tasks\":", w.leased_tasks(),
                  ",\"lease_deadline_ms\":", w.lease_deadline_ms(), ",\"lease_jobs\":[");
  for (int i = 0; i < w.lease_job_ids_size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(out, w.lease_job_ids(i));
  }
  absl::StrAppend(out, "],\"version\":");
  AppendJsonString(out, w.lathe_version());
  out->push_back('}');
}

}  // namespace

struct DashboardData::Impl {
  daemon::TunerService* service = nullptr;
  std::mutex state_mu;  // guards the last State() answer
  std::string state_text;
  std::chrono::steady_clock::time_point state_at;
  DataOptions options;
  std::unique_ptr<db::Database> db;
  JobRates rates;
  std::unique_ptr<LibraryFigures> figures;
};

absl::StatusOr<std::unique_ptr<DashboardData>> DashboardData::Create(daemon::TunerService* service,
                                                                     const DataOptions& options) {
  if (service == nullptr) return absl::InvalidArgumentError("no service");
  auto impl = std::make_unique<Impl>();
  impl->service = service;
  impl->options = options;
  db::OpenOptions o;
  o.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(options.db_path, o);
  if (!d.ok()) return d.status();
  impl->db = std::move(*d);
  impl->figures = std::make_unique<LibraryFigures>(options.library_figures);
  return std::unique_ptr<DashboardData>(new DashboardData(std::move(impl)));
}

DashboardData::DashboardData(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DashboardData::~DashboardData() = default;

void DashboardData::Sample() {
  absl::StatusOr<v1::ListJobsResponse> jobs = impl_->service->ListJobs({});
  if (!jobs.ok()) return;
  const int64_t now = NowMs();
  std::set<std::string> live;
  for (const v1::JobStatus& st : jobs->jobs()) {
    if (st.state() != v1::RUNNING) continue;
    int64_t done = 0;
    for (const v1::WorkloadProgress& p : st.workloads()) done += p.trials_done();
    impl_->rates.Observe(st.job_id(), now, done);
    live.insert(st.job_id());
  }
  impl_->rates.Retain(live);
}

std::string DashboardData::State() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.state_mu);  // callers at once share one build
  const auto now_steady = std::chrono::steady_clock::now();
  if (!s.state_text.empty() &&
      now_steady - s.state_at < std::chrono::milliseconds(s.options.state_cache_ms)) {
    return s.state_text;
  }
  s.state_text = BuildState();
  s.state_at = now_steady;
  return s.state_text;
}

std::string DashboardData::BuildState() {
  const int64_t now = NowMs();
  std::string text = absl::StrCat("{\"now_ms\":", now, ",\"workers\":[");
  int64_t idle = 0, busy = 0, lost = 0;
  if (absl::StatusOr<v1::ListWorkersResponse> ws = impl_->service->ListWorkers({}); ws.ok()) {
    text.reserve(text.size() + 256 * ws->workers_size());
    for (int i = 0; i < ws->workers_size(); ++i) {
      const v1::WorkerInfo& w = ws->workers(i);
      if (w.state() == "lost") {
        ++lost;
      } else if (w.state() == "busy") {
        ++busy;
      } else {
        ++idle;
      }
      if (i > 0) text.push_back(',');
      AppendWorker(&text, w);
    }
  }
  text.append("]");

  json jobs = json::array();
  int64_t running = 0, queued = 0, finished = 0;
  if (absl::StatusOr<v1::ListJobsResponse> js = impl_->service->ListJobs({}); js.ok()) {
    // Newest first: every job still going, then the newest final ones.
    std::vector<const v1::JobStatus*> order;
    for (const v1::JobStatus& st : js->jobs()) order.push_back(&st);
    std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
      return a->created_at_ms() > b->created_at_ms();
    });
    int shown_final = 0;
    for (const v1::JobStatus* st : order) {
      if (st->state() == v1::RUNNING) ++running;
      if (st->state() == v1::QUEUED) ++queued;
      if (Final(st->state())) {
        ++finished;
        if (shown_final++ >= impl_->options.recent_finished_jobs) continue;
      }
      jobs.push_back(JobJson(*st, impl_->rates, now));
    }
  }
  json counts = {{"workers_idle", idle},
                 {"workers_busy", busy},
                 {"workers_lost", lost},
                 {"jobs_running", running},
                 {"jobs_queued", queued},
                 {"jobs_finished", finished},
                 {"tasks_queued", impl_->service->QueueDepth()}};
  absl::StrAppend(&text, ",\"jobs\":", Dump(jobs), ",\"counts\":", Dump(counts), "}");
  return text;
}

absl::StatusOr<std::string> DashboardData::Curve(const std::string& workload,
                                                 const std::string& device_class,
                                                 const std::string& job_id) {
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(workload);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("workload '", workload, "': ", spec.status().message()));
  }
  if (device_class.empty()) return absl::InvalidArgumentError("no device_class");
  const std::string canonical = spec->ToString();
  int64_t job_start_ms = -1;
  if (!job_id.empty()) {
    absl::StatusOr<v1::JobStatus> job = impl_->service->GetJob(job_id);
    if (!job.ok()) return job.status();
    job_start_ms = job->created_at_ms();
  }
  absl::StatusOr<std::vector<db::TimelinePoint>> timeline =
      impl_->db->Timeline(ir::WorkloadKey(canonical), device_class);
  if (!timeline.ok()) return timeline.status();

  // The best so far, one point per improvement (and the last trial), as [trial, latency_us,
  // gflops]: the curve's shape without every trial of a long job.
  json points = json::array();
  double best = 0, best_gflops = 0, flops = 0;
  int64_t ok = 0, job_start_trial = -1;
  const int64_t n = static_cast<int64_t>(timeline->size());
  for (int64_t i = 0; i < n; ++i) {
    const db::TimelinePoint& p = (*timeline)[i];
    if (job_start_trial < 0 && job_start_ms >= 0 && p.measured_at_ms >= job_start_ms) {
      job_start_trial = i + 1;
    }
    if (p.flops > 0) flops = p.flops;
    if (p.error_class != db::ErrorClass::kOk || !(p.median_us > 0)) continue;
    ++ok;
    if (best == 0 || p.median_us < best) {
      best = p.median_us;
      best_gflops = p.flops > 0 ? p.flops / (p.median_us * 1e3) : 0;
      points.push_back({i + 1, best, best_gflops});
    }
  }
  if (best > 0 && points.back()[0].get<int64_t>() != n) points.push_back({n, best, best_gflops});

  json out = {{"workload", canonical},
              {"device_class", device_class},
              {"trials", n},
              {"ok", ok},
              {"points", std::move(points)},
              {"job_start_trial", job_start_trial > 0 ? json(job_start_trial) : json(nullptr)},
              {"library", nullptr}};
  if (std::optional<LibraryFigures::Figure> f = impl_->figures->Find(canonical, device_class)) {
    if (flops == 0) {
      absl::StatusOr<ir::Workload> w = ir::MakeWorkload(*spec);
      if (w.ok()) flops = w->flops;
    }
    json lib = {{"name", f->library}, {"gflops", f->gflops}};
    lib["latency_us"] = flops > 0 ? json(flops / (f->gflops * 1e3)) : json(nullptr);
    out["library"] = std::move(lib);
  } else {
    out["library_note"] = impl_->figures->configured()
                              ? "no library figure measured for this workload on this device class"
                              : "no library figures given (lathed --library-figures FILE)";
  }
  return Dump(out);
}

absl::StatusOr<std::string> DashboardData::Records(const std::string& job_id) {
  absl::StatusOr<v1::JobStatus> job = impl_->service->GetJob(job_id);
  if (!job.ok()) return job.status();
  json records = json::array();
  for (const v1::WorkloadProgress& p : job->workloads()) {
    v1::QueryBestRequest q;
    q.set_workload(p.workload());
    q.set_device_class(job->device_class());
    absl::StatusOr<v1::QueryBestResponse> r = impl_->service->QueryBest(q);
    if (!r.ok()) return r.status();
    records.push_back(RecordJson(*r));
  }
  return Dump(json({{"job_id", job_id}, {"records", std::move(records)}}));
}

absl::StatusOr<std::string> DashboardData::Best(const std::string& workload,
                                                const std::string& device_class) {
  v1::QueryBestRequest q;
  q.set_workload(workload);
  q.set_device_class(device_class);
  absl::StatusOr<v1::QueryBestResponse> r = impl_->service->QueryBest(q);
  if (!r.ok()) return r.status();
  return Dump(RecordJson(*r));
}

absl::StatusOr<std::string> DashboardData::Cancel(const std::string& job_id) {
  v1::CancelJobRequest req;
  req.set_job_id(job_id);
  absl::StatusOr<v1::CancelJobResponse> r = impl_->service->CancelJob(req);
  if (!r.ok()) return r.status();
  return Dump(JobJson(r->status(), impl_->rates, NowMs()));
}

}  // namespace lathe::dashboard
