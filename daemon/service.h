// \file
// The job/worker service behind lathed (DESIGN.md "Workers pull", "The database keeps
// everything"), free of gRPC: the gRPC layer (daemon/grpc_server.h) calls these methods and
// converts their absl::Status. It joins two parts: the job runner (daemon/job_runner.h: jobs,
// their progress and one search thread per job) and the lease registry
// (daemon/lease_registry.h: workers, queues, leases, expiry), each with its own lock; this file
// adds job submission, resumption, queries and the intake of reports.
//
// Jobs. SubmitJob validates the spec, persists it (db job, spec_json = the JobSpec as JSON,
// workloads canonicalised and device class filled in, plus "baselineMeasured": per workload,
// the traces the database already held for it when the job was created) and starts the job's
// search thread. Create resumes every QUEUED or RUNNING job of the database.
//
// Device class of a job (and of a query) without one: JobSpec.device_class when set.
// Otherwise, for target "cpu" (or empty): the daemon host's CPU class when no live worker
// registered a CPU class or one of them registered the host's; else the CPU class of the
// longest-standing live registration (the worker registered first and still seen). A worker
// registered later never changes the default, so registrations no one asked for cannot make
// it ambiguous nor take it over from the fleet already there; a job for another class names
// it. For "cuda[:N]": the GPU class of the longest-standing live GPU worker; InvalidArgument
// when none is registered.
//
// Workers: Register, Lease, Heartbeat and Release are the registry's (memory only; they never
// wait on a search round or a database transaction); a worker id is bound to its registration
// by a secret every call carries (lease_registry.h). Report needs that secret too (NotFound
// "register again" otherwise), and a result for a candidate the daemon holds counts only from
// the worker it was leased to, under the lease the report names (now or before that lease
// expired); one for a candidate held under another worker's lease is rejected (or a duplicate
// when already stored). Report stores all its results in one
// transaction (concurrent reports share one commit: db group commit) and answers only after
// the commit; a candidate id already stored counts as a
// duplicate. A result for an expired or unknown lease is still stored when its candidate is
// known to the daemon (results are never thrown away). A result for a candidate this daemon
// does not hold (dispatched before a restart, kept in a worker's spool) is stored when the
// request carries its task (ReportRequest.tasks), the task's job is known here (running or
// ended) on the task's device class with the task's workload, and the candidate id is the one
// its trace gives; it then counts towards that job's progress (while the job runs and is short
// of its target) and the search never proposes it again. Otherwise it is counted as rejected
// (ReportResponse.rejected; logged with the reason), unless already stored.
//
// A result for a re-timing task (Task.remeasure; see job_runner.h) adds its repeats to the
// stored record (db AddRepeats: median recomputed, remeasured_at set) when the lease named in
// the report still holds the task, and counts as accepted; it is never a trial. A result that
// is not ok, or repeats the database refuses, leave the record as it was (logged, counted as
// a failed re-timing). A retried, late (lease expired) or restored report of a re-timing adds
// nothing: its candidate is already stored, so it counts as a duplicate.
//
// A workload never counts more trials than its target: the resumed job dispatches its missing
// trials before the spooled results of a worker arrive, so a spooled result that counts
// withdraws one of the job's queued tasks, and results past the target (tasks leased before
// it was reached) are stored without counting.
//
// Thread-safety: every public method may be called from any thread.
#ifndef LATHE_DAEMON_SERVICE_H_
#define LATHE_DAEMON_SERVICE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"
#include "tuner/driver.h"
#include "tuner/search.h"

namespace lathe::daemon {

class Metrics;

struct ServiceOptions {
  std::string db_path;                // required; created when missing
  int heartbeat_interval_ms = 10000;  // told to workers
  int lease_duration_ms = 120000;     // a lease's life without a heartbeat
  int lost_after_heartbeats = 3;      // unseen this many intervals: "lost"
  int max_tasks_per_lease = 1024;     // larger max_tasks is InvalidArgument
  int64_t max_lease_bytes = 3 << 20;  // a lease stops taking tasks here (one always goes)
  int max_wait_ms = 60000;            // larger wait_ms is InvalidArgument
  int reaper_interval_ms = 200;       // how often expiries are checked
  // The evolutionary search of every job; threads: the search threads all jobs share, i.e. the
  // rounds searched at once over every task and job (0: every core; job_runner.h).
  tuner::SearchOptions search;
  int seed_records = 16;  // best records that seed each round
  // Lost workers are forgotten after this; at most max_workers are registered at once.
  int forget_lost_after_ms = 15 * 60 * 1000;
  int max_workers = 1024;
  bool use_cost_model = true;
  // Nice value (0..19) of the job threads and the search's threads: the search yields the CPU
  // to the threads that answer workers and clients.
  int search_nice = 10;
  // At the end of a job, each workload's best this-many ok records never re-timed are timed
  // again for remeasure_factor x the job's min_repeat_ms (job_runner.h). 0: off.
  int remeasure_top = 5;
  double remeasure_factor = 5;
  Metrics* metrics = nullptr;  // not owned; may be null
  // The jobs' search threads (job_runner.h); null: the service's own, search.threads of them.
  // Not owned; must outlive the service.
  tuner::SearchPool* search_pool = nullptr;
};

// The search threads lathed uses by default: every usable core (at least 1). They run niced
// (search_nice), so a search round still leaves the threads that answer workers their turn.
int DefaultSearchThreads();

class TunerService {
 public:
  // Opens the database, resumes its QUEUED and RUNNING jobs and starts the reaper.
  static absl::StatusOr<std::unique_ptr<TunerService>> Create(const ServiceOptions& options);
  // Shutdown(), then closes the database.
  ~TunerService();
  TunerService(const TunerService&) = delete;
  TunerService& operator=(const TunerService&) = delete;

