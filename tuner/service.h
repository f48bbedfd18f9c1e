// \file
// The job/worker service behind lathed (DESIGN.md "Workers pull", "The database keeps
// everything"), free of gRPC: the gRPC layer (tuner/grpc_server.h) calls these methods and
// converts their absl::Status.
//
// Jobs. SubmitJob validates the spec, persists it (db job, spec_json = the JobSpec as JSON,
// workloads canonicalised and device class filled in, plus "baselineMeasured": per workload,
// the traces the database already held for it when the job was created) and starts one search
// thread for the job. Per workload the thread keeps a SearchSpace, the measured set (database
// traces of the workload on the job's device class, plus the candidates it has dispatched) and
// runs rounds of NextBatch whose candidates become queued Tasks. A round starts when fewer
// than half a batch of the workload's tasks are outstanding, so workers never idle between
// rounds. trials_done of a workload = traces stored for it now minus its baseline, so a
// restarted daemon resumes every QUEUED or RUNNING job exactly where its commits stopped and
// never dispatches a stored trace again. One cost model per job (its device class's), fed
// with every reported result, retrained by the model itself when its data grew >= 20 %, and
// saved to the database after each retraining.
//
// Device class of a job: JobSpec.device_class when set. Otherwise, for target "cpu" (or
// empty): the CPU class of the registered, not lost workers when they all share one; the
// daemon host's CPU class when none is registered; InvalidArgument naming the classes when
// they differ. For "cuda[:N]" a device class is required (there is no GPU search space yet).
//
// Workers. Register returns an id, the heartbeat interval and the lease duration. Lease hands
// out queued tasks of the requested device class (long poll up to wait_ms), records a lease
// with a deadline and touches no database. Heartbeat extends the listed leases. A reaper
// thread returns the unreported tasks of expired leases to the front of their queue and marks
// workers unseen for 3 heartbeat intervals "lost". Report stores all its results in one
// transaction and answers only after the commit; a candidate id already stored counts as a
// duplicate. A result for an expired or unknown lease is still stored when its candidate is
// known to the daemon (results are never thrown away); a result for a candidate this daemon
// never dispatched (e.g. dispatched before a restart) cannot be stored (the trace is not in
// the result) and is counted as neither accepted nor duplicate, unless already stored.
//
// Thread-safety: every public method may be called from any thread. One mutex guards all
// in-memory state; condition variables wake long-polling Lease calls (work queued), job
// threads (results reported, cancel) and WatchJob waiters (a job changed). Database work runs
// outside the mutex: Report inserts on the service's connection, each job thread uses its own.
#ifndef LATHE_TUNER_SERVICE_H_
#define LATHE_TUNER_SERVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"
#include "tuner/search.h"

namespace lathe::tuner {

class Metrics;

struct ServiceOptions {
  std::string db_path;                // required; created when missing
  int heartbeat_interval_ms = 10000;  // told to workers
  int lease_duration_ms = 120000;     // a lease's life without a heartbeat
  int lost_after_heartbeats = 3;      // unseen this many intervals: "lost"
  int max_tasks_per_lease = 1024;     // larger max_tasks is InvalidArgument
  int max_wait_ms = 60000;            // larger wait_ms is InvalidArgument
  int reaper_interval_ms = 200;       // how often expiries are checked
  SearchOptions search;               // the evolutionary search of every job
  int seed_records = 16;              // best records that seed each round
  bool use_cost_model = true;
  Metrics* metrics = nullptr;  // not owned; may be null
};

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

  // --- workers ---
  absl::StatusOr<lathe::v1::RegisterResponse> Register(const lathe::v1::RegisterRequest& req);
  // An empty lease (no lease id, no tasks) when nothing was queued within wait_ms. NotFound
  // for an unknown worker id (the worker should register again).
  absl::StatusOr<lathe::v1::LeaseResponse> Lease(const lathe::v1::LeaseRequest& req);
  absl::StatusOr<lathe::v1::ReportResponse> Report(const lathe::v1::ReportRequest& req);
  absl::StatusOr<lathe::v1::HeartbeatResponse> Heartbeat(const lathe::v1::HeartbeatRequest& req);

  // Tasks queued (not leased) over all device classes; for tests and metrics.
  int64_t QueueDepth();

  struct State;

 private:
  explicit TunerService(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_SERVICE_H_
