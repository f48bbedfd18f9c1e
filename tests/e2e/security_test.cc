// End-to-end: lathed refuses workers and clients without its token before any handler runs,
// and answers malformed and oversized messages with INVALID_ARGUMENT / RESOURCE_EXHAUSTED
// while carrying on serving. Uses the raw generated stubs where the client library would not
// send such requests.
#include <grpcpp/grpcpp.h>

#include <nlohmann/json.hpp>

#include "lathe/v1/service.grpc.pb.h"
#include "tests/daemon/generic_call.h"
#include "tests/e2e/e2e_util.h"

namespace lathe::e2e {
namespace {

constexpr char kToken[] = "s3cret-token-for-e2e";

std::shared_ptr<grpc::Channel> Channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

TEST(SecurityTest, CallsWithoutTheTokenAreRefusedBeforeAnyHandler) {
  Cluster c;
  const std::string token_file = c.dir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ASSERT_TRUE(c.StartDaemon({"--token-file", token_file}));

  // A worker without the token is refused and says so; it never registers.
  Process* bad_worker = c.StartWorker();
  ASSERT_NE(bad_worker, nullptr);
  // A worker with it registers.
  ASSERT_NE(c.StartWorker({"--token-file", token_file}), nullptr);

  auto stub = lathe::v1::Tuner::NewStub(Channel(c.address()));
  auto wstub = lathe::v1::WorkerService::NewStub(Channel(c.address()));
  // A malformed spec without the token: UNAUTHENTICATED, not INVALID_ARGUMENT, so the
  // handler (which would validate the spec) never ran.
  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    SCOPED_TRACE("token '" + token + "'");
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    lathe::v1::SubmitJobRequest req;
    req.mutable_spec()->add_workloads("matmul:m=banana");
    lathe::v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();

    grpc::ClientContext rctx;
    rctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!token.empty()) rctx.AddMetadata("authorization", "Bearer " + token);
    lathe::v1::RegisterRequest rreq;
    rreq.set_hostname("intruder");
    lathe::v1::RegisterResponse rresp;
    s = wstub->Register(&rctx, rreq, &rresp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
    EXPECT_TRUE(rresp.worker_id().empty());
  }
  // The same malformed spec with the token reaches the handler.
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, kToken);
    lathe::v1::SubmitJobRequest req;
    req.mutable_spec()->add_workloads("matmul:m=banana");
    lathe::v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }

  // The client library without the token: UNAUTHENTICATED; with it, it works.
  auto anonymous = c.Client();
  ASSERT_NE(anonymous, nullptr);
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = anonymous->ListJobs();
  EXPECT_TRUE(absl::IsUnauthenticated(jobs.status())) << jobs.status();
  auto client = c.Client(kToken);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));

  // The CLI: exit 1 without the token file, 0 with it.
  const std::string lathe = LATHE_BIN;
  auto [rc, out] = RunCommand(lathe + " workers --json --tuner " + c.address() + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  auto [rc2, out2] =
      RunCommand(lathe + " workers --json --tuner " + c.address() + " --token-file " + token_file);
  ASSERT_EQ(rc2, 0) << out2;
  nlohmann::json w = nlohmann::json::parse(out2, nullptr, false);
  ASSERT_TRUE(w["workers"].is_array()) << out2;
  // Only the worker with the token is known (nor did the "intruder" register).
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client->ListWorkers();
  ASSERT_TRUE(ws.ok()) << ws.status();
  EXPECT_EQ(ws->size(), 1u);
  for (const auto& x : *ws) EXPECT_NE(x.hostname(), "intruder");
  // The refused worker gives up (a refused token is not retried forever) and says why.
  std::optional<int> exit = bad_worker->Wait(20000);
  ASSERT_TRUE(exit.has_value()) << "the worker without the token is still running";
  EXPECT_NE(*exit, 0);
  std::string log = ReadAll(bad_worker->log());
  EXPECT_TRUE(log.find("UNAUTHENTICATED") != std::string::npos ||
              log.find("token") != std::string::npos)
      << log;
}

