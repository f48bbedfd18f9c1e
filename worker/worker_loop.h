// \file
// The measurement worker (`lathe-worker`): registers this machine's devices with the lathed
// daemon, then for each device pulls leases of tasks (a long poll), measures each task in
// the sandboxed child (measure/measurer.h, one Measurer per device, one task at a time) and
// reports the lease's results in one batch. DESIGN.md "Workers pull": the worker needs no
// inbound port; it only dials the daemon.
//
// - Pipelined (lease_ahead > 0, the default): while a device measures one lease, the worker
//   already holds its next (lease_ahead leases at most, asked for as soon as the measuring
//   starts), and the measured batches are reported by a thread of their own (report_depth
//   batches waiting at most; measuring waits beyond that), so that neither the Lease round trip
//   nor the Report's keeps the device idle. Leases taken ahead are extended by the heartbeat
//   like the one measured. lease_ahead = 0: lease, measure, report in turn.
// - Every call carries a deadline; the channel has keepalive pings and fast reconnects.
// - A heartbeat thread extends the leases being worked on every heartbeat_interval_ms and
//   registers again when the daemon no longer knows the worker (it restarted). A Lease or
//   Report answered NOT_FOUND or FAILED_PRECONDITION also triggers a re-registration.
// - An unreachable daemon is retried with exponential backoff and jitter (100 ms .. 10 s).
// - Results that cannot be reported go to the spool (worker/spool.h) and are re-sent when
//   the daemon answers again; Report is idempotent by candidate id, so resending is safe.
// - The daemon refusing the token (UNAUTHENTICATED, PERMISSION_DENIED) is fatal: retrying
//   cannot help, so Run() returns that error.
// - Stop() is graceful: no new lease, the task being measured is finished and its lease's
//   results are reported (or spooled); the lease's tasks not yet started, and every lease taken
//   ahead, are handed back with Release at once (they return to the queue only at lease expiry if
//   that call fails). Every Lease call carries a random request id: when Stop() cancels the call
//   (or its deadline passes) before its answer arrives, the worker releases by that id whatever
//   lease the daemon granted it, so those tasks need not wait for the lease to expire either.
// - A report over 3 MiB, or one the daemon refuses as too large (RESOURCE_EXHAUSTED; lathed
//   takes 4 MiB), is sent in parts: halves, down to single results, each with its tasks.
// - A report that fails or that the daemon partly rejects (it restarted since the lease and
//   no longer holds the candidates) is re-sent with the lease's tasks, and spooled batches
//   carry them too, so a restarted daemon can still store the results of its resumed jobs.
// - Every device measures through its own measurement child (a GPU's is told its ordinal);
//   a device that cannot measure (a GPU whose driver is gone) is registered but never
//   leased for, and the worker logs that once.
//
// Thread-safety: Run() once, from one thread; Stop() and stats() from any thread.
#ifndef LATHE_WORKER_WORKER_LOOP_H_
#define LATHE_WORKER_WORKER_LOOP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "measure/measurer.h"
#include "worker/discovery.h"

namespace lathe::worker {

struct WorkerOptions {
  std::string tuner;       // the daemon, HOST:PORT
  std::string token;       // sent as `authorization: Bearer <token>`; empty: none
  std::string tls_ca_pem;  // PEM root certificates: TLS to the daemon; empty: plaintext
  // PEM certificate chain and key presented to a daemon that requires client certificates
  // (mTLS, lathed --tls-client-ca); both or neither, and only with tls_ca_pem.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::vector<Device> devices;
  int64_t max_tasks = 0;       // return from Run() after this many tasks were measured (0: never)
  int lease_batch = 4;         // tasks asked for per lease
  int lease_ahead = 1;         // leases held ahead of the one measured (0: no pipelining)
  int report_depth = 2;        // measured batches waiting for their Report, at most
  int lease_wait_ms = 2000;    // long poll of one Lease
  int rpc_timeout_ms = 10000;  // deadline of a call, on top of the long poll for Lease
  int backoff_min_ms = 100;
  int backoff_max_ms = 10000;
  std::string spool_dir;  // empty: no spool (results that cannot be reported are lost)
  std::string hostname;   // empty: gethostname()
  measure::MeasurerOptions measurer;
};

struct WorkerStats {
  int64_t measured = 0;  // tasks measured
  int64_t reported = 0;  // results the daemon acknowledged (re-sent ones included)
  int64_t spooled = 0;   // results written to the spool
  int64_t resent = 0;    // spooled results delivered later
  int64_t registrations = 0;
  int64_t released = 0;  // leased tasks handed back unstarted (Release)
  int64_t rejected = 0;  // results the daemon acknowledged but could not store
  // Leases granted while the device was measuring another one (pipelining at work).
  int64_t leased_ahead = 0;
};

class Worker {
 public:
  // Checks the options, opens the spool and starts a measurement child per measurable
  // device. Fails when there is no device, the spool cannot be opened (or another worker
  // holds it) or `lathe-measure` cannot be found or started. Dials lazily: an absent daemon
  // is not an error here.
  static absl::StatusOr<std::unique_ptr<Worker>> Create(WorkerOptions options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves until Stop(), max_tasks, or a fatal error (the token was refused, the sandbox
  // could not start a child). OK after a graceful stop or max_tasks.
  absl::Status Run();

  // Graceful stop (see the file comment); returns at once. Not async-signal-safe: call it
  // from a thread that waits for signals.
  void Stop();

  WorkerStats stats() const;
  // The id the daemon gave at the last registration; empty before.
  std::string worker_id() const;

  class Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::worker

#endif  // LATHE_WORKER_WORKER_LOOP_H_
