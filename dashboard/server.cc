#include "dashboard/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "daemon/log_text.h"
#include "dashboard/assets.h"
#include "dashboard/auth.h"
#include "dashboard/connections.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace lathe::dashboard {

namespace {

using json = nlohmann::json;

// Everything the page loads comes from this origin; nothing is inlined but the login form's
// style, and no page may frame it.
constexpr char kPageCsp[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";
constexpr char kLoginCsp[] =
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'";

constexpr char kJson[] = "application/json; charset=utf-8";

int HttpStatus(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
      return 409;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

void SendJson(httplib::Response& res, int status, std::string body) {
  res.status = status;
  res.set_content(std::move(body), kJson);
}

void SendError(httplib::Response& res, int status, absl::string_view message) {
  SendJson(res, status,
           json({{"error", message}}).dump(-1, ' ', false, json::error_handler_t::replace));
}

void SendResult(httplib::Response& res, const absl::StatusOr<std::string>& r) {
  if (r.ok()) return SendJson(res, 200, *r);
  SendError(res, HttpStatus(r.status()), r.status().message());
}

// The host of a Host header value or of an origin's authority ("name", "name:port",
// "[v6]:port"), lower-case, and its port (0 when none is given); nullopt when malformed.
std::optional<std::pair<std::string, int>> SplitHostPort(absl::string_view authority) {
  std::string host;
  absl::string_view port;
  if (absl::StartsWith(authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) return std::nullopt;
    host = std::string(authority.substr(1, close - 1));
    absl::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = authority.find(':');
    host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port = authority.substr(colon + 1);
  }
  if (host.empty()) return std::nullopt;
  int p = 0;
  if (!port.empty() && (!absl::SimpleAtoi(port, &p) || p <= 0 || p > 65535)) return std::nullopt;
  return std::make_pair(absl::AsciiStrToLower(host), p);
}

// The value of field `name` in an application/x-www-form-urlencoded body, decoded; empty when
// absent.
std::string FormValue(absl::string_view body, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(body, '&')) {
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) != name || eq == absl::string_view::npos) continue;
    std::string out;
    absl::string_view v = pair.substr(eq + 1);
    for (size_t i = 0; i < v.size(); ++i) {
      int hex = 0;
      if (v[i] == '+') {
        out.push_back(' ');
      } else if (v[i] == '%' && i + 2 < v.size() && absl::SimpleHexAtoi(v.substr(i + 1, 2), &hex)) {
        out.push_back(static_cast<char>(hex));
        i += 2;
      } else {
        out.push_back(v[i]);
      }
    }
    return out;
  }
  return "";
}

std::string HtmlEscape(absl::string_view s) {
  return absl::StrReplaceAll(s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// --- TLS from PEM contents (OpenSSL) ---

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string OpenSslError(absl::string_view what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = "unknown reason";
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return absl::StrCat(what, ": ", buf);
}

// Loads the certificate chain, the key and (optionally) the client CA into `ctx`; on failure
// sets `*error` and returns false.
bool SetupTls(SSL_CTX& ctx, const ServerOptions& o, std::string* error) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  BioPtr certs = MemBio(o.tls_cert_pem);
  X509Ptr leaf(PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr));
  if (!leaf || SSL_CTX_use_certificate(&ctx, leaf.get()) != 1) {
    *error = OpenSslError("TLS certificate");
    return false;
  }
  while (X509* extra = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add_extra_chain_cert(&ctx, extra) != 1) {  // takes ownership on success
      X509_free(extra);
      *error = OpenSslError("TLS certificate chain");
      return false;
    }
  }
  ERR_clear_error();  // the end of the PEM chain reads as an error
  BioPtr key_bio = MemBio(o.tls_key_pem);
  std::unique_ptr<EVP_PKEY, PkeyFree> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (!key || SSL_CTX_use_PrivateKey(&ctx, key.get()) != 1 ||
      SSL_CTX_check_private_key(&ctx) != 1) {
    *error = OpenSslError("TLS private key");
    return false;
  }
  if (!o.tls_client_ca_pem.empty()) {
    BioPtr ca_bio = MemBio(o.tls_client_ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(&ctx);
    int n = 0;
    while (X509* ca = PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)) {
      X509Ptr owned(ca);
      if (X509_STORE_add_cert(store, ca) != 1 || SSL_CTX_add_client_CA(&ctx, ca) != 1) {
        *error = OpenSslError("TLS client CA");
        return false;
      }
      ++n;
    }
    ERR_clear_error();
    if (n == 0) {
      *error = "TLS client CA: no certificate in the PEM";
      return false;
    }
    SSL_CTX_set_verify(&ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return true;
}

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};

// cpp-httplib's request handling (parse, route, answer) for the connections of
// connections.h: its own listener is never started.
class RequestProcessor final : public httplib::Server {
 public:
  using httplib::Server::process_request;
};