// TLS and the token together, as deployed: a worker and the CLI with --tls-ca and
// --token-file run a job; a plaintext client gets nowhere.
TEST(SecurityTest, JobOverTlsWithTheToken) {
  Cluster c;
  const std::string dir = c.dir();
  std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no openssl to make a test certificate";
  const std::string token_file = dir + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ASSERT_TRUE(c.StartDaemon({"--token-file", token_file, "--tls-cert", dir + "/cert.pem",
                             "--tls-key", dir + "/key.pem"}));
  ASSERT_NE(c.StartWorker({"--token-file", token_file, "--tls-ca", dir + "/cert.pem"}), nullptr);

  const std::string lathe = LATHE_BIN;
  const std::string remote =
      " --tuner " + c.address() + " --token-file " + token_file + " --tls-ca " + dir + "/cert.pem";
  bool registered = false;
  for (auto until = Clock::now() + std::chrono::seconds(30); !registered && Clock::now() < until;) {
    auto [rc, out] = RunCommand(lathe + " workers --json" + remote);
    ASSERT_EQ(rc, 0) << out;
    registered = nlohmann::json::parse(out, nullptr, false)["workers"].size() == 1;
    if (!registered) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(registered) << "the TLS worker did not register";
  auto [rc, out] =
      RunCommand(lathe + " tune --json --workload matmul:m=16,n=16,k=16 --trials 8 " +
                 "--batch 8 --min-repeat-ms 2 --no-baseline" + remote + " 2>/dev/null");
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_EQ(j["trials"], 8) << out;
  EXPECT_EQ(j["state"], "done") << out;

  // Plaintext to a TLS port: no connection; TLS without the token: refused.
  auto [prc, pout] =
      RunCommand(lathe + " jobs --tuner " + c.address() + " --token-file " + token_file + " 2>&1");
  EXPECT_EQ(prc, 1) << pout;
  auto [trc, tout] =
      RunCommand(lathe + " jobs --tuner " + c.address() + " --tls-ca " + dir + "/cert.pem 2>&1");
  EXPECT_EQ(trc, 1) << tout;
  EXPECT_NE(tout.find("lathed at " + c.address()), std::string::npos) << tout;
}

TEST(SecurityTest, MalformedAndOversizedMessagesLeaveTheDaemonServing) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon());
  auto channel = Channel(c.address());
  auto stub = lathe::v1::Tuner::NewStub(channel);
  auto wstub = lathe::v1::WorkerService::NewStub(channel);
  auto ctx_for = [](grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  };

  // Malformed requests: bad specs, absurd numbers, unknown ids.
  const std::vector<std::pair<std::string, std::function<void(lathe::v1::JobSpec*)>>> bad_specs = {
      {"no workloads", [](lathe::v1::JobSpec*) {}},
      {"unknown op", [](lathe::v1::JobSpec* s) { s->add_workloads("frobnicate:m=1"); }},
      {"bad key", [](lathe::v1::JobSpec* s) { s->add_workloads("matmul:m=1,n=1,k=1,zz=4"); }},
      {"negative trials",
       [](lathe::v1::JobSpec* s) {
         s->add_workloads("matmul:m=8,n=8,k=8");
         s->set_trials(-5);
       }},
      {"nan min_repeat_ms",
       [](lathe::v1::JobSpec* s) {
         s->add_workloads("matmul:m=8,n=8,k=8");
         s->set_min_repeat_ms(std::nan(""));
       }},
      {"bad target", [](lathe::v1::JobSpec* s) {
         s->add_workloads("matmul:m=8,n=8,k=8");
         s->set_target("tpu:9");
       }}};
  for (const auto& [what, fill] : bad_specs) {
    SCOPED_TRACE(what);
    grpc::ClientContext ctx;
    ctx_for(&ctx);
    lathe::v1::SubmitJobRequest req;
    fill(req.mutable_spec());
    lathe::v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx_for(&ctx);
    lathe::v1::LeaseRequest req;
    req.set_worker_id("nobody");
    req.set_max_tasks(1 << 30);
    req.set_wait_ms(-3);
    lathe::v1::LeaseResponse resp;
    grpc::Status s = wstub->Lease(&ctx, req, &resp);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::NOT_FOUND)
        << s.error_code() << " " << s.error_message();
    EXPECT_EQ(resp.tasks_size(), 0);
  }
  // Bytes that are not a protobuf at all, through the generic stub.
  {
    grpc::GenericStub generic(channel);
    grpc::ClientContext ctx;
    ctx_for(&ctx);
    std::string garbage = "\xff\xff\xff\xff\x0f\x0a\x80";
    grpc::Slice slice(garbage);
    grpc::ByteBuffer request(&slice, 1), response;
    grpc::CompletionQueue cq;
    std::unique_ptr<grpc::GenericClientAsyncResponseReader> call =
        generic.PrepareUnaryCall(&ctx, "/lathe.v1.Tuner/SubmitJob", request, &cq);
    call->StartCall();
    grpc::Status s;
    call->Finish(&response, &s, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_NE(s.error_code(), grpc::StatusCode::OK);
    EXPECT_TRUE(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                s.error_code() == grpc::StatusCode::INTERNAL)
        << s.error_code() << " " << s.error_message();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // An oversized message (8 MiB, over the 4 MiB limit) is refused by gRPC itself.
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext ctx;
    ctx_for(&ctx);
    lathe::v1::SubmitJobRequest req;
    req.mutable_spec()->add_workloads(std::string(8 << 20, 'x'));
    lathe::v1::SubmitJobResponse resp;
    grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx_for(&ctx);
    lathe::v1::ReportRequest req;
    req.set_worker_id("nobody");
    for (int i = 0; i < 3000; ++i) {
      lathe::v1::MeasureResult* r = req.add_results();
      r->set_candidate_id(std::string(2000, 'c'));
    }
    lathe::v1::ReportResponse resp;
    grpc::Status s = wstub->Report(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  }

  // The daemon is unaffected: still running, still answering, still accepting work.
  EXPECT_TRUE(c.daemon()->running());
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->empty()) << "a malformed job was accepted";
  lathe::v1::JobSpec spec = SmallJob("matmul:m=8,n=8,k=8", 4, 4);
  absl::StatusOr<std::string> id = client->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<lathe::v1::JobStatus> cancelled = client->Cancel(*id);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), lathe::v1::CANCELLED);
  absl::StatusOr<lathe::v1::JobStatus> unknown = client->Cancel("no-such-job");
  EXPECT_TRUE(absl::IsNotFound(unknown.status())) << unknown.status();
}

