// The daemon against hostile callers (issue 31), with real components (service_fixture.h): one
// authentication gate in front of every service on the port (health and reflection included),
// separate client and worker credentials, worker ids bound to their registration by a secret,
// reports counted only from the worker holding the lease, bounded registration strings, lost
// workers forgotten, a default device class that later registrations cannot make ambiguous,
// and request text escaped in the log.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "codegen/host.h"
#include "daemon/grpc_server.h"
#include "daemon/log_text.h"
#include "daemon/metrics.h"
#include "lathe/v1/service.grpc.pb.h"
#include "tests/daemon/generic_call.h"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon {
namespace {

using service_testing::kDeviceClass;
using service_testing::ServiceTest;
namespace v1 = lathe::v1;

using ::lathe::testing::GenericCall;

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kReflection[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
// ServerReflectionRequest{list_services: "*"}: field 7, length 1.
const std::string kListServices("\x3a\x01*", 3);

TEST_F(ServiceTest, HealthAndReflectionPassTheGateLikeEveryCall) {
  StartServer(Options(), "s3cret");
  const std::string address = server_->address();
  EXPECT_EQ(GenericCall(address, kHealthCheck, "", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GenericCall(address, kHealthCheck, "", "wrong").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(GenericCall(address, kHealthCheck, "", "s3cret").ok());
  // Reflection is off by default: not even the token reaches it.
  EXPECT_EQ(GenericCall(address, kReflection, kListServices, "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GenericCall(address, kReflection, kListServices, "s3cret").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // An unknown method is refused before gRPC looks it up.
  EXPECT_EQ(GenericCall(address, "/no.Such/Method", "", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServiceTest, ReflectionWhenAskedForStillNeedsTheToken) {
  auto s = TunerService::Create(Options());
  ASSERT_TRUE(s.ok()) << s.status();
  service_ = std::move(*s);
  GrpcServerOptions g;
  g.token = "s3cret";
  g.reflection = true;
  auto srv = GrpcServer::Start(service_.get(), g);
  ASSERT_TRUE(srv.ok()) << srv.status();
  server_ = std::move(*srv);
  EXPECT_EQ(GenericCall(server_->address(), kReflection, kListServices, "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  std::string listed;
  grpc::Status st = GenericCall(server_->address(), kReflection, kListServices, "s3cret", &listed);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_NE(listed.find("lathe.v1.WorkerService"), std::string::npos);
}

TEST_F(ServiceTest, WorkerAndClientTokensKeepTheirRoles) {
  // Inconsistent tokens are refused at start.
  {
    auto s = TunerService::Create(Options());
    ASSERT_TRUE(s.ok()) << s.status();
    GrpcServerOptions g;
    g.worker_token = "w";
    EXPECT_EQ(GrpcServer::Start(s->get(), g).status().code(), absl::StatusCode::kInvalidArgument);
    g.token = "w";
    EXPECT_EQ(GrpcServer::Start(s->get(), g).status().code(), absl::StatusCode::kInvalidArgument);
  }
  StartServer(Options(), "client-tok", "worker-tok");
  v1::RegisterRequest reg;
  reg.set_hostname("host-a");
  reg.add_devices()->set_device_class(kDeviceClass);
  v1::RegisterResponse rr;
  EXPECT_EQ(worker_->Register(Ctx("client-tok").get(), reg, &rr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(worker_->Register(Ctx("worker-tok").get(), reg, &rr).ok());
  v1::ReportRequest rep;
  rep.set_worker_id(rr.worker_id());
  rep.set_worker_secret(rr.worker_secret());
  v1::ReportResponse rp;
  EXPECT_EQ(worker_->Report(Ctx("client-tok").get(), rep, &rp).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(worker_->Report(Ctx("worker-tok").get(), rep, &rp).ok());
  v1::HeartbeatRequest hb;
  hb.set_worker_id(rr.worker_id());
  v1::HeartbeatResponse hr;
  EXPECT_EQ(worker_->Heartbeat(Ctx("client-tok").get(), hb, &hr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  v1::SubmitJobRequest sub;
  sub.mutable_spec()->add_workloads(service_testing::kSpec);
  sub.mutable_spec()->set_device_class(kDeviceClass);
  sub.mutable_spec()->set_trials(4);
  v1::SubmitJobResponse sr;
  EXPECT_EQ(tuner_->SubmitJob(Ctx("worker-tok").get(), sub, &sr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(tuner_->SubmitJob(Ctx("client-tok").get(), sub, &sr).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(sr.job_id());
  v1::CancelJobResponse cr;
  EXPECT_EQ(tuner_->CancelJob(Ctx("worker-tok").get(), cancel, &cr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Reading takes either; nothing takes a wrong token.
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(tuner_->ListJobs(Ctx("worker-tok").get(), {}, &jobs).ok());
  EXPECT_TRUE(tuner_->ListJobs(Ctx("client-tok").get(), {}, &jobs).ok());
  EXPECT_EQ(tuner_->ListJobs(Ctx("worker-tokX").get(), {}, &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(tuner_->CancelJob(Ctx("client-tok").get(), cancel, &cr).ok());
}

TEST_F(ServiceTest, WorkerIdBelongsToTheWorkerThatRegisteredIt) {
  StartServer(Options());
  const std::string a = RegisterWorker("host-a");
  v1::RegisterRequest steal;
  steal.set_hostname("intruder");
  steal.add_devices()->set_device_class(kDeviceClass);
  steal.set_worker_id(a);
  v1::RegisterResponse rr;
  EXPECT_EQ(worker_->Register(Ctx().get(), steal, &rr).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  steal.set_worker_secret("guess");
  EXPECT_EQ(worker_->Register(Ctx().get(), steal, &rr).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // Its own worker re-registers it (a reconnect), keeping id and secret.
  steal.set_hostname("host-a");
  steal.set_worker_secret(Secret(a));
  ASSERT_TRUE(worker_->Register(Ctx().get(), steal, &rr).ok());
  EXPECT_EQ(rr.worker_id(), a);
  EXPECT_EQ(rr.worker_secret(), Secret(a));
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(tuner_->ListWorkers(Ctx().get(), {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).hostname(), "host-a");

  // Without its secret, nobody leases, heartbeats or releases as `a`.
  v1::LeaseRequest lease;
  lease.set_worker_id(a);
  lease.set_max_tasks(1);
  v1::LeaseResponse lr;
  EXPECT_EQ(worker_->Lease(Ctx().get(), lease, &lr).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_worker_secret("guess");
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(worker_->Heartbeat(Ctx().get(), hb, &hr).ok());
  EXPECT_TRUE(hr.reregister());
  v1::ReleaseRequest rel;
  rel.set_worker_id(a);
  rel.set_lease_request_id("x");
  v1::ReleaseResponse relr;
  EXPECT_EQ(worker_->Release(Ctx().get(), rel, &relr).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ReportRequest rep;
  rep.set_worker_id(a);
  v1::ReportResponse rp;
  EXPECT_EQ(worker_->Report(Ctx().get(), rep, &rp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, ResultsCountOnlyFromTheWorkerHoldingTheLease) {
  StartServer(Options());
  Submit(8, 8);
  const std::string a = RegisterWorker("host-a");
  const std::string b = RegisterWorker("host-b");
  v1::LeaseResponse la = Lease(a, 4);
  ASSERT_EQ(la.tasks_size(), 4);
  // b answers a's lease, by its id or under a lease of its own name: rejected, not stored.
  v1::ReportRequest forged = OkReport(b, la);
  v1::ReportResponse r = Report(forged);
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.rejected(), 4);
  forged.set_lease_id("lease-of-b");
  r = Report(forged);
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.rejected(), 4);
  // a under another lease id: rejected too.
  v1::ReportRequest wrong_lease = OkReport(a, la);
  wrong_lease.set_lease_id("lease-000000000000");
  EXPECT_EQ(Report(wrong_lease).rejected(), 4);
  EXPECT_EQ(StoredRecords(), 0);
  // a under its lease: stored; b's replay of it now is only a duplicate.
  r = Report(OkReport(a, la));
  EXPECT_EQ(r.accepted(), 4);
  r = Report(OkReport(b, la));
  EXPECT_EQ(r.accepted(), 0);
  EXPECT_EQ(r.duplicates(), 4);
  EXPECT_EQ(StoredRecords(), 4);
}

TEST_F(ServiceTest, RegistrationStringsAreBoundedAndWorkersCapped) {
  ServiceOptions o = Options();
  o.max_workers = 2;
  StartServer(o);
  auto attempt = [&](const std::function<void(v1::RegisterRequest*)>& edit) {
    v1::RegisterRequest req;
    req.set_hostname("host-a");
    v1::DeviceInfo* d = req.add_devices();
    d->set_device_class(kDeviceClass);
    d->set_kind("cpu");
    d->set_name("Test CPU");
    edit(&req);
    v1::RegisterResponse resp;
    return worker_->Register(Ctx().get(), req, &resp).error_code();
  };
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) { r->set_hostname(std::string(1 << 20, 'h')); }),
            kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) { r->set_hostname("h\nevent=forged"); }), kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) { r->set_hostname("h\x1b[31m"); }), kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) {
              r->mutable_devices(0)->set_device_class(std::string(300, 'c'));
            }),
            kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) {
              r->mutable_devices(0)->set_name(std::string(1000, 'n'));
            }),
            kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) { r->set_lathe_version("v\r1"); }), kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) {  // each string short, together too long
              for (int i = 0; i < 60; ++i) {
                r->add_devices()->set_device_class("cpu:" + std::string(200, 'a' + i % 26));
              }
            }),
            kInvalid);
  EXPECT_EQ(attempt([](v1::RegisterRequest* r) { r->set_worker_id("w/../x"); }), kInvalid);
  // Two workers fit; a third does not.
  EXPECT_EQ(attempt([](v1::RegisterRequest*) {}), grpc::StatusCode::OK);
  EXPECT_EQ(attempt([](v1::RegisterRequest*) {}), grpc::StatusCode::OK);
  EXPECT_EQ(attempt([](v1::RegisterRequest*) {}), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServiceTest, LostWorkersAreForgotten) {
  ServiceOptions o = Options();
  o.heartbeat_interval_ms = 50;
  o.lost_after_heartbeats = 1;
  o.forget_lost_after_ms = 200;
  o.max_workers = 1;
  StartServer(o);
  const std::string a = RegisterWorker("host-a");
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(tuner_->ListWorkers(Ctx().get(), {}, &workers).ok());
  EXPECT_EQ(workers.workers_size(), 1);
  for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       workers.workers_size() > 0 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(tuner_->ListWorkers(Ctx().get(), {}, &workers).ok());
  }
  EXPECT_EQ(workers.workers_size(), 0) << "a lost worker was never forgotten";
  // Its heartbeat tells it to register again, and the freed place takes a new worker.
  v1::HeartbeatRequest hb;
  hb.set_worker_id(a);
  hb.set_worker_secret(Secret(a));
  v1::HeartbeatResponse hr;
  ASSERT_TRUE(worker_->Heartbeat(Ctx().get(), hb, &hr).ok());
  EXPECT_TRUE(hr.reregister());
  EXPECT_FALSE(RegisterWorker("host-b").empty());
}

TEST_F(ServiceTest, LaterRegistrationsNeverMakeTheDefaultDeviceClassAmbiguous) {
  StartServer(Options());
  auto default_class = [&]() {
    v1::QueryBestRequest q;
    q.set_workload(service_testing::kSpec);
    v1::QueryBestResponse resp;
    grpc::Status st = tuner_->QueryBest(Ctx().get(), q, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp.device_class();
  };
  auto register_class = [&](const std::string& host, const std::string& dc) {
    v1::RegisterRequest req;
    req.set_hostname(host);
    req.add_devices()->set_device_class(dc);
    v1::RegisterResponse resp;
    EXPECT_TRUE(worker_->Register(Ctx().get(), req, &resp).ok());
  };
  const std::string host = codegen::HostDeviceClass();
  EXPECT_EQ(default_class(), host);  // no worker: the daemon's host
  // The first fleet's class, then two classes registered later: the default stays.
  register_class("real", kDeviceClass);
  EXPECT_EQ(default_class(), kDeviceClass);
  register_class("fake-1", "cpu:Fake One:avx2:64c");
  register_class("fake-2", "cpu:Fake Two:avx512:128c");
  EXPECT_EQ(default_class(), kDeviceClass);
  // A worker of the daemon's own class makes it the default.
  register_class("local", host);
  EXPECT_EQ(default_class(), host);
  // A job without a device class is accepted.
  v1::SubmitJobRequest sub;
  sub.mutable_spec()->add_workloads(service_testing::kSpec);
  sub.mutable_spec()->set_trials(4);
  v1::SubmitJobResponse sr;
  grpc::Status st = tuner_->SubmitJob(Ctx().get(), sub, &sr);
  EXPECT_TRUE(st.ok()) << st.error_message();
}

TEST(LogTextTest, EscapesWhatCouldForgeALineAndCutsLongText) {
  EXPECT_EQ(LogText("host-a"), "host-a");
  EXPECT_EQ(LogText("a\nevent=forged \"x\" \\"), "a\\nevent=forged \\\"x\\\" \\\\");
  EXPECT_EQ(LogText(std::string("\x1b[2J\r\x7f", 6)), "\\x1b[2J\\x0d\\x7f");
  EXPECT_EQ(LogText(std::string(1000, 'h'), 8), "hhhhhhhh...");
}

// A plain HTTP/1.0 GET of `path` on 127.0.0.1:`port`; the whole answer.
std::string HttpGet(int port, const std::string& path, const std::string& headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + headers + "\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

TEST(MetricsAuthTest, WithATokenMetricsNeedItAsTheBasicAuthPassword) {
  auto metrics = Metrics::Create("127.0.0.1:0", "s3cret");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const int port = (*metrics)->port();
  ASSERT_GT(port, 0);
  std::string open = HttpGet(port, "/metrics");
  EXPECT_NE(open.find(" 401 "), std::string::npos) << open.substr(0, 200);
  EXPECT_EQ(open.find("lathed_"), std::string::npos);
  // "lathe:wrong" and "prometheus:s3cret" in base64.
  std::string wrong = HttpGet(port, "/metrics", "Authorization: Basic bGF0aGU6d3Jvbmc=\r\n");
  EXPECT_NE(wrong.find(" 401 "), std::string::npos) << wrong.substr(0, 200);
  std::string right =
      HttpGet(port, "/metrics", "Authorization: Basic cHJvbWV0aGV1czpzM2NyZXQ=\r\n");
  EXPECT_NE(right.find(" 200 "), std::string::npos) << right.substr(0, 200);
  EXPECT_NE(right.find("lathed_"), std::string::npos);
}

}  // namespace
}  // namespace lathe::daemon