// A connection in memory (DashboardServer::ServeBytes): reads from a buffer, writes to a
// string.
class BufferStream final : public httplib::Stream {
 public:
  BufferStream(std::string_view in, std::string remote_ip)
      : in_(in), remote_ip_(std::move(remote_ip)) {}

  bool is_readable() const override { return !in_.empty(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size());
    std::memcpy(ptr, in_.data(), n);
    in_.remove_prefix(n);
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = remote_ip_;
    port = 40000;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 8080;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

  bool exhausted() const { return in_.empty(); }
  std::string& out() { return out_; }

 private:
  std::string_view in_;
  std::string remote_ip_;
  std::string out_;
};

}  // namespace

struct DashboardServer::Impl {
  daemon::TunerService* service = nullptr;
  ServerOptions options;
  std::unique_ptr<DashboardData> data;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<RequestProcessor> http;
  std::unique_ptr<SSL_CTX, SslCtxFree> ssl_ctx;  // TLS; null: plain HTTP
  std::unique_ptr<ConnectionServer> connections;
  bool tls = false;
  int port = 0;
  std::set<std::string> allowed_hosts;  // lower-case names a Host header may give
  LoginThrottle throttle;
  std::string url;
  std::thread sampler;
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::once_flag stop_once;

  // The login form, with `message` (escaped) above it.
  std::string LoginPage(absl::string_view message) const {
    std::optional<Asset> page = FindAsset("login.html");
    std::string html(page ? page->body : "<!doctype html><title>lathed</title>");
    return absl::StrReplaceAll(html, {{"{{message}}", HtmlEscape(message)}});
  }

  void SendLogin(httplib::Response& res, int status, absl::string_view message) const {
    res.status = status;
    res.set_header("Content-Security-Policy", kLoginCsp);
    res.set_content(LoginPage(message), "text/html; charset=utf-8");
  }

  bool HostAllowed(absl::string_view name) const {
    if (allowed_hosts.count(std::string(name)) > 0) return true;
    in_addr v4{};  // 127.0.0.0/8
    return inet_pton(AF_INET, std::string(name).c_str(), &v4) == 1 &&
           (ntohl(v4.s_addr) >> 24) == 127;
  }

  // Host and Origin (see server.h); an empty string when they pass, else why not.
  std::string CheckHostAndOrigin(const httplib::Request& req) const {
    std::optional<std::pair<std::string, int>> host = SplitHostPort(req.get_header_value("Host"));
    if (!host.has_value() || !HostAllowed(host->first)) {
      return "the Host header names no host this dashboard serves (use its address, or add the "
             "name with lathed --http-host)";
    }
    if (!req.has_header("Origin")) return "";
    const std::string origin = req.get_header_value("Origin");
    const std::string scheme = tls ? "https://" : "http://";
    std::optional<std::pair<std::string, int>> from;
    if (absl::StartsWith(origin, scheme)) from = SplitHostPort(origin.substr(scheme.size()));
    const int origin_port = from.has_value() && from->second == 0 ? (tls ? 443 : 80)
                            : from.has_value()                    ? from->second
                                                                  : -1;
    if (!from.has_value() || !HostAllowed(from->first) || origin_port != port) {
      return "cross-origin request refused";
    }
    return "";
  }

