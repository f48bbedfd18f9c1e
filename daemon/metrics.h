// \file
// lathed's Prometheus metrics (prometheus-cpp, kept behind this interface): gauges of workers
// by state, queue depth and active leases; counters of results by error class, leases granted,
// reports and re-timings of best records by result; a histogram of the Lease RPC's handling time
// (dispatch latency). Served over HTTP at /metrics when an address is given; with a token,
// only to HTTP basic authentication whose password is the token (any user name: Prometheus'
// `basic_auth: {username: lathe, password_file: TOKEN_FILE}`), 401 otherwise.
//
// Thread-safety: every method may be called from any thread (prometheus-cpp metrics are
// atomic).
#ifndef LATHE_DAEMON_METRICS_H_
#define LATHE_DAEMON_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lathe::daemon {

class Metrics {
 public:
  // Metrics served on `listen` ("HOST:PORT"; port 0 picks one), or kept unserved when
  // `listen` is empty; with a non-empty `token`, to basic authentication with it as the
  // password only. Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(const std::string& listen,
                                                         const std::string& token = "");
  ~Metrics();

  // The bound HTTP port; 0 when unserved.
  int port() const;

  void SetWorkers(int64_t idle, int64_t busy, int64_t lost);
  void SetQueueDepth(int64_t tasks);
  void SetActiveLeases(int64_t leases);
  void AddResult(std::string_view error_class);  // "ok", "compile_error", ...
  void AddLeaseGranted(int64_t tasks);
  void AddReport();
  void AddRemeasure(bool ok);  // a re-timing reported: its repeats added (ok) or failed
  void ObserveDispatchLatency(double seconds);

  struct Impl;

 private:
  explicit Metrics(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_METRICS_H_
