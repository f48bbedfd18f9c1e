// lathed: the tuner daemon (CONTRACT.md). Serves the Tuner and WorkerService gRPC services
// over a tuning database; SIGTERM or SIGINT stop it gracefully (no new calls, calls in
// flight finish within 5 s, job threads stop, the database is closed; unfinished jobs resume
// on the next start).
//
// Secure by default off loopback: a --listen address other than a loopback one (127.0.0.0/8,
// ::1, localhost) without a token or mTLS is refused, since anyone who reaches the port could
// submit jobs and lease work; --insecure accepts it with a warning at every start. A token
// without TLS off loopback is accepted with a warning (it travels in plain text). The same
// holds for --metrics and --http: off loopback they need a token (or mTLS for --http) unless
// --insecure; with a token, /metrics answers only basic authentication with the token as the
// password, and the dashboard only the token or a session.
//
// Roles: --worker-token-file gives workers a credential of their own beside --token-file's
// (daemon/grpc_server.h): then a client's token cannot register, lease, report or heartbeat,
// and a worker's cannot submit or cancel jobs. --token-file alone serves both roles.
//
// gRPC reflection is served only with --reflection (behind the token like every call).
//
// --health HOST:PORT serves the standard gRPC health service alone, in plain text, on a port
// of its own, for probes that cannot speak TLS (Kubernetes' gRPC probes): SERVING while the
// daemon serves, NOT_SERVING once it stops. Nothing else is reachable on that port.
#include <arpa/inet.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "codegen/host.h"
#include "daemon/grpc_server.h"
#include "daemon/metrics.h"
#include "daemon/service.h"
#include "dashboard/server.h"
#include "db/location.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tools/db_option.h"

