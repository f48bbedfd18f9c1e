// Fuzz target: the request handling of every RPC of lathed's Tuner and WorkerService, called
// in-process on a TunerService (daemon/service.h) over a fresh SQLite database: what the gRPC
// edge hands the service once a request has passed the auth gate. The input is a binary
// lathe.fuzz.Session (rpc_session.proto): calls made in order, with "$" in an id field
// standing for the last such id the service handed out. Each input gets a service of its own,
// shut down at its end (its job threads joined), so that no state leaks between inputs.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "daemon/service.h"
#include "fuzz/scratch.h"
#include "rpc_session.pb.h"
#include "spdlog/spdlog.h"

namespace {

namespace v1 = lathe::v1;

// The ids handed out so far in this session.
struct Handed {
  std::string worker_id, worker_secret, lease_id, job_id, lease_request_id;
  v1::LeaseResponse lease;
};

void Fill(std::string* field, const std::string& handed) {
  if (*field == "$") *field = handed;
}

// The worker id and secret of a worker request.
template <typename Request>
void FillWorker(Request* r, const Handed& h) {
  Fill(r->mutable_worker_id(), h.worker_id);
  Fill(r->mutable_worker_secret(), h.worker_secret);
}

lathe::daemon::ServiceOptions Options(const std::string& db_path) {
  lathe::daemon::ServiceOptions o;
  o.db_path = db_path;
  // A small search on one thread: the requests are under test, not the search.
  o.search.population = 16;
  o.search.generations = 1;
  o.search.threads = 1;
  o.use_cost_model = false;
  o.search_nice = 0;
  o.remeasure_top = 0;
  // Long polls bounded to a few milliseconds (a larger wait_ms is refused).
  o.max_wait_ms = 5;
  o.reaper_interval_ms = 5;
  o.heartbeat_interval_ms = 10;
  o.lease_duration_ms = 50;
  o.max_workers = 16;
  o.max_tasks_per_lease = 64;
  return o;
}

void Call(lathe::daemon::TunerService& s, lathe::fuzz::Call call, Handed& h) {
  switch (call.rpc_case()) {
    case lathe::fuzz::Call::kSubmitJob: {
      absl::StatusOr<v1::SubmitJobResponse> r = s.SubmitJob(call.submit_job());
      if (r.ok()) h.job_id = r->job_id();
      break;
    }
    case lathe::fuzz::Call::kGetJob:
      Fill(call.mutable_get_job(), h.job_id);
      (void)s.GetJob(call.get_job());
      break;
    case lathe::fuzz::Call::kWatchJob: {
      Fill(call.mutable_watch_job()->mutable_job_id(), h.job_id);
      uint64_t version = 0;
      (void)s.WatchJob(call.watch_job().job_id(), &version, 0);
      (void)s.WatchJob(call.watch_job().job_id(), &version, 2);
      break;
    }
    case lathe::fuzz::Call::kCancelJob:
      Fill(call.mutable_cancel_job()->mutable_job_id(), h.job_id);
      (void)s.CancelJob(call.cancel_job());
      break;
    case lathe::fuzz::Call::kListJobs:
      (void)s.ListJobs(call.list_jobs());
      break;
    case lathe::fuzz::Call::kListWorkers:
      (void)s.ListWorkers(call.list_workers());
      break;
    case lathe::fuzz::Call::kQueryBest:
      (void)s.QueryBest(call.query_best());
      break;
    case lathe::fuzz::Call::kQueryBestMany:
      (void)s.QueryBestMany(call.query_best_many());
      break;
    case lathe::fuzz::Call::kRegister: {
      v1::RegisterRequest* r = call.mutable_register_();
      FillWorker(r, h);
      absl::StatusOr<v1::RegisterResponse> resp = s.Register(*r);
      if (resp.ok()) {
        h.worker_id = resp->worker_id();
        h.worker_secret = resp->worker_secret();
      }
      break;
    }
    case lathe::fuzz::Call::kLease: {
      v1::LeaseRequest* r = call.mutable_lease();
      FillWorker(r, h);
      // A job's first round of candidates takes a while to be queued: give it up to 300 ms
      // (the service's own long poll is capped at 5 ms here), so that sessions reach the
      // lease, report and release paths with real tasks.
      for (int i = 0; i < 60 && !h.job_id.empty() && s.QueueDepth() == 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      absl::StatusOr<v1::LeaseResponse> resp = s.Lease(*r);
      if (resp.ok() && !resp->lease_id().empty()) {
        h.lease = *resp;
        h.lease_id = resp->lease_id();
        h.lease_request_id = r->request_id();
      }
      break;
    }
    case lathe::fuzz::Call::kReport: {
      v1::ReportRequest* r = call.mutable_report();
      FillWorker(r, h);
      Fill(r->mutable_lease_id(), h.lease_id);
      if (call.answer_leased()) {
        v1::MeasureResult model;
        if (r->results_size() > 0) {
          model = r->results(0);
        } else {
          model.set_median_us(call.median_us());
          model.add_repeats_us(call.median_us());
        }
        r->clear_results();
        for (const v1::Task& t : h.lease.tasks()) {
          *r->add_results() = model;
          r->mutable_results()->rbegin()->set_candidate_id(t.candidate_id());
          if (r->device_class().empty()) r->set_device_class(t.device_class());
        }
      }
      (void)s.Report(*r);
      break;
    }
    case lathe::fuzz::Call::kHeartbeat: {
      v1::HeartbeatRequest* r = call.mutable_heartbeat();
      FillWorker(r, h);
      for (std::string& id : *r->mutable_lease_ids()) Fill(&id, h.lease_id);
      (void)s.Heartbeat(*r);
      break;
    }
    case lathe::fuzz::Call::kRelease: {
      v1::ReleaseRequest* r = call.mutable_release();
      FillWorker(r, h);
      Fill(r->mutable_lease_id(), h.lease_id);
      Fill(r->mutable_lease_request_id(), h.lease_request_id);
      (void)s.Release(*r);
      break;
    }
    case lathe::fuzz::Call::RPC_NOT_SET:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lathe::fuzz::Session session;
  if (!session.ParseFromArray(data, static_cast<int>(size))) return 0;
  // Sessions longer than this say nothing more and only slow the fuzzer down.
  if (session.calls_size() > 64) return 0;
  const std::string path = lathe::fuzz::ScratchDir() + "/tuning.db";
  lathe::fuzz::RemoveDatabase(path);
  {
    absl::StatusOr<std::unique_ptr<lathe::daemon::TunerService>> service =
        lathe::daemon::TunerService::Create(Options(path));
    if (!service.ok()) {
      std::fprintf(stderr, "cannot start the service: %s\n", service.status().ToString().c_str());
      std::abort();
    }
    Handed handed;
    for (const lathe::fuzz::Call& call : session.calls()) Call(**service, call, handed);
    (*service)->Shutdown();
  }
  lathe::fuzz::RemoveDatabase(path);
  return 0;
}
