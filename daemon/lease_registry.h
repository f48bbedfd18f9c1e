// \file
// The worker side of lathed (DESIGN.md "Workers pull"): registered workers, the queue of
// candidates per device class, and leases. Free of gRPC and of the database: Lease, Heartbeat
// and Release touch memory only, and the registry's mutex is never held across a search round,
// a database transaction or a call into the job runner, so a worker's call never waits on
// either (the job runner calls in here, never the other way round).
//
// Register returns an id, the heartbeat interval and the lease duration. Lease hands out
// queued tasks of the requested device class (a long poll up to wait_ms; at most max_tasks and
// max_lease_bytes, the rest stays at the front of the queue) and records a lease with a
// deadline. A waiting long poll is an entry of the registry, not a thread (StartLease): tasks
// queued go to the waiting calls of their class at once, the oldest first. Heartbeat extends
// the listed leases. Release hands back a lease's tasks that were not measured (a worker
// stopping) to the front of their queue at once. A Lease
// call may carry a worker-chosen request id: a worker that gave up on the call before its
// answer arrived releases by that id the lease the call was granted, or, when the call has
// not been answered yet, makes it take nothing (the id is remembered for max_wait_ms plus a
// lease duration, at most 65536 ids). A reaper
// thread returns the unreported tasks of expired leases the same way, marks workers unseen
// for `lost_after_heartbeats` intervals "lost" and forgets workers lost for
// `forget_lost_after_ms` (a worker that comes back is told to register again).
//
// A worker id belongs to the worker that registered it: Register hands out a random secret
// (RegisterResponse.worker_secret) that every Lease, Heartbeat, Release and Report of that id
// must carry (NotFound "register again" otherwise; a Heartbeat answers reregister), and a
// re-registration of a known id without its secret is AlreadyExists. An id the registry does
// not know (it restarted, or forgot a lost worker) is registered anew with a new secret.
// Registration strings are bounded: hostname 1..255 bytes, device class 1..256, device name
// and kind up to 256, version up to 64, all of them together up to 2 KiB, no control
// characters (InvalidArgument); worker ids up to 64 of [A-Za-z0-9._-]; at most `max_workers`
// workers (ResourceExhausted): ListWorkers stays a few MiB at worst. Strings from
// requests are escaped in the log (daemon/log_text.h).
//
// Thread-safety: every method may be called from any thread.
#ifndef LATHE_DAEMON_LEASE_REGISTRY_H_
#define LATHE_DAEMON_LEASE_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/target.h"
#include "lathe/v1/service.pb.h"

namespace lathe::daemon {

class Metrics;

struct LeaseRegistryOptions {
  int heartbeat_interval_ms = 10000;
  int lease_duration_ms = 120000;
  int lost_after_heartbeats = 3;
  int max_tasks_per_lease = 1024;
  // A lease response stops taking tasks before it would pass this many bytes (one task always
  // goes): under the 4 MiB that gRPC clients receive by default, however large the traces.
  int64_t max_lease_bytes = 3 << 20;
  int max_wait_ms = 60000;
  int reaper_interval_ms = 200;
  int forget_lost_after_ms = 15 * 60 * 1000;  // a lost worker is forgotten after this
  int max_workers = 1024;                     // registered at once (lost ones included)
  Metrics* metrics = nullptr;                 // not owned; may be null
};

// Who answers a lease: the worker and the lease id of a report.
struct LeaseHolder {
  std::string worker_id;
  std::string lease_id;
};

// A dispatched candidate and the index of its workload in its job.
struct DispatchedTask {
  lathe::v1::Task task;  // what a worker is sent: the trace as a message, the workload once
  int workload = 0;
  // The trace as its record stores it (made by the search beside the candidate); empty:
  // derived from the task's request when its result is stored.
  std::string trace_json;
};
// A task as the registry holds it: shared, never changed once queued, so that finding it
// for a report copies a pointer rather than the request.
using HeldTask = std::shared_ptr<const DispatchedTask>;

class LeaseRegistry {
 public:
  explicit LeaseRegistry(const LeaseRegistryOptions& options);
  // Stop().
  ~LeaseRegistry();
  LeaseRegistry(const LeaseRegistry&) = delete;
  LeaseRegistry& operator=(const LeaseRegistry&) = delete;

  // Starts the reaper thread.
  void Start();
  // Wakes every long-polling Lease so that it answers at once; later ones do not wait.
  void BeginShutdown();
  // BeginShutdown(), then joins the reaper. Idempotent.
  void Stop();

