// \file
// lathed's gRPC edge: the Tuner and WorkerService services over a TunerService, the only
// place where absl::Status becomes grpc::Status. A synchronous server (gRPC's thread pool),
// but for the workers' Lease and Report on gRPC's callback API (a waiting long poll holds no
// thread; reports run on `report_threads` threads of their own),
// with a 4 MiB receive limit (larger messages fail with RESOURCE_EXHAUSTED inside gRPC),
// keepalive settings for workers behind NAT, the standard health service, reflection only when
// asked for, optional TLS (and mTLS) and optional tokens.
//
// One gate, before any handler: gRPC's server auth filter hands every call's metadata (its
// method path included) to an auth metadata processor attached to the port's credentials, so
// no call on this port (the lathe services, health and reflection alike) reaches a service
// unchecked. With a token, a call without "authorization: Bearer <token>" fails
// UNAUTHENTICATED. Roles: with a worker token beside the client token, the worker service
// (Register, Lease, Report, Heartbeat, Release) takes only the worker token and SubmitJob /
// CancelJob only the client token (PERMISSION_DENIED otherwise); reading (ListJobs,
// ListWorkers, WatchJob, QueryBest*, health, reflection) takes either. With the client token
// alone, it serves both roles (the single shared token of CONTRACT.md). Health without a token
// is served only by lathed's separate --health port.
//
// Thread-safety: Start, Shutdown and Wait may be called from different threads; Shutdown is
// idempotent.
#ifndef LATHE_DAEMON_GRPC_SERVER_H_
#define LATHE_DAEMON_GRPC_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/service.h"

namespace grpc {
class ServerBuilderOption;
}

namespace lathe::daemon {

struct GrpcServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  std::string token;                   // empty: no authentication
  // A worker's credential apart from a client's (needs `token`, must differ from it); empty:
  // `token` serves workers too.
  std::string worker_token;
  bool reflection = false;  // serve gRPC server reflection (behind the gate like the rest)
  // PEM contents (not paths). Cert and key together enable TLS; a client CA requires client
  // certificates signed by it (mTLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  int max_receive_bytes = 4 << 20;
  int keepalive_time_ms = 30000;     // server pings idle connections this often
  int keepalive_timeout_ms = 10000;  // and drops them when the ping is not answered in time
  // Threads that run the workers' reports, i.e. the reports stored at once; concurrent ones
  // share a database commit (group commit), so a few cover many workers.
  int report_threads = 16;
};

class GrpcServer {
 public:
  // Binds and starts serving `service` (not owned; must outlive the server). Unavailable
  // when the address cannot be bound; InvalidArgument for inconsistent TLS or token options.
  // Turns Abseil's mutex deadlock detection off for the process (see grpc_server.cc).
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(TunerService* service,
                                                           const GrpcServerOptions& options);
  ~GrpcServer();

  int port() const;                    // the bound port
  const std::string& address() const;  // "HOST:PORT" with the bound port

  // Stops accepting calls, wakes the service's long polls, lets calls in flight finish until
  // `grace` has passed (then cancels them). Idempotent.
  void Shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // Blocks until the server has shut down.
  void Wait();

  struct Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A ServerBuilder option that leaves gRPC server reflection off, or with `on` serves it: gRPC's
// reflection library, once linked, adds reflection to every server built in the process (the
// health-only one of lathed --health included) unless an option takes it out.
std::unique_ptr<grpc::ServerBuilderOption> ReflectionOption(bool on);

// Reads a secret or PEM file. With `trim`, surrounding whitespace (a trailing newline) is
// dropped. NotFound / PermissionDenied naming the path; InvalidArgument when it is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, bool trim);

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_GRPC_SERVER_H_