  // Every request passes here first: the Host and Origin check, then the token check (see
  // server.h).
  httplib::Server::HandlerResponse Gate(const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz") return httplib::Server::HandlerResponse::Unhandled;
    if (std::string why = CheckHostAndOrigin(req); !why.empty()) {
      spdlog::warn("event=dashboard_refused reason=\"{}\" remote={}", why, req.remote_addr);
      SendError(res, 403, why);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/login") return httplib::Server::HandlerResponse::Unhandled;
    const bool api = absl::StartsWith(req.path, "/api/");
    const std::string authorization = req.get_header_value("Authorization");
    const std::string cookie = req.get_header_value("Cookie");
    const Authenticator::Result r = auth->Check(authorization, cookie);
    if (r == Authenticator::Result::kOk) {
      // A cookie-authenticated POST must prove it comes from the page (see server.h).
      // (Logging out by a forged form is harmless, and the page's logout is a plain form.)
      if (req.method == "POST" && req.path != "/logout" && authorization.empty() && !auth->open() &&
          req.get_header_value("X-Lathe-Request") != "1") {
        SendError(res, 403, "a POST with a session cookie needs the header X-Lathe-Request: 1");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string why = r == Authenticator::Result::kMissing
                                ? "unauthenticated: this lathed needs its token"
                                : "unauthenticated: wrong token or expired session";
    res.set_header("WWW-Authenticate", "Bearer realm=\"lathed\"");
    if (api) {
      SendError(res, 401, why);
    } else {
      SendLogin(res, 401, r == Authenticator::Result::kMissing ? "" : why);
    }
    return httplib::Server::HandlerResponse::Handled;
  }

  void Routes() {
    httplib::Server& s = *http;
    s.set_pre_routing_handler(
        [this](const httplib::Request& req, httplib::Response& res) { return Gate(req, res); });
    s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain; charset=utf-8");
    });
    auto serve = [](const char* name) {
      return [name](const httplib::Request&, httplib::Response& res) {
        std::optional<Asset> a = FindAsset(name);
        if (!a) return SendError(res, 404, "not found");
        res.set_header("Content-Security-Policy", kPageCsp);
        res.set_content(std::string(a->body), std::string(a->content_type).c_str());
      };
    };
    s.Get("/", serve("index.html"));
    s.Get("/app.js", serve("app.js"));
    s.Get("/style.css", serve("style.css"));

    s.Get("/login", [this](const httplib::Request&, httplib::Response& res) {
      if (auth->open()) return res.set_redirect("/", 303);
      SendLogin(res, 200, "");
    });
    s.Post("/login", [this](const httplib::Request& req, httplib::Response& res) {
      if (auth->open()) return res.set_redirect("/", 303);
      // The token only from the form's body: a URL is kept in histories and logs.
      if (const size_t query = req.target.find('?');
          query != std::string::npos && req.target.find("token", query) != std::string::npos) {
        return SendLogin(res, 400, "the token goes in the form's body, never in the address");
      }
      if (!absl::StartsWith(req.get_header_value("Content-Type"),
                            "application/x-www-form-urlencoded")) {
        return SendLogin(res, 400, "the login is a form (application/x-www-form-urlencoded)");
      }
      const auto now = LoginThrottle::Clock::now();
      if (const int64_t wait = throttle.WaitSeconds(req.remote_addr, now); wait > 0) {
        res.set_header("Retry-After", std::to_string(wait));
        return SendLogin(res, 429,
                         absl::StrCat("too many wrong tokens: try again in ", wait, " s"));
      }
      std::optional<std::string> session = auth->Login(FormValue(req.body, "token"));
      if (!session) {
        throttle.Failed(req.remote_addr, now);
        spdlog::warn("event=dashboard_login result=refused remote={}", req.remote_addr);
        return SendLogin(res, 401, "wrong token");
      }
      throttle.Succeeded(req.remote_addr);
      spdlog::info("event=dashboard_login result=ok remote={}", req.remote_addr);
      res.set_header("Set-Cookie",
                     absl::StrCat(kSessionCookie, "=", *session,
                                  "; Path=/; HttpOnly; SameSite=Strict; Max-Age=",
                                  std::chrono::seconds(Authenticator::kSessionTtl).count(),
                                  tls ? "; Secure" : ""));
      res.set_redirect("/", 303);
    });
    s.Post("/logout", [this](const httplib::Request& req, httplib::Response& res) {
      auth->Logout(req.get_header_value("Cookie"));
      res.set_header("Set-Cookie", absl::StrCat(kSessionCookie,
                                                "=; Path=/; HttpOnly; "
                                                "SameSite=Strict; Max-Age=0"));
      res.set_redirect(auth->open() ? "/" : "/login", 303);
    });

    s.Get("/api/state", [this](const httplib::Request&, httplib::Response& res) {
      SendJson(res, 200, data->State());
    });
    s.Get("/api/curve", [this](const httplib::Request& req, httplib::Response& res) {
      SendResult(res, data->Curve(req.get_param_value("workload"),
                                  req.get_param_value("device_class"), req.get_param_value("job")));
    });
    s.Get("/api/records", [this](const httplib::Request& req, httplib::Response& res) {
      if (!req.has_param("job")) return SendError(res, 400, "no job parameter");
      SendResult(res, data->Records(req.get_param_value("job")));
    });
    s.Get("/api/best", [this](const httplib::Request& req, httplib::Response& res) {
      if (!req.has_param("workload")) return SendError(res, 400, "no workload parameter");
      SendResult(res,
                 data->Best(req.get_param_value("workload"), req.get_param_value("device_class")));
    });
    s.Post(R"(/api/jobs/([^/]+)/cancel)",
           [this](const httplib::Request& req, httplib::Response& res) {
             absl::StatusOr<std::string> r = data->Cancel(req.matches[1]);
             if (r.ok()) {
               spdlog::info("event=dashboard_cancel job={} remote={}", std::string(req.matches[1]),
                            req.remote_addr);
             }
             SendResult(res, r);
           });
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (res.status == 404 && res.body.empty()) SendError(res, 404, "not found");
    });
    s.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = absl::StrCat("internal error: ", e.what());
          } catch (...) {
          }
          SendError(res, 500, what);
        });
    // Method, path (never the query, headers or body) and status.
    s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      spdlog::debug("event=http method={} path=\"{}\" status={} remote={}",
                    daemon::LogText(req.method, 16), daemon::LogText(req.path), res.status,
                    req.remote_addr);
    });
    // same-origin, not no-referrer: under no-referrer a browser sends "Origin: null" with the
    // page's own form posts (the login), which the Origin check refuses as cross-origin; under
    // same-origin it sends the page's origin there and "null" (refused) from anywhere else.
    s.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                           {"Referrer-Policy", "same-origin"},
                           {"X-Frame-Options", "DENY"},
                           {"Cache-Control", "no-store"}});
  }
};

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    daemon::TunerService* service, const ServerOptions& options) {
  if (service == nullptr) return absl::InvalidArgumentError("no service");
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("a client CA needs a server certificate and key");
  }
  const size_t colon = options.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("http address '", options.listen, "' is not HOST:PORT"));
  }
  std::string host = options.listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::set<std::string> allowed = {"localhost", "::1"};
  if (host != "0.0.0.0" && host != "::" && !host.empty())
    allowed.insert(absl::AsciiStrToLower(host));
  char hostname[256] = {};
  if (gethostname(hostname, sizeof hostname - 1) == 0 && hostname[0] != '\0') {
    allowed.insert(absl::AsciiStrToLower(hostname));
  }
  for (const std::string& h : options.allowed_hosts) allowed.insert(absl::AsciiStrToLower(h));

  auto impl = std::make_unique<Impl>();
  impl->service = service;
  impl->options = options;
  impl->auth = std::make_unique<Authenticator>(options.token);
  impl->allowed_hosts = std::move(allowed);
  absl::StatusOr<std::unique_ptr<DashboardData>> data =
      DashboardData::Create(service, options.data);
  if (!data.ok()) return data.status();
  impl->data = std::move(*data);

  // cpp-httplib parses and routes the requests; the connections are ours (connections.h).
  impl->http = std::make_unique<RequestProcessor>();
  if (!options.tls_cert_pem.empty()) {
    impl->ssl_ctx.reset(SSL_CTX_new(TLS_server_method()));
    std::string error;
    if (!impl->ssl_ctx || !SetupTls(*impl->ssl_ctx, options, &error)) {
      return absl::InvalidArgumentError(error.empty() ? std::string("cannot set up TLS") : error);
    }
    impl->tls = true;
  }
  impl->http->set_payload_max_length(64 << 10);
  impl->Routes();

  ConnectionLimits limits;
  limits.threads = std::max(2, options.threads);
  limits.per_client = std::max(1, options.connections_per_client);
  limits.request_timeout_ms = std::max(100, options.request_timeout_ms);
  limits.idle_timeout_ms = std::max(100, options.idle_timeout_ms);
  Impl* raw = impl.get();
  absl::StatusOr<std::unique_ptr<ConnectionServer>> connections =
      ConnectionServer::Start(host, port, impl->ssl_ctx.get(), limits,
                              [raw](httplib::Stream& stream, bool close, bool& closed) {
                                return raw->http->process_request(stream, close, closed, nullptr);
                              });
  if (!connections.ok()) {
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", options.listen));
  }
  impl->connections = std::move(*connections);
  impl->port = impl->connections->port();
  impl->url = absl::StrCat(impl->tls ? "https://" : "http://", options.listen.substr(0, colon), ":",
                           impl->port);
  impl->sampler = std::thread([raw] {
    std::unique_lock<std::mutex> lock(raw->mu);
    while (!raw->stopping) {
      lock.unlock();
      raw->data->Sample();
      lock.lock();
      raw->cv.wait_for(lock,
                       std::chrono::milliseconds(std::max(50, raw->options.sample_interval_ms)),
                       [raw] { return raw->stopping; });
    }
  });
  return std::unique_ptr<DashboardServer>(new DashboardServer(std::move(impl)));
}

DashboardServer::DashboardServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DashboardServer::~DashboardServer() { Stop(); }

std::string DashboardServer::ServeBytes(std::string_view raw, const std::string& remote_ip) {
  BufferStream stream(raw, remote_ip);
  // As a kept-alive connection: requests until the input ends or one asks to close.
  for (int i = 0; i < 100 && !stream.exhausted(); ++i) {
    bool closed = false;
    if (!impl_->http->process_request(stream, false, closed, nullptr) || closed) break;
  }
  return std::move(stream.out());
}

int DashboardServer::port() const { return impl_->port; }
const std::string& DashboardServer::url() const { return impl_->url; }
DashboardData& DashboardServer::data() { return *impl_->data; }

void DashboardServer::Stop() {
  std::call_once(impl_->stop_once, [this] {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->stopping = true;
    }
    impl_->cv.notify_all();
    impl_->connections->Stop();
    if (impl_->sampler.joinable()) impl_->sampler.join();
  });
}

}  // namespace lathe::dashboard
