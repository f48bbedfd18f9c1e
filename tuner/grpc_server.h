// \file
// lathed's gRPC edge: the Tuner and WorkerService services over a TunerService, the only
// place where absl::Status becomes grpc::Status. A synchronous server (gRPC's thread pool)
// with a 4 MiB receive limit (larger messages fail with RESOURCE_EXHAUSTED inside gRPC),
// keepalive settings for workers behind NAT, the standard health service and reflection,
// optional TLS (and mTLS) and an optional shared token: with a token, every call of the two
// lathe services without metadata "authorization: Bearer <token>" fails UNAUTHENTICATED
// before the service sees it (health and reflection stay open, for probes).
//
// Thread-safety: Start, Shutdown and Wait may be called from different threads; Shutdown is
// idempotent.
#ifndef LATHE_TUNER_GRPC_SERVER_H_
#define LATHE_TUNER_GRPC_SERVER_H_

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tuner/service.h"

namespace lathe::tuner {

struct GrpcServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  std::string token;                   // empty: no authentication
  // PEM contents (not paths). Cert and key together enable TLS; a client CA requires client
  // certificates signed by it (mTLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  int max_receive_bytes = 4 << 20;
  int keepalive_time_ms = 30000;     // server pings idle connections this often
  int keepalive_timeout_ms = 10000;  // and drops them when the ping is not answered in time
};

class GrpcServer {
 public:
  // Binds and starts serving `service` (not owned; must outlive the server). Unavailable
  // when the address cannot be bound; InvalidArgument for inconsistent TLS options.
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

// Reads a secret or PEM file. With `trim`, surrounding whitespace (a trailing newline) is
// dropped. NotFound / PermissionDenied naming the path; InvalidArgument when it is empty.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, bool trim);

}  // namespace lathe::tuner

#endif  // LATHE_TUNER_GRPC_SERVER_H_
