// \file
// The inside of the measurement worker (worker_loop.h): Worker::Impl and the helpers its parts
// share. Its code is split by thread:
// - worker_loop.cc: Create/Run/Stop, registration, and the heartbeat thread;
// - worker_lease.cc: the lease thread of a device (FetchLoop) and the Lease/Release calls;
// - worker_measure.cc: a device's measuring thread (the serial and pipelined device loops);
// - worker_report.cc: the report thread (ReportLoop) and Report calls, split when too large;
// - worker_spool.cc: results kept in the spool, and their re-sending.
// Internal to lathe::worker; nothing outside worker/ includes it.
//
// Thread-safety: as Worker's (worker_loop.h); `mu_` guards the state below it, `cv_` announces
// every change of it.
#ifndef LATHE_WORKER_WORKER_IMPL_H_
#define LATHE_WORKER_WORKER_IMPL_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lathe/v1/service.grpc.pb.h"
#include "measure/measurer.h"
#include "worker/spool.h"
#include "worker/worker_loop.h"

namespace lathe::worker {
namespace internal {

inline bool IsAuthError(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

// The daemon does not know this worker or lease: it restarted and lost its registrations.
inline bool IsUnknownWorker(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND ||
         s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
}

// The daemon refused the batch itself (it will refuse it again): sending it later is futile.
// After SendReport, RESOURCE_EXHAUSTED means a single result larger than the daemon takes.
inline bool IsPermanent(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
         s.error_code() == grpc::StatusCode::OUT_OF_RANGE ||
         s.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// The status as one line: its code's name and message.
inline std::string Describe(const grpc::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

// Exponential backoff with jitter: the n-th delay is drawn from [d/2, d], d = min * 2^n
// capped at max.
class Backoff {
 public:
  Backoff(int min_ms, int max_ms) : min_ms_(min_ms), max_ms_(max_ms), next_ms_(min_ms) {}
  int Next() {
    int d = next_ms_;
    next_ms_ = std::min(max_ms_, next_ms_ * 2);
    std::uniform_int_distribution<int> jitter(d / 2, d);
    return jitter(rng_);
  }
  void Reset() { next_ms_ = min_ms_; }

 private:
  int min_ms_, max_ms_, next_ms_;
  std::mt19937 rng_{std::random_device{}()};
};

// The tasks of `lease` whose results `batch` holds: with them, a daemon that restarted since
// the lease can still store the results.
void AttachTasks(lathe::v1::ReportRequest& batch, const lathe::v1::LeaseResponse& lease);

}  // namespace internal

class Worker::Impl {
 public:
  explicit Impl(WorkerOptions options) : opt_(std::move(options)) {}

  absl::Status Init();
  absl::Status Run();
  void Stop();
  WorkerStats stats() const;
  std::string worker_id() const;
  std::string worker_secret() const;

 private:
  // One measurement child per device that can measure (null for the others); a GPU's child is
  // told its ordinal.
  absl::Status StartMeasurers();
  void LogDevices() const;
  absl::Status fatal_status() const;
  absl::Status Finish(absl::Status st);
  std::unique_ptr<grpc::ClientContext> Context(int timeout_ms) const;

  // Sleeps `ms` unless stopping; true when stopping.
  bool SleepOrStop(int ms);
  bool stopping() const;
  void Fatal(absl::Status st);
  absl::Status RefusedToken(const grpc::Status& s, const char* call);
  void MarkUnregistered();

  // Registers (again) unless registered; retries with backoff until it works, the token is
  // refused (fatal) or the worker stops (Cancelled).
  absl::Status EnsureRegistered();

  // This worker and its devices; `previous`: the id (and secret) it had, kept when the
  // daemon still knows it.
  lathe::v1::RegisterRequest RegisterRequestOf(const std::string& previous,
                                               const std::string& previous_secret) const;
  void Registered(const lathe::v1::RegisterResponse& resp);

  // Leases tasks for device `i` and serves each lease, until stopped, fatal, or --max-tasks
  // tasks were leased: pipelined (lease_ahead > 0) or one lease at a time.
  void DeviceLoop(size_t i);

  // Lease, measure, report, in turn.
  void SerialDeviceLoop(size_t i);

  // One Lease call for `dc` with its failure handling; an empty lease when the call failed or
  // brought nothing (try again), nullopt when the loop should end (stopping, fatal, or
  // --max-tasks tasks leased).
  std::optional<lathe::v1::LeaseResponse> NextLease(const std::string& dc,
                                                    internal::Backoff& backoff, int& failures);

  // The pipeline of one device (under mu_; cv_ announces every change): leases taken ahead and
  // not started, and measured batches waiting for their Report.
  struct Pipeline {
    std::deque<lathe::v1::LeaseResponse> leases;
    bool fetching_done = false;
    std::deque<std::pair<lathe::v1::ReportRequest, lathe::v1::LeaseResponse>> reports;
    bool measuring_done = false;
  };

  // Three threads per device: one leases up to lease_ahead leases ahead of the one being
  // measured, this one measures them in order, one reports the measured batches (at most
  // report_depth waiting; the measurer waits beyond that). Stopping: the lease being measured
  // finishes its task and hands back the rest, every lease taken ahead is handed back whole,
  // and the batches measured are reported (or spooled) before the loop returns.
  void PipelinedDeviceLoop(size_t i);

  // Leases for `dc` whenever fewer than lease_ahead leases wait to be measured.
  void FetchLoop(const std::string& dc, Pipeline& p);

  // Reports the measured batches in order; ends once the measuring ended and all are sent.
  void ReportLoop(Pipeline& p);

  // How many tasks to ask for next: the lease batch, fewer near --max-tasks; 0 once
  // --max-tasks tasks were leased.
  int TasksToLease() const;
  lathe::v1::LeaseRequest LeaseRequestFor(const std::string& device_class, int want);

  // One Lease call (a long poll that Stop() cancels); nullopt when stopping before it began.
  std::optional<grpc::Status> CallLease(const lathe::v1::LeaseRequest& req,
                                        lathe::v1::LeaseResponse* lease);

  // After a failed Lease call `req`: hands back a lease granted to a call given up on,
  // registers again when the daemon forgot this worker, else waits out the backoff. False
  // when the device loop should end (stopping, or the token was refused).
  bool LeaseFailed(const grpc::Status& s, const lathe::v1::LeaseRequest& req,
                   internal::Backoff& backoff, int& failures);

  // Measures the tasks of `lease` one after another and delivers their results; the tasks not
  // started (stopping, or the sandbox failed) are handed back.
  void ServeLease(const Device& dev, measure::Measurer& measurer,
                  const lathe::v1::LeaseResponse& lease);

  // Measures the tasks of `lease` one after another; the tasks not started (stopping, or the
  // sandbox failed) are handed back. Returns the results, to be delivered.
  lathe::v1::ReportRequest MeasureLease(const std::string& dc, measure::Measurer& measurer,
                                        const lathe::v1::LeaseResponse& lease);

  // Hands the tasks of `lease` from index `from` on (not started: stopping, or the sandbox
  // failed) back to the daemon, so that they are leased again at once rather than when the
  // lease expires. Best effort: when it fails they still return at expiry.
  void ReleaseRest(const lathe::v1::LeaseResponse& lease, int from);

  // A fresh LeaseRequest.request_id.
  std::string NewRequestId();

  // Releases whatever lease the daemon granted to the Lease call `request_id` whose answer
  // never arrived; the daemon also makes that call take nothing if it is still waiting. Best
  // effort: when it fails, such a lease's tasks return to the queue when it expires.
  void ReleaseUnseen(const std::string& worker_id, const std::string& secret,
                     const std::string& request_id);

  // Sends one Report, or several when `batch` is over kMaxReportBytes or the daemon refuses it
  // as too large (RESOURCE_EXHAUSTED): halves, down to single results, each with the tasks of
  // its results. The answers add up in `resp`; the first failure ends it (a resend is
  // harmless: Report is idempotent by candidate id).
  grpc::Status SendReport(const lathe::v1::ReportRequest& batch, lathe::v1::ReportResponse* resp);

  // Reports one lease's results; a few quick retries, then the spool.
  // The first attempt sends the results alone; a retry, a resend after the daemon rejected
  // some (it restarted since the lease) and the spool carry the lease's tasks too.
  void Deliver(lathe::v1::ReportRequest batch, const lathe::v1::LeaseResponse& lease);
  void Reported(const lathe::v1::ReportRequest& batch, const lathe::v1::ReportResponse& resp);

  // Keeps a batch that could not be reported (the last failure: `s`) in the spool, with its
  // tasks, until the tuner is back; without a spool, or when writing it fails, the results are
  // lost, saying so.
  void SpoolOrDrop(lathe::v1::ReportRequest batch, const lathe::v1::LeaseResponse& lease,
                   const grpc::Status& s);

  // Re-sends the spooled batches; keeps them all when one fails (resending is harmless).
  void FlushSpool();

  // Extends active leases, notices a restarted daemon, and drains the spool when the daemon
  // answers. Runs until the device loops are done, through a graceful stop's drain.
  void HeartbeatLoop();

  // One heartbeat: registers when unregistered, else extends the active leases, notices a
  // daemon that forgot this worker, and drains the spool when the daemon answers.
  void Heartbeat(bool& was_down);

  WorkerOptions opt_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<lathe::v1::WorkerService::Stub> stub_;
  std::unique_ptr<Spool> spool_;
  std::vector<std::unique_ptr<measure::Measurer>> measurers_;  // per device; null: cannot measure

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool done_ = false;  // the device loops have ended
  bool registered_ = false;
  std::string worker_id_;
  std::string worker_secret_;  // RegisterResponse.worker_secret: every call of this id carries it
  int heartbeat_ms_ = 5000;
  int64_t tasks_leased_ = 0;
  int measuring_ = 0;  // pipelined devices measuring a lease now
  std::set<std::string> active_leases_;
  std::set<grpc::ClientContext*> polls_;  // Lease calls in flight, cancelled by Stop()
  std::mt19937_64 request_rng_{std::random_device{}()};  // LeaseRequest.request_id
  absl::Status fatal_;
  WorkerStats stats_;

  std::mutex register_mu_;  // one registration at a time
  std::mutex flush_mu_;     // one spool flush at a time
};

}  // namespace lathe::worker

#endif  // LATHE_WORKER_WORKER_IMPL_H_