// Roles as deployed: lathed with a client token and a worker token. The worker with the
// worker token registers and measures a job the client submitted with the client token; a
// worker given the client token stops with a clear error, and the worker token cannot submit.
TEST(SecurityTest, WorkerAndClientTokensKeepTheirRoles) {
  Cluster c;
  const std::string client_token = c.dir() + "/client-token";
  const std::string worker_token = c.dir() + "/worker-token";
  std::ofstream(client_token) << kToken << "\n";
  std::ofstream(worker_token) << "worker-" << kToken << "\n";
  ASSERT_TRUE(c.StartDaemon({"--token-file", client_token, "--worker-token-file", worker_token}));
  Process* wrong = c.StartWorker({"--token-file", client_token});
  ASSERT_NE(wrong, nullptr);
  ASSERT_NE(c.StartWorker({"--token-file", worker_token}), nullptr);
  auto client = c.Client(kToken);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));

  absl::StatusOr<std::string> job = client->SubmitJob(SmallJob("matmul:m=16,n=16,k=16", 4, 4));
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<lathe::v1::JobStatus> done = WaitForJob(*client, *job, 120);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state(), lathe::v1::DONE);

  auto as_worker = c.Client("worker-" + std::string(kToken));
  ASSERT_NE(as_worker, nullptr);
  absl::StatusOr<std::string> refused = as_worker->SubmitJob(SmallJob("matmul:m=8,n=8,k=8", 4, 4));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_TRUE(as_worker->ListJobs().ok());

  std::optional<int> exit = wrong->Wait(20000);
  ASSERT_TRUE(exit.has_value()) << "the worker with the client token is still running";
  EXPECT_NE(*exit, 0);
  EXPECT_NE(ReadAll(wrong->log()).find("PERMISSION_DENIED"), std::string::npos)
      << ReadAll(wrong->log());
}

using ::lathe::testing::GenericCall;

// Health answers without the token only on the --health port, which serves nothing else (no
// reflection, no lathe service); on the main port health and reflection need the token.
TEST(SecurityTest, HealthIsOpenOnlyOnItsOwnPortAndReflectionNeedsTheToken) {
  Cluster c;
  const std::string token_file = c.dir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ASSERT_TRUE(
      c.StartDaemon({"--token-file", token_file, "--health", "127.0.0.1:0", "--reflection"}));
  std::optional<std::string> port = c.daemon()->WaitForLine("lathed: health on port ", 10000);
  ASSERT_TRUE(port.has_value()) << ReadAll(c.daemon()->log());
  const std::string health = "127.0.0.1:" + *port;
  const std::string kCheck = "/grpc.health.v1.Health/Check";
  const std::string kReflect = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  const std::string list_services("\x3a\x01*", 3);
  EXPECT_TRUE(GenericCall(health, kCheck, "", "").ok());
  EXPECT_EQ(GenericCall(health, kReflect, list_services, "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(GenericCall(health, "/lathe.v1.Tuner/ListJobs", "", "").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(GenericCall(c.address(), kCheck, "", "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(GenericCall(c.address(), kReflect, list_services, "").error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(GenericCall(c.address(), kCheck, "", kToken).ok());
  EXPECT_TRUE(GenericCall(c.address(), kReflect, list_services, kToken).ok());
}

}  // namespace
}  // namespace lathe::e2e
