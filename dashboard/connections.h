// \file
// The dashboard's connections: its own listening socket, accept loop and threads in front of
// cpp-httplib's request handling, so that slow or greedy clients cannot hold the dashboard
// (cpp-httplib's own loop gives each connection a thread for as long as the client dribbles
// bytes, so a few slow connections starve it).
//
// - At most ConnectionLimits::per_client connections of one client address are open at once;
//   more are answered 503 and closed at once. At most `threads` are served at once and
//   `threads` more wait; past that, new ones are answered 503 too.
// - A request (and a TLS handshake) must arrive whole, headers and body, within
//   `request_timeout_ms` of the connection starting to wait for it; a kept-alive connection
//   waits `idle_timeout_ms` for its next request; writing a response must progress within
//   `request_timeout_ms`. A connection past its time is closed.
//
// Thread-safety: Stop may be called from any thread, once Start has returned.
#ifndef LATHE_DASHBOARD_CONNECTIONS_H_
#define LATHE_DASHBOARD_CONNECTIONS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace httplib {
class Stream;
}

namespace lathe::dashboard {

struct ConnectionLimits {
  int threads = 16;                // connections served at once
  int per_client = 8;              // connections of one client address open at once
  int request_timeout_ms = 10000;  // a whole request must arrive within this
  int idle_timeout_ms = 5000;      // a kept-alive connection waits this for the next request
  int max_requests_per_connection = 1000;
};

class ConnectionServer {
 public:
  // Serves one request of `stream`: httplib::Server::process_request. `close` asks it to end
  // the connection after this request; it sets `closed` when it did.
  using RequestFn = std::function<bool(httplib::Stream& stream, bool close, bool& closed)>;

  // Binds HOST:PORT (port 0 picks one) and starts serving. With `tls` (not owned; must outlive
  // the server) every connection is TLS. Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<ConnectionServer>> Start(const std::string& host, int port,
                                                                 SSL_CTX* tls,
                                                                 const ConnectionLimits& limits,
                                                                 RequestFn serve);
  // Stop().
  ~ConnectionServer();

  int port() const;
  // Closes the listening socket and every connection, and joins the threads. Idempotent.
  void Stop();

  struct Impl;

 private:
  explicit ConnectionServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lathe::dashboard

#endif  // LATHE_DASHBOARD_CONNECTIONS_H_
