#include "dashboard/server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "dashboard/assets.h"
#include "dashboard/auth.h"
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

}  // namespace

struct DashboardServer::Impl {
  tuner::TunerService* service = nullptr;
  ServerOptions options;
  std::unique_ptr<DashboardData> data;
  std::unique_ptr<Authenticator> auth;
  std::unique_ptr<httplib::Server> http;
  bool tls = false;
  int port = 0;
  std::string url;
  std::thread listener;
  std::atomic<bool> listener_done{false};
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

  // Every request passes here first: the token check (see server.h).
  httplib::Server::HandlerResponse Gate(const httplib::Request& req, httplib::Response& res) {
    if (req.path == "/healthz" || req.path == "/login")
      return httplib::Server::HandlerResponse::Unhandled;
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
      std::optional<std::string> session = auth->Login(req.get_param_value("token"));
      if (!session) {
        spdlog::warn("event=dashboard_login result=refused remote={}", req.remote_addr);
        return SendLogin(res, 401, "wrong token");
      }
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
      spdlog::debug("event=http method={} path=\"{}\" status={} remote={}", req.method, req.path,
                    res.status, req.remote_addr);
    });
    s.set_default_headers({{"X-Content-Type-Options", "nosniff"},
                           {"Referrer-Policy", "no-referrer"},
                           {"X-Frame-Options", "DENY"},
                           {"Cache-Control", "no-store"}});
  }
};

absl::StatusOr<std::unique_ptr<DashboardServer>> DashboardServer::Start(
    tuner::TunerService* service, const ServerOptions& options) {
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

  auto impl = std::make_unique<Impl>();
  impl->service = service;
  impl->options = options;
  impl->auth = std::make_unique<Authenticator>(options.token);
  absl::StatusOr<std::unique_ptr<DashboardData>> data =
      DashboardData::Create(service, options.data);
  if (!data.ok()) return data.status();
  impl->data = std::move(*data);

  if (options.tls_cert_pem.empty()) {
    impl->http = std::make_unique<httplib::Server>();
  } else {
    std::string error;
    auto ssl = std::make_unique<httplib::SSLServer>(
        [&](SSL_CTX& ctx) { return SetupTls(ctx, options, &error); });
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(error.empty() ? std::string("cannot set up TLS") : error);
    }
    impl->http = std::move(ssl);
    impl->tls = true;
  }
  const int threads = std::max(2, options.threads);
  impl->http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl->http->set_tcp_nodelay(true);
  // cpp-httplib's default adds SO_REUSEPORT, with which a second daemon could bind the same
  // port and share its connections: only SO_REUSEADDR (a restart need not wait for TIME_WAIT).
  impl->http->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  impl->http->set_keep_alive_max_count(1000);
  impl->http->set_keep_alive_timeout(5);
  impl->http->set_payload_max_length(64 << 10);
  impl->Routes();

  if (port == 0) {
    port = impl->http->bind_to_any_port(host);
    if (port < 0) port = 0;
  } else if (!impl->http->bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    return absl::UnavailableError(absl::StrCat("http: cannot listen on ", options.listen));
  }
  impl->port = port;
  impl->url =
      absl::StrCat(impl->tls ? "https://" : "http://", options.listen.substr(0, colon), ":", port);
  Impl* raw = impl.get();
  impl->listener = std::thread([raw] {
    raw->http->listen_after_bind();
    raw->listener_done = true;
  });
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
    // stop() does nothing before listen_after_bind has started its loop: wait for that.
    bool stopped = false;
    while (!impl_->listener_done.load()) {
      if (!stopped && impl_->http->is_running()) {
        impl_->http->stop();
        stopped = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (impl_->listener.joinable()) impl_->listener.join();
    if (impl_->sampler.joinable()) impl_->sampler.join();
  });
}

}  // namespace lathe::dashboard
