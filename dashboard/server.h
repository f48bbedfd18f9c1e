// \file
// lathed's web dashboard (lathed --http HOST:PORT): one page (HTML, CSS and JavaScript built
// into the binary; no external fetches) that polls JSON data endpoints, served by
// cpp-httplib (Debian's libcpp-httplib, kept inside this directory) on a pool of threads,
// with TLS from the same PEM certificate and key as the gRPC side (and, with a client CA,
// client certificates required).
//
//   GET  /                    the page          GET  /app.js, /style.css   its parts
//   GET  /api/state           DashboardData::State()
//   GET  /api/curve?workload=W&device_class=D[&job=ID]
//   GET  /api/records?job=ID  GET  /api/best?workload=W[&device_class=D]
//   POST /api/jobs/ID/cancel  cancels a job
//   GET  /login, POST /login (form field `token`), POST /logout
//   GET  /healthz             "ok", always open (no data)
//
// With a token (dashboard/auth.h), everything but /login and /healthz answers 401 without
// "Authorization: Bearer <token>" or a session cookie: the data endpoints with a JSON error,
// the pages with the login form (which holds no data). A POST authenticated by the cookie
// must carry the header "X-Lathe-Request: 1" (a cross-site form cannot set it; the cookie is
// SameSite=Strict besides). Requests are logged at debug level by method, path and status;
// neither tokens nor session ids are ever logged.
//
// Thread-safety: Start and Stop may be called from different threads; Stop is idempotent.
#ifndef LATHE_DASHBOARD_SERVER_H_
#define LATHE_DASHBOARD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dashboard/data.h"
#include "tuner/service.h"

namespace lathe::dashboard {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  std::string token;                   // empty: open
  // PEM contents (not paths), as for the gRPC server: cert and key enable TLS (HTTPS); a
  // client CA requires client certificates signed by it.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  DataOptions data;
  int threads = 8;                // HTTP worker threads (each open connection holds one)
  int sample_interval_ms = 1000;  // how often job progress is sampled for rates
};

class DashboardServer {
 public:
  // Binds and starts serving. InvalidArgument for a malformed address or inconsistent TLS
  // options (with the OpenSSL reason for unreadable PEM); Unavailable when the address
  // cannot be bound; the database's error when it cannot be opened. `service` is not owned
  // and must outlive the server.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(tuner::TunerService* service,
                                                                const ServerOptions& options);
  // Stop().
  ~DashboardServer();

  int port() const;
  // "http://HOST:PORT" or "https://HOST:PORT" with the bound port.
  const std::string& url() const;
  DashboardData& data();

  // Stops accepting connections and joins the server's threads. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit DashboardServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_SERVER_H_