  // --- workers (the WorkerService calls; see service.h) ---
  absl::StatusOr<lathe::v1::RegisterResponse> Register(const lathe::v1::RegisterRequest& req);
  // The answer of a Lease call started by StartLease.
  using LeaseDone = std::function<void(absl::StatusOr<lathe::v1::LeaseResponse>)>;
  // Lease without holding the calling thread while it waits. `done` receives the answer
  // exactly once: on this thread before StartLease returns when tasks are queued, wait_ms is 0,
  // the request fails or the registry is stopping; else on the thread that ends the long poll
  // (the one that queues or hands back tasks: the job runner, a worker's Release; the reaper's
  // when wait_ms passes, with an empty lease; a Release of the call's request id, Cancelled;
  // BeginShutdown's, empty; CancelLease's). `done` never runs under the registry's lock and
  // must not block. Waiting calls of a device class are served oldest first. Returns the id of
  // the waiting call for CancelLease, or 0 when it was answered at once.
  uint64_t StartLease(const lathe::v1::LeaseRequest& req, LeaseDone done);
  // Ends the waiting call `wait_id` with Cancelled (its `done` runs on this thread), so that a
  // caller gone away takes no task; nothing when it was answered already (or for 0).
  void CancelLease(uint64_t wait_id);
  // StartLease, waiting for its answer on this thread. `cancelled`, when given, is polled every
  // second while the long poll waits and once more at its answer: a caller gone away (a worker
  // stopping mid-call) is answered Cancelled, and tasks granted as it went are handed back.
  absl::StatusOr<lathe::v1::LeaseResponse> Lease(const lathe::v1::LeaseRequest& req,
                                                 const std::function<bool()>& cancelled = {});
  absl::StatusOr<lathe::v1::HeartbeatResponse> Heartbeat(const lathe::v1::HeartbeatRequest& req);
  absl::StatusOr<lathe::v1::ReleaseResponse> Release(const lathe::v1::ReleaseRequest& req);

  // --- the job runner ---
  // Queues `tasks` (all of one job, workload index `workload`) at the back of their device
  // class's queue. A candidate id the registry already holds is skipped (another job
  // dispatched it), and so is one completed recently (the last 65536; its result is stored:
  // two jobs of one workload may pick a candidate in the same instant) unless the task is a
  // re-timing (Task.remeasure). Returns how many were queued; the ids of those skipped are
  // appended to `skipped` when given. `trace_json`, when it holds one entry per task, are
  // their traces' stored forms (DispatchedTask::trace_json).
  int Enqueue(int workload, std::vector<lathe::v1::Task> tasks,
              std::vector<std::string>* skipped = nullptr,
              std::vector<std::string> trace_json = {});
  // Forgets the queued tasks of a job; its leased tasks stay (their results are still stored).
  void DropQueued(const std::string& job_id);
  // Forgets up to `n` queued (not leased) tasks of workload index `workload` of job `job_id`,
  // the most recently queued first; returns their candidate ids. Leased tasks and re-timings
  // (Task.remeasure) are never withdrawn.
  std::vector<std::string> Withdraw(const std::string& job_id, int workload, int n);

  // --- Report ---
  // Checks the worker's secret, marks it seen and returns how results of it are attributed:
  // "<id>@<hostname>". NotFound ("register again") for an unknown id or a wrong secret.
  absl::StatusOr<std::string> AuthorizeReport(const std::string& worker_id,
                                              const std::string& secret);
  // The tasks of `candidate_ids` that the registry holds (queued or leased; null where it
  // holds none). With
  // `holder` and `foreign`, marks in `foreign` the tasks held but not granted to that worker
  // under that lease (now, or before the lease expired and the task went back to the queue):
  // a report that does not answer their lease.
  std::vector<HeldTask> Find(const std::vector<std::string>& candidate_ids,
                             const LeaseHolder* holder = nullptr,
                             std::vector<bool>* foreign = nullptr);
  // Removes the task of each id (and from its lease); returns it where it was still present,
  // so that of two concurrent reports of one candidate exactly one accounts for it. With
  // `only_lease`, a task is removed only while that lease holds it (a re-timing's result
  // counts only from the worker that holds it: not from a late or retried report).
  std::vector<HeldTask> Complete(const std::vector<std::string>& candidate_ids,
                                 const std::optional<std::string>& only_lease = std::nullopt);
  // Adds to the "measured" count of a worker shown by ListWorkers.
  void AddMeasured(const std::string& worker_id, int64_t n);

  // --- queries ---
  int64_t Queued();
  // Lease calls waiting for tasks (long polls).
  int64_t Waiting();
  // Tasks of workload index `workload` of job `job_id` waiting in a queue (not leased); of
  // every workload of the job when `workload` < 0.
  int QueuedOf(const std::string& job_id, int workload = -1);
  // Every registered worker: its state, results reported and current leases (tasks not
  // reported yet, the soonest deadline, their jobs).
  lathe::v1::ListWorkersResponse ListWorkers();
  // The device classes of registered, not lost workers of one kind (cpu:..., a real GPU's
  // cuda:... or the emulator's cuda-emu:sm_XX), each once, in the order their workers first
  // registered (the longest-standing registration first).
  std::vector<std::string> DeviceClasses(ir::TargetKind kind);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_LEASE_REGISTRY_H_
