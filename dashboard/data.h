// \file
// What lathed's dashboard shows, as JSON texts built from the service logic (TunerService:
// workers, leases, jobs and their progress) and the tuning database (tuning curves, best
// records) — never from gRPC calls to itself. The HTTP layer (dashboard/server.h) only routes
// requests here; tests and bench_service call these directly too.
//
//   State()     workers (id, host, device class, state, results reported, last heartbeat,
//               current lease), jobs (state, trials done of the budget, per-task progress and
//               best GFLOP/s, the objective, trials/s and an estimate of the time left), and
//               counts. Every non-final job, and the kRecentFinishedJobs newest final ones.
//   Curve()     the tuning curve of a workload on a device class: best latency over the
//               trials, the trials in the order they were measured (records' measured_at in
//               the database; every stored record is a trial, failures included), with where
//               the job began and the library's figure when one is known (below).
//   Records()   the best record of each task of a job, with the lookup's explanation (which
//               record, why) and its schedule, one primitive per line.
//   Best()      the same for one workload.
//
// The library's figure: lathed measures no library itself (its host is not the workers'
// machine). `--library-figures FILE` names a JSON-lines file of figures measured where the
// workers run: lines as `lathe tune --json` prints them (workload, device_class, library,
// library_gflops); other lines are skipped. The file is read again when it changes. A curve
// without a figure for its workload and device class says so.
//
// The time left of a job: its trials per second over the last minutes (JobRates, sampled by
// Sample(), which the server calls every second) into the trials still to measure; none
// until a few seconds of progress were seen.
//
// Thread-safety: every method may be called from any thread.
#ifndef LATHE_DASHBOARD_DATA_H_
#define LATHE_DASHBOARD_DATA_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/service.h"

namespace lathe::dashboard {

struct DataOptions {
  std::string db_path;            // the daemon's database; opened again here, read-only use
  std::string library_figures;    // optional JSON-lines file (see above)
  int recent_finished_jobs = 20;  // final jobs shown besides the running ones
  // State() is built again at most this often: viewers polling at once share one build (a
  // fleet of hundreds of workers makes it a few milliseconds). 0: every call.
  int state_cache_ms = 200;
};

class DashboardData {
 public:
  // `service` is not owned and must outlive this. Fails when the database cannot be opened.
  static absl::StatusOr<std::unique_ptr<DashboardData>> Create(daemon::TunerService* service,
                                                               const DataOptions& options);
  ~DashboardData();

  // Built at most every state_cache_ms (see DataOptions).
  std::string State();
  // InvalidArgument for a malformed workload; `job_id` (optional) marks where that job began.
  absl::StatusOr<std::string> Curve(const std::string& workload, const std::string& device_class,
                                    const std::string& job_id);
  // NotFound for an unknown job.
  absl::StatusOr<std::string> Records(const std::string& job_id);
  // InvalidArgument for a malformed workload; empty device_class: the daemon's default.
  absl::StatusOr<std::string> Best(const std::string& workload, const std::string& device_class);
  // Cancels a job; returns its status as JSON. NotFound for an unknown job.
  absl::StatusOr<std::string> Cancel(const std::string& job_id);

  // Records each job's progress for its rate; call about once a second.
  void Sample();

  struct Impl;

 private:
  explicit DashboardData(std::unique_ptr<Impl> impl);
  std::string BuildState();
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_DATA_H_
