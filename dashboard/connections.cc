#include "dashboard/connections.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lathe::dashboard {

namespace {

using Clock = std::chrono::steady_clock;

constexpr char kBusy[] =
    "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

// Waits until `fd` is ready for `events` or `deadline` passes; false on timeout or error.
bool WaitUntil(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (r > 0) return (p.revents & (events | POLLHUP | POLLERR)) != 0;
    if (r < 0 && errno != EINTR) return false;
  }
}

// One connection as cpp-httplib reads and writes it: plain or TLS on a non-blocking socket,
// every read bounded by the current request's deadline and every write by its own.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, SSL* ssl, std::string ip, int port, int write_timeout_ms)
      : fd_(fd), ssl_(ssl), ip_(std::move(ip)), port_(port), write_timeout_ms_(write_timeout_ms) {}

  void set_deadline(Clock::time_point d) { deadline_ = d; }

  // Bytes read from the socket that no request has taken yet (a pipelined request).
  bool has_buffered() const {
    return pos_ < buffer_.size() || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }

  bool is_readable() const override { return has_buffered() || WaitUntil(fd_, POLLIN, deadline_); }
  bool is_writable() const override {
    return WaitUntil(fd_, POLLOUT, Clock::now() + std::chrono::milliseconds(write_timeout_ms_));
  }

  // cpp-httplib reads request lines a byte at a time: they come from a buffer.
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == buffer_.size()) {
      if (size >= kBufferBytes) return ReadSocket(ptr, size);
      buffer_.resize(kBufferBytes);
      const ssize_t n = ReadSocket(buffer_.data(), buffer_.size());
      buffer_.resize(n > 0 ? static_cast<size_t>(n) : 0);
      pos_ = 0;
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, buffer_.size() - pos_);
    std::memcpy(ptr, buffer_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

 private:
  static constexpr size_t kBufferBytes = 4096;

  ssize_t ReadSocket(char* ptr, size_t size) {
    for (;;) {
      if (ssl_ != nullptr) {
        const int n = SSL_read(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return n;
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_ZERO_RETURN) return 0;
        if (e == SSL_ERROR_WANT_READ && WaitUntil(fd_, POLLIN, deadline_)) continue;
        if (e == SSL_ERROR_WANT_WRITE && WaitUntil(fd_, POLLOUT, deadline_)) continue;
        return -1;
      }
      const ssize_t n = recv(fd_, ptr, size, 0);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && WaitUntil(fd_, POLLIN, deadline_)) continue;
      return -1;
    }
  }

 public:
  ssize_t write(const char* ptr, size_t size) override {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(write_timeout_ms_);
    for (;;) {
      if (ssl_ != nullptr) {
        const int n = SSL_write(ssl_, ptr, static_cast<int>(std::min<size_t>(size, 1 << 30)));
        if (n > 0) return n;
        const int e = SSL_get_error(ssl_, n);
        if (e == SSL_ERROR_WANT_READ && WaitUntil(fd_, POLLIN, deadline)) continue;
        if (e == SSL_ERROR_WANT_WRITE && WaitUntil(fd_, POLLOUT, deadline)) continue;
        return -1;
      }
      const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0) return n;
      if (errno == EINTR) continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && WaitUntil(fd_, POLLOUT, deadline)) continue;
      return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    ip.clear();
    port = 0;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  SSL* ssl_;
  std::string ip_;
  int port_;
  int write_timeout_ms_;
  Clock::time_point deadline_ = Clock::now();
  std::vector<char> buffer_;
  size_t pos_ = 0;
};

struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

}  // namespace

struct ConnectionServer::Impl {
  ConnectionLimits limits;
  SSL_CTX* tls = nullptr;
  RequestFn serve;
  int listen_fd = -1;
  int port = 0;
  std::thread acceptor;
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  struct Pending {
    int fd;
    std::string ip;
    int port;
  };
  std::deque<Pending> queue;
  std::map<std::string, int> per_client;  // open connections (queued or served) per address
  std::set<int> open;                     // their sockets, shut down by Stop
  std::once_flag stop_once;