  // Wakes every waiting Lease and WatchJob call so that they answer at once; new waits return
  // immediately. Call before stopping the RPC server.
  void BeginShutdown();
  // BeginShutdown(), then stops and joins the job threads and the reaper. Jobs stay RUNNING in
  // the database and resume on the next start. Idempotent.
  void Shutdown();

  // --- clients ---
  absl::StatusOr<lathe::v1::SubmitJobResponse> SubmitJob(const lathe::v1::SubmitJobRequest& req);
  // NotFound for an unknown job id.
  absl::StatusOr<lathe::v1::JobStatus> GetJob(const std::string& job_id);
  // Waits until the job's status version exceeds `*version` or `timeout_ms` passes or the
  // service shuts down, then returns its status and sets `*version` to its current version.
  // The first call passes *version = 0 and returns at once.
  absl::StatusOr<lathe::v1::JobStatus> WatchJob(const std::string& job_id, uint64_t* version,
                                                int timeout_ms);
  absl::StatusOr<lathe::v1::CancelJobResponse> CancelJob(const lathe::v1::CancelJobRequest& req);
  absl::StatusOr<lathe::v1::ListJobsResponse> ListJobs(const lathe::v1::ListJobsRequest& req);
  absl::StatusOr<lathe::v1::ListWorkersResponse> ListWorkers(
      const lathe::v1::ListWorkersRequest& req);
  // InvalidArgument for a malformed workload; a miss is found=false with an explanation.
  absl::StatusOr<lathe::v1::QueryBestResponse> QueryBest(const lathe::v1::QueryBestRequest& req);
  // QueryBest of each query, in order; InvalidArgument naming the index of a malformed
  // workload, or for more than kMaxQueryBestMany queries.
  absl::StatusOr<lathe::v1::QueryBestManyResponse> QueryBestMany(
      const lathe::v1::QueryBestManyRequest& req);
  static constexpr int kMaxQueryBestMany = 10000;

  // --- workers ---
  absl::StatusOr<lathe::v1::RegisterResponse> Register(const lathe::v1::RegisterRequest& req);
  // An empty lease (no lease id, no tasks) when nothing was queued within wait_ms. NotFound
  // for an unknown worker id (the worker should register again).
  // `cancelled` (optional) tells whether the caller went away: a long poll then ends
  // Cancelled without taking tasks.
  absl::StatusOr<lathe::v1::LeaseResponse> Lease(const lathe::v1::LeaseRequest& req,
                                                 const std::function<bool()>& cancelled = {});
  // Lease without holding the calling thread while it waits (the gRPC server's callback
  // handler): `done` receives the answer once, at once or from the thread that ends the long
  // poll, never under the service's locks, and must not block. Returns the id of a waiting
  // call for CancelLease (0: answered already). See LeaseRegistry::StartLease.
  using LeaseDone = std::function<void(absl::StatusOr<lathe::v1::LeaseResponse>)>;
  uint64_t StartLease(const lathe::v1::LeaseRequest& req, LeaseDone done);
  // Ends a waiting call of StartLease with Cancelled; nothing when it was answered already.
  void CancelLease(uint64_t wait_id);
  absl::StatusOr<lathe::v1::ReportResponse> Report(const lathe::v1::ReportRequest& req);
  absl::StatusOr<lathe::v1::HeartbeatResponse> Heartbeat(const lathe::v1::HeartbeatRequest& req);
  // Hands back the listed (or all) unreported tasks of a lease to the front of their queue.
  // An unknown lease (expired, fully reported) releases nothing; PermissionDenied for a lease
  // of another worker. By lease_request_id: the lease granted to that Lease call of the
  // worker, or, when none was granted yet, that call takes nothing (lease_registry.h).
  absl::StatusOr<lathe::v1::ReleaseResponse> Release(const lathe::v1::ReleaseRequest& req);

  // Tasks queued (not leased) over all device classes; for tests and metrics.
  int64_t QueueDepth();
  // Lease calls waiting for tasks (long polls); for tests.
  int64_t WaitingLeases();

  struct State;

 private:
  explicit TunerService(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_SERVICE_H_
