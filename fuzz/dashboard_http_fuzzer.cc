// Fuzz target: the dashboard's HTTP request handling (dashboard/server.h) with a token set:
// the bytes of one plain-HTTP connection (one or more requests) served in-process by
// DashboardServer::ServeBytes: cpp-httplib's parsing, the Host/Origin and token gate, the
// login form and its throttle, and every route, over a TunerService whose database holds a
// job and its measured records. The client address is derived from the input, so that the
// login throttle of one input does not decide the answers to the others. The harness logs in
// once (and again after an input that may have logged out) and writes the session id it got
// wherever an input says `$SESSION`, and the dashboard's own origin (its port is known only
// once it listens) wherever it says `$ORIGIN`, so that the routes behind the cookie check are
// reached the way a browser reaches them, not only through the token header.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "daemon/service.h"
#include "dashboard/server.h"
#include "fuzz/scratch.h"
#include "spdlog/spdlog.h"

namespace {

namespace v1 = lathe::v1;

constexpr char kDeviceClass[] = "cpu:Fuzz CPU:avx2:2c";

[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "dashboard fuzzer: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::abort();
}

// A job with measured records, so that the data endpoints have something to show: submitted,
// leased by a worker and answered.
void Populate(lathe::daemon::TunerService& s) {
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->add_workloads("matmul:m=16,n=16,k=16");
  submit.mutable_spec()->set_device_class(kDeviceClass);
  submit.mutable_spec()->set_trials(8);
  submit.mutable_spec()->set_batch(8);
  submit.mutable_spec()->set_min_repeat_ms(1);
  absl::StatusOr<v1::SubmitJobResponse> job = s.SubmitJob(submit);
  if (!job.ok()) Die("submit", job.status());
  v1::RegisterRequest reg;
  reg.set_hostname("fuzz-worker");
  v1::DeviceInfo* d = reg.add_devices();
  d->set_device_class(kDeviceClass);
  d->set_kind("cpu");
  absl::StatusOr<v1::RegisterResponse> worker = s.Register(reg);
  if (!worker.ok()) Die("register", worker.status());
  v1::LeaseRequest lease;
  lease.set_worker_id(worker->worker_id());
  lease.set_worker_secret(worker->worker_secret());
  lease.set_device_class(kDeviceClass);
  lease.set_max_tasks(8);
  lease.set_wait_ms(5000);
  absl::StatusOr<v1::LeaseResponse> leased = s.Lease(lease);
  if (!leased.ok()) Die("lease", leased.status());
  v1::ReportRequest report;
  report.set_worker_id(worker->worker_id());
  report.set_worker_secret(worker->worker_secret());
  report.set_lease_id(leased->lease_id());
  report.set_device_class(kDeviceClass);
  double median = 10;
  for (const v1::Task& t : leased->tasks()) {
    v1::MeasureResult* r = report.add_results();
    r->set_candidate_id(t.candidate_id());
    r->set_median_us(median);
    r->add_repeats_us(median);
    median += 1;
  }
  absl::StatusOr<v1::ReportResponse> reported = s.Report(report);
  if (!reported.ok()) Die("report", reported.status());
}

struct Dashboard {
  std::unique_ptr<lathe::daemon::TunerService> service;
  std::unique_ptr<lathe::dashboard::DashboardServer> server;
  std::string session;  // the value of the session cookie of the harness's own login
  std::string origin;   // "http://lathe.example:PORT"
};

// Writes `value` wherever `raw` says `mark`.
void Substitute(std::string& raw, std::string_view mark, const std::string& value) {
  for (size_t at = raw.find(mark); at != std::string::npos;
       at = raw.find(mark, at + value.size())) {
    raw.replace(at, mark.size(), value);
  }
}

// Logs in as a browser would (the login form, from loopback) and keeps the session id that
// the answer's Set-Cookie carries.
void LogIn(Dashboard& d) {
  constexpr std::string_view kBody = "token=fuzz-token";
  const std::string login =
      "POST /login HTTP/1.1\r\nHost: lathe.example\r\nOrigin: " + d.origin +
      "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\n\r\n" + std::string(kBody);
  const std::string answer = d.server->ServeBytes(login, "127.0.0.1");
  constexpr std::string_view kCookie = "lathe_session=";
  const size_t at = answer.find(kCookie);
  if (at == std::string::npos) {
    Die("login", absl::InternalError("the dashboard set no session cookie: " + answer));
  }
  const size_t begin = at + kCookie.size();
  d.session = answer.substr(begin, answer.find_first_of(";\r\n", begin) - begin);
  if (d.session.empty()) Die("login", absl::InternalError("an empty session id"));
}

Dashboard* Start() {
  auto* d = new Dashboard;
  lathe::daemon::ServiceOptions o;
  o.db_path = lathe::fuzz::ScratchDir() + "/tuning.db";
  o.search.population = 16;
  o.search.generations = 1;
  o.search.threads = 1;
  o.use_cost_model = false;
  o.remeasure_top = 0;
  absl::StatusOr<std::unique_ptr<lathe::daemon::TunerService>> service =
      lathe::daemon::TunerService::Create(o);
  if (!service.ok()) Die("service", service.status());
  d->service = std::move(*service);
  Populate(*d->service);
  lathe::dashboard::ServerOptions so;
  so.listen = "127.0.0.1:0";
  so.token = "fuzz-token";
  so.allowed_hosts = {"lathe.example"};
  so.data.db_path = o.db_path;
  so.data.state_cache_ms = 0;  // every request builds the state it shows
  absl::StatusOr<std::unique_ptr<lathe::dashboard::DashboardServer>> server =
      lathe::dashboard::DashboardServer::Start(d->service.get(), so);
  if (!server.ok()) Die("dashboard", server.status());
  d->server = std::move(*server);
  d->origin = "http://lathe.example:" + std::to_string(d->server->port());
  LogIn(*d);
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Dashboard* dashboard = Start();
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 16777619u;
  const std::string remote = "10." + std::to_string(h >> 24) + "." +
                             std::to_string((h >> 16) & 255) + "." + std::to_string(h & 255);
  std::string raw(reinterpret_cast<const char*>(data), size);
  Substitute(raw, "$SESSION", dashboard->session);
  Substitute(raw, "$ORIGIN", dashboard->origin);
  (void)dashboard->server->ServeBytes(raw, remote);
  // A request of this input may have ended the session: take a fresh one for the next.
  if (raw.find("logout") != std::string::npos) LogIn(*dashboard);
  return 0;
}