  void Accept() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping) return;
      }
      pollfd p{listen_fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      sockaddr_storage addr{};
      socklen_t len = sizeof addr;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;
      char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "0";
      getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::unique_lock<std::mutex> lock(mu);
      int& mine = per_client[host];
      const bool over = mine >= limits.per_client ||
                        static_cast<int>(queue.size()) >= std::max(1, limits.threads);
      if (over || stopping) {
        if (mine == 0) per_client.erase(host);
        lock.unlock();
        // Best effort, plain text only (a TLS client sees the connection close).
        if (tls == nullptr) (void)!send(fd, kBusy, sizeof kBusy - 1, MSG_NOSIGNAL);
        close(fd);
        continue;
      }
      ++mine;
      open.insert(fd);
      queue.push_back({fd, host, std::atoi(serv)});
      cv.notify_one();
    }
  }

  void Work() {
    for (;;) {
      Pending c;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !queue.empty(); });
        if (stopping) return;
        c = std::move(queue.front());
        queue.pop_front();
      }
      Serve(c.fd, c.ip, c.port);
      std::lock_guard<std::mutex> lock(mu);
      open.erase(c.fd);
      close(c.fd);
      if (--per_client[c.ip] <= 0) per_client.erase(c.ip);
    }
  }

  void Serve(int fd, const std::string& ip, int port) {
    const auto request_timeout = std::chrono::milliseconds(limits.request_timeout_ms);
    Clock::time_point deadline = Clock::now() + request_timeout;
    std::unique_ptr<SSL, SslFree> ssl;
    if (tls != nullptr) {
      ssl.reset(SSL_new(tls));
      if (!ssl || SSL_set_fd(ssl.get(), fd) != 1) return;
      for (;;) {
        const int r = SSL_accept(ssl.get());
        if (r == 1) break;
        const int e = SSL_get_error(ssl.get(), r);
        if (e == SSL_ERROR_WANT_READ && WaitUntil(fd, POLLIN, deadline)) continue;
        if (e == SSL_ERROR_WANT_WRITE && WaitUntil(fd, POLLOUT, deadline)) continue;
        return;
      }
    }
    ConnStream stream(fd, ssl.get(), ip, port, limits.request_timeout_ms);
    for (int n = 0; n < std::max(1, limits.max_requests_per_connection); ++n) {
      if (n > 0) {
        // Kept alive: wait for the next request's first byte.
        const Clock::time_point idle_until =
            Clock::now() + std::chrono::milliseconds(limits.idle_timeout_ms);
        if (!stream.has_buffered() && !WaitUntil(fd, POLLIN, idle_until)) break;
        deadline = Clock::now() + request_timeout;
      }
      stream.set_deadline(deadline);
      bool stopping_now;
      {
        std::lock_guard<std::mutex> lock(mu);
        stopping_now = stopping;
      }
      const bool last = stopping_now || n + 1 >= limits.max_requests_per_connection;
      bool closed = false;
      if (!serve(stream, last, closed) || closed || last) break;
    }
    if (ssl) SSL_shutdown(ssl.get());
  }
};

absl::StatusOr<std::unique_ptr<ConnectionServer>> ConnectionServer::Start(
    const std::string& host, int port, SSL_CTX* tls, const ConnectionLimits& limits,
    RequestFn serve) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found) != 0) {
    return absl::UnavailableError(absl::StrCat("http: cannot resolve ", host));
  }
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only (a restart need not wait for TIME_WAIT); never SO_REUSEPORT, with
    // which a second daemon could bind the same port and share its connections.
    int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", host, ":", port));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  auto impl = std::make_unique<Impl>();
  impl->port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  impl->listen_fd = fd;
  impl->limits = limits;
  impl->tls = tls;
  impl->serve = std::move(serve);
  Impl* raw = impl.get();
  for (int i = 0; i < std::max(1, limits.threads); ++i) {
    impl->workers.emplace_back([raw] { raw->Work(); });
  }
  impl->acceptor = std::thread([raw] { raw->Accept(); });
  return std::unique_ptr<ConnectionServer>(new ConnectionServer(std::move(impl)));
}

ConnectionServer::ConnectionServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ConnectionServer::~ConnectionServer() { Stop(); }

int ConnectionServer::port() const { return impl_->port; }

void ConnectionServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    Impl& s = *impl_;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.stopping = true;
      // Wakes the connections being served: their reads and writes fail at once.
      for (int fd : s.open) shutdown(fd, SHUT_RDWR);
    }
    s.cv.notify_all();
    if (s.acceptor.joinable()) s.acceptor.join();
    for (std::thread& t : s.workers) t.join();
    std::lock_guard<std::mutex> lock(s.mu);
    for (const Impl::Pending& c : s.queue) close(c.fd);
    s.queue.clear();
    close(s.listen_fd);
  });
}

}  // namespace lathe::dashboard
