// \file
// The C++ client of lathed's Tuner service (proto/lathe/v1/service.proto), for compilers and
// the `lathe` CLI: submit, follow, cancel and list jobs, list workers, query best records.
// gRPC stays inside client.cc: this header exposes absl::Status and the lathe.v1 messages.
//
// Every unary call carries the deadline `ClientOptions::timeout`; the shared secret (when
// given) travels as "authorization: Bearer TOKEN" metadata on every call. Errors keep the
// daemon's status code (UNAUTHENTICATED, NOT_FOUND, UNAVAILABLE, ...) and say which daemon
// answered.
//
// Thread-safety: a TunerClient may be used from several threads at once.
#ifndef LATHE_CLIENT_CLIENT_H_
#define LATHE_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"

namespace lathe::client {

struct ClientOptions {
  std::string address;     // HOST:PORT of lathed
  std::string token;       // shared secret; wins over token_file
  std::string token_file;  // file holding the shared secret (surrounding whitespace ignored)
  std::string tls_ca;      // PEM file of the CA that signed the daemon's certificate; empty:
                           // plaintext
  // PEM files of this client's certificate and key, for a daemon that requires client
  // certificates (lathed --tls-client-ca); both or neither, and only with tls_ca.
  std::string tls_cert;
  std::string tls_key;
  int timeout_ms = 10000;  // deadline of each unary call and of Connect
  // Watch: how long to keep trying to re-open the stream after the daemon went away (it may
  // be restarting); 0 gives up at once.
  int reconnect_ms = 60000;
};

// Reads a token file: its contents without surrounding whitespace. NotFound when the file
// cannot be read, InvalidArgument when it holds only whitespace.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

class TunerClient {
 public:
  // Opens a channel to `options.address` and waits (up to timeout_ms) until it is connected.
  // InvalidArgument for an empty address or an unreadable token or CA file; Unavailable (or
  // DeadlineExceeded) when the daemon cannot be reached.
  static absl::StatusOr<std::unique_ptr<TunerClient>> Connect(const ClientOptions& options);
  ~TunerClient();
  TunerClient(const TunerClient&) = delete;
  TunerClient& operator=(const TunerClient&) = delete;

  const std::string& address() const;

  // Submits a job; returns its id.
  absl::StatusOr<std::string> SubmitJob(const lathe::v1::JobSpec& spec);

  // Follows a job: calls `on_status` with the first status at once, then with every change,
  // and returns the last status when the job ends (DONE, FAILED or CANCELLED). When the
  // stream breaks because the daemon went away, it is re-opened for up to reconnect_ms.
  // Returns Cancelled (without touching the job) as soon as `*stop` becomes true; `stop`
  // may be null. `on_status` runs on the calling thread.
  absl::StatusOr<lathe::v1::JobStatus> Watch(
      const std::string& job_id, const std::function<void(const lathe::v1::JobStatus&)>& on_status,
      const std::atomic<bool>* stop = nullptr);

  // Cancels a job; returns its status after the cancellation. NotFound for an unknown id.
  absl::StatusOr<lathe::v1::JobStatus> Cancel(const std::string& job_id);

  absl::StatusOr<std::vector<lathe::v1::JobStatus>> ListJobs();
  absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ListWorkers();

  // The best record of a workload on a device class (empty: the daemon's default). A miss is
  // not an error: found = false with the daemon's explanation.
  absl::StatusOr<lathe::v1::QueryBestResponse> QueryBest(const std::string& workload,
                                                         const std::string& device_class);
  // QueryBest of every workload in one call (device_class for all of them), in order.
  // InvalidArgument naming the first malformed workload.
  absl::StatusOr<std::vector<lathe::v1::QueryBestResponse>> QueryBestMany(
      const std::vector<std::string>& workloads, const std::string& device_class);

 private:
  struct Impl;
  explicit TunerClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True for the states in which a job will not change any more.
bool IsFinal(lathe::v1::JobState state);

// "queued", "running", "done", "failed", "cancelled" ("unknown" otherwise).
std::string JobStateName(lathe::v1::JobState state);

}  // namespace lathe::client

#endif  // LATHE_CLIENT_CLIENT_H_