namespace {

// True when the host of HOST:PORT (IPv6 in brackets) can only be reached from this machine:
// 127.0.0.0/8, ::1 or localhost. Anything else, a wildcard or a name included, is not.
bool IsLoopbackListen(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  return inet_pton(AF_INET6, host.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

}  // namespace

int main(int argc, char** argv) {
  if (absl::Status isa = lathe::codegen::CheckCpuIsaCap(); !isa.ok()) {
    std::fprintf(stderr, "lathed: %s\n", std::string(isa.message()).c_str());
    return 2;
  }
  CLI::App app{"lathed: the lathe tuner daemon (jobs, workers, tuning database)"};
  std::string listen, db_path, token_file, tls_cert, tls_key, tls_client_ca, metrics_addr;
  std::string http_addr, library_figures;
  std::string health_addr, worker_token_file;
  std::vector<std::string> http_hosts;
  int heartbeat_ms = 10000, lease_ms = 120000;
  int search_threads = lathe::daemon::DefaultSearchThreads(), search_nice = 10;
  int remeasure_top = 5;
  bool insecure = false, reflection = false;
  app.add_option("--listen", listen, "HOST:PORT to serve gRPC on (port 0 picks one)")->required();
  app.add_option("--db", db_path,
                 "tuning database: a SQLite file (created when missing), or a PostgreSQL URL "
                 "postgresql://[user[:password]@]host[:port]/dbname[?...] (the database must "
                 "exist; its schema is created when missing) that several daemons share")
      ->required()
      ->check(lathe::tools::DatabaseLocationCheck());
  app.add_option("--token-file", token_file,
                 "file holding a shared secret; calls must send 'authorization: Bearer <it>'");
  app.add_option("--worker-token-file", worker_token_file,
                 "file holding the workers' own secret (needs --token-file, whose token then "
                 "serves clients only): workers send 'authorization: Bearer <it>'");
  app.add_flag("--reflection", reflection,
               "serve gRPC server reflection (for grpcurl; behind the token like every call)");
  auto* cert = app.add_option("--tls-cert", tls_cert, "server certificate (PEM): enables TLS");
  auto* key = app.add_option("--tls-key", tls_key, "server private key (PEM)");
  auto* ca = app.add_option("--tls-client-ca", tls_client_ca,
                            "CA (PEM) that client certificates must chain to (mTLS)");
  cert->needs(key);
  key->needs(cert);
  ca->needs(cert);
  app.add_option("--metrics", metrics_addr, "HOST:PORT to serve Prometheus /metrics on");
  app.add_option("--http", http_addr,
                 "HOST:PORT to serve the web dashboard on (off by default; same token and TLS "
                 "certificate as gRPC)");
  app.add_option("--http-host", http_hosts,
                 "a name the dashboard is reached by (repeatable): requests whose Host header "
                 "names neither it, a loopback name, the --http host nor this machine's hostname "
                 "are refused");
  app.add_option("--library-figures", library_figures,
                 "JSON-lines file of library figures (lines of `lathe tune --json`) that the "
                 "dashboard draws beside the tuning curves")
      ->check(CLI::ExistingFile);
  app.add_option("--health", health_addr,
                 "HOST:PORT to serve the gRPC health service alone on, in plain text (for probes "
                 "that cannot speak TLS; port 0 picks one)");
  app.add_option("--heartbeat-ms", heartbeat_ms, "heartbeat interval told to workers")
      ->check(CLI::Range(100, 3600000));
  app.add_option("--lease-ms", lease_ms, "lease duration without a heartbeat")
      ->check(CLI::Range(100, 86400000));
  app.add_option(
         "--search-threads", search_threads,
         "search threads, shared by every job: at most N rounds searched at once, one per task "
         "(default: every core; 0: every core); a round alone scores on all N")
      ->check(CLI::Range(0, 1024));
  app.add_option("--search-nice", search_nice,
                 "nice value of the search threads (default 10; 0: same priority as the RPCs)")
      ->check(CLI::Range(0, 19));
  app.add_option("--remeasure-top", remeasure_top,
                 "at the end of a job, re-time each workload's best N records never re-timed, "
                 "for 5x the job's min_repeat_ms (default 5; 0: off)")
      ->check(CLI::Range(0, 1000));
  app.add_flag("--insecure", insecure,
               "serve a non-loopback --listen address without a token or mTLS (anyone who "
               "reaches the port may submit jobs and lease work); warned about at every start");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  // Logs go to stderr; stdout carries only the "listening on" lines.
  spdlog::set_default_logger(spdlog::stderr_color_mt("lathed"));

  // Signals are taken by sigwait in this thread; every thread started later inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  lathe::daemon::GrpcServerOptions gopts;
  gopts.listen = listen;
  auto read = [](const std::string& path, bool trim, std::string* out) {
    absl::StatusOr<std::string> text = lathe::daemon::ReadSecretFile(path, trim);
    if (!text.ok()) {
      std::fprintf(stderr, "lathed: %s\n", std::string(text.status().message()).c_str());
      return false;
    }
    *out = std::move(*text);
    return true;
  };
  if (!token_file.empty() && !read(token_file, true, &gopts.token)) return 2;
  if (!worker_token_file.empty()) {
    if (token_file.empty()) {
      std::fprintf(stderr, "lathed: --worker-token-file needs --token-file (the clients' token)\n");
      return 2;
    }
    if (!read(worker_token_file, true, &gopts.worker_token)) return 2;
    if (gopts.worker_token == gopts.token) {
      std::fprintf(stderr, "lathed: the worker token and the client token are the same\n");
      return 2;
    }
  }
  gopts.reflection = reflection;
  if (!tls_cert.empty() && !read(tls_cert, false, &gopts.tls_cert_pem)) return 2;
  if (!tls_key.empty() && !read(tls_key, false, &gopts.tls_key_pem)) return 2;
  if (!tls_client_ca.empty() && !read(tls_client_ca, false, &gopts.tls_client_ca_pem)) return 2;

  // Secure by default off loopback (see the file comment).
  const bool loopback = IsLoopbackListen(listen);
  const bool authenticated = !gopts.token.empty() || !gopts.tls_client_ca_pem.empty();
  if (!loopback && !authenticated && !insecure) {
    std::fprintf(stderr,
                 "lathed: refusing to serve %s without authentication: anyone who reaches it "
                 "could submit jobs and lease work. Give a token (e.g. `umask 077; head -c 32 "
                 "/dev/urandom | base64 > /etc/lathe/token`, then --token-file /etc/lathe/token "
                 "here and on every worker and client), or require client certificates "
                 "(--tls-cert F --tls-key F --tls-client-ca F), or listen on 127.0.0.1; "
                 "--insecure serves it open all the same\n",
                 listen.c_str());
    return 2;
  }
  // The same for the other ports that answer with the daemon's state (see the file comment).
  if (!metrics_addr.empty() && !IsLoopbackListen(metrics_addr) && gopts.token.empty() &&
      !insecure) {
    std::fprintf(stderr,
                 "lathed: refusing to serve --metrics on %s without a token: anyone who reaches "
                 "it could read the daemon's state. Give --token-file (Prometheus then sends it "
                 "as the basic-auth password), or listen on 127.0.0.1; --insecure serves it "
                 "open all the same\n",
                 metrics_addr.c_str());
    return 2;
  }
  if (!http_addr.empty() && !IsLoopbackListen(http_addr) && !authenticated && !insecure) {
    std::fprintf(stderr,
                 "lathed: refusing to serve the dashboard on %s without authentication: anyone "
                 "who reaches it could read the daemon's state and cancel jobs. Give "
                 "--token-file or require client certificates, or listen on 127.0.0.1; "
                 "--insecure serves it open all the same\n",
                 http_addr.c_str());
    return 2;
  }

  std::unique_ptr<lathe::daemon::Metrics> metrics;
  {
    absl::StatusOr<std::unique_ptr<lathe::daemon::Metrics>> m =
        lathe::daemon::Metrics::Create(metrics_addr, gopts.token);
    if (!m.ok()) {
      std::fprintf(stderr, "lathed: %s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    metrics = std::move(*m);
  }

  lathe::daemon::ServiceOptions sopts;
  sopts.db_path = db_path;
  sopts.heartbeat_interval_ms = heartbeat_ms;
  sopts.lease_duration_ms = lease_ms;
  sopts.metrics = metrics.get();
  sopts.search.threads = search_threads;
  sopts.search_nice = search_nice;
  sopts.remeasure_top = remeasure_top;
  absl::StatusOr<std::unique_ptr<lathe::daemon::TunerService>> service =
      lathe::daemon::TunerService::Create(sopts);
  if (!service.ok()) {
    std::fprintf(stderr, "lathed: database %s: %s\n",
                 lathe::db::RedactDatabaseLocation(db_path).c_str(),
                 service.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<std::unique_ptr<lathe::daemon::GrpcServer>> server =
      lathe::daemon::GrpcServer::Start(service->get(), gopts);
  if (!server.ok()) {
    std::fprintf(stderr, "lathed: %s\n", std::string(server.status().message()).c_str());
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::unique_ptr<lathe::dashboard::DashboardServer> dashboard;
  if (!http_addr.empty()) {
    lathe::dashboard::ServerOptions dopts;
    dopts.listen = http_addr;
    dopts.allowed_hosts = http_hosts;
    dopts.token = gopts.token;
    dopts.tls_cert_pem = gopts.tls_cert_pem;
    dopts.tls_key_pem = gopts.tls_key_pem;
    dopts.tls_client_ca_pem = gopts.tls_client_ca_pem;
    dopts.data.db_path = db_path;
    dopts.data.library_figures = library_figures;
    absl::StatusOr<std::unique_ptr<lathe::dashboard::DashboardServer>> d =
        lathe::dashboard::DashboardServer::Start(service->get(), dopts);
    if (!d.ok()) {
      std::fprintf(stderr, "lathed: dashboard: %s\n", std::string(d.status().message()).c_str());
      (*server)->Shutdown(std::chrono::milliseconds(0));
      (*server)->Wait();
      (*service)->Shutdown();
      return d.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    dashboard = std::move(*d);
  }
  // The health-only server: built after the main one, whose Start enabled gRPC's default
  // health service (every server built since has one).
  // Every other method of the health port answers UNIMPLEMENTED; this also gives the server
  // the polled queue gRPC wants when it has no synchronous service.
  grpc::CallbackGenericService health_others;
  std::unique_ptr<grpc::Server> health;
  int health_port = 0;
  if (!health_addr.empty()) {
    grpc::ServerBuilder b;
    b.SetOption(lathe::daemon::ReflectionOption(false));  // health alone, nothing else
    b.RegisterCallbackGenericService(&health_others);
    b.AddListeningPort(health_addr, grpc::InsecureServerCredentials(), &health_port);
    health = b.BuildAndStart();
    if (health == nullptr || health_port == 0) {
      std::fprintf(stderr, "lathed: cannot serve health on %s\n", health_addr.c_str());
      return 1;
    }
    health->GetHealthCheckService()->SetServingStatus(true);
  }
  std::printf("lathed: listening on %s\n", (*server)->address().c_str());
  if (dashboard) std::printf("lathed: dashboard on %s\n", dashboard->url().c_str());
  if (health) std::printf("lathed: health on port %d\n", health_port);
  if (metrics->port() != 0) std::printf("lathed: metrics on port %d\n", metrics->port());
  std::fflush(stdout);
  spdlog::info(
      "event=started listen={} http={} db=\"{}\" auth={} tls={}", (*server)->address(),
      dashboard ? dashboard->url() : "off", lathe::db::RedactDatabaseLocation(db_path),
      gopts.token.empty() ? "none" : (gopts.worker_token.empty() ? "token" : "client+worker"),
      gopts.tls_cert_pem.empty() ? "off" : (gopts.tls_client_ca_pem.empty() ? "on" : "mtls"));
  if (!loopback && !authenticated) {
    spdlog::warn(
        "event=insecure listen={}: no token and no client certificates (--insecure); anyone "
        "who reaches this address may submit jobs and lease work",
        (*server)->address());
  } else if (!loopback && gopts.tls_cert_pem.empty()) {
    spdlog::warn(
        "event=plaintext_token listen={}: the token travels in plain text and can be read on "
        "the network; add --tls-cert and --tls-key (and --tls-ca on the workers and clients)",
        (*server)->address());
  }

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("event=stopping signal={}", sig);
  if (dashboard) dashboard->Stop();
  if (health) health->GetHealthCheckService()->SetServingStatus(false);
  (*server)->Shutdown(std::chrono::milliseconds(5000));
  (*server)->Wait();
  (*service)->Shutdown();
  if (health) health->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server->reset();
  service->reset();
  spdlog::info("event=stopped");
  return 0;
}
