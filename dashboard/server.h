// \file
// lathed's web dashboard (lathed --http HOST:PORT): one page (HTML, CSS and JavaScript built
// into the binary; no external fetches) that polls JSON data endpoints, parsed and routed by
// cpp-httplib (Debian's libcpp-httplib, kept inside this directory) on connections of its own
// (dashboard/connections.h: per-client caps, request and idle timeouts) and a pool of threads,
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
// Every request but /healthz must name this dashboard in its Host header (a loopback name or
// address, the listen host, this machine's hostname or a name of ServerOptions::allowed_hosts)
// and, when it carries an Origin header, come from this dashboard's own origin (scheme, host
// and port): 403 otherwise, token or not, so that neither a page of another site (a
// cross-origin POST) nor a DNS-rebinding one reaches it. POST /login reads the token only from
// its form body (400 for one in the URL) and, after LoginThrottle::kFreeFailures wrong tokens
// from one address, answers 429 (Retry-After) until that address's backoff has passed.
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
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/service.h"
#include "dashboard/data.h"

namespace lathe::dashboard {

struct ServerOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free port
  std::string token;                   // empty: open
  // PEM contents (not paths), as for the gRPC server: cert and key enable TLS (HTTPS); a
  // client CA requires client certificates signed by it.
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
  // Names besides the loopback ones, the listen host and this machine's hostname that a
  // request's Host header may give (the name users reach the dashboard by; lathed --http-host).
  std::vector<std::string> allowed_hosts;
  DataOptions data;
  int threads = 16;                // connections served at once (dashboard/connections.h)
  int connections_per_client = 8;  // open connections of one client address at once
  int request_timeout_ms = 10000;  // a whole request must arrive within this
  int idle_timeout_ms = 5000;      // a kept-alive connection waits this for the next request
  int sample_interval_ms = 1000;   // how often job progress is sampled for rates
};

class DashboardServer {
 public:
  // Binds and starts serving. InvalidArgument for a malformed address or inconsistent TLS
  // options (with the OpenSSL reason for unreadable PEM); Unavailable when the address
  // cannot be bound; the database's error when it cannot be opened. `service` is not owned
  // and must outlive the server.
  static absl::StatusOr<std::unique_ptr<DashboardServer>> Start(daemon::TunerService* service,
                                                                const ServerOptions& options);
  // Stop().
  ~DashboardServer();

  int port() const;
  // "http://HOST:PORT" or "https://HOST:PORT" with the bound port.
  const std::string& url() const;
  DashboardData& data();

  // Stops accepting connections and joins the server's threads. Idempotent.
  void Stop();

  // Serves the HTTP requests in `raw` (the bytes a client would send on one plain-HTTP
  // connection, pipelined requests included) as a connection from `remote_ip` would be
  // served, and returns the bytes of the answers. No socket is involved: for tests and the
  // fuzzer (fuzz/dashboard_http_fuzzer.cc). Safe to call from several threads.
  std::string ServeBytes(std::string_view raw, const std::string& remote_ip = "127.0.0.1");

  struct Impl;

 private:
  explicit DashboardServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_SERVER_H_
