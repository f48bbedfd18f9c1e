#include "daemon/grpc_server.h"

#include <grpc/grpc_security.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/security/server_credentials.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/niced_runner.h"
#include "lathe/v1/service.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace lathe::daemon {

namespace v1 = lathe::v1;

namespace {

// absl and gRPC share the canonical status codes, number for number.
grpc::Status ToGrpc(const absl::Status& st) {
  if (st.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// --- the authentication gate (see the header) ---

enum class Role { kAny, kClient, kWorker };

// The role a method needs: the WorkerService's calls are a worker's; submitting and
// cancelling jobs a client's; reading (lists, queries, watching), health and reflection
// either's.
Role RequiredRole(absl::string_view path) {
  if (absl::StartsWith(path, "/lathe.v1.WorkerService/")) return Role::kWorker;
  if (path == "/lathe.v1.Tuner/SubmitJob" || path == "/lathe.v1.Tuner/CancelJob") {
    return Role::kClient;
  }
  return Role::kAny;
}

struct Gate {
  std::string client_bearer;  // "Bearer <token>"; empty: no token (open)
  std::string worker_bearer;  // empty: the client token serves both roles

  // OK, or the status (and message) the call fails with before any handler runs.
  std::pair<grpc_status_code, const char*> Check(absl::string_view path,
                                                 const absl::string_view* authorization) const {
    if (client_bearer.empty()) return {GRPC_STATUS_OK, nullptr};
    if (authorization == nullptr) {
      return {GRPC_STATUS_UNAUTHENTICATED, "missing authorization metadata"};
    }
    const bool client = ConstantTimeEquals(*authorization, client_bearer);
    const bool worker = !worker_bearer.empty() && ConstantTimeEquals(*authorization, worker_bearer);
    if (!client && !worker) return {GRPC_STATUS_UNAUTHENTICATED, "invalid token"};
    switch (RequiredRole(path)) {
      case Role::kAny:
        break;
      case Role::kClient:
        if (!client) {
          return {GRPC_STATUS_PERMISSION_DENIED,
                  "the worker token cannot submit or cancel jobs (use the client token)"};
        }
        break;
      case Role::kWorker:
        if (!worker && !worker_bearer.empty()) {
          return {GRPC_STATUS_PERMISSION_DENIED,
                  "the client token cannot call the worker service (use the worker token)"};
        }
        break;
    }
    return {GRPC_STATUS_OK, nullptr};
  }
};

absl::string_view SliceView(const grpc_slice& s) {
  return absl::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(s)),
                           GRPC_SLICE_LENGTH(s));
}

// gRPC's server auth filter calls this with every call's metadata (":path" included) before
// the call reaches any service, reflection and health included. It answers at once.
void ProcessAuthMetadata(void* state, grpc_auth_context* /*context*/, const grpc_metadata* md,
                         size_t num_md, grpc_process_auth_metadata_done_cb cb, void* user_data) {
  const Gate& gate = *static_cast<const Gate*>(state);
  absl::string_view path;
  absl::string_view authorization;
  bool has_authorization = false;
  for (size_t i = 0; i < num_md; ++i) {
    const absl::string_view key = SliceView(md[i].key);
    if (key == ":path") {
      path = SliceView(md[i].value);
    } else if (key == "authorization" && !has_authorization) {
      authorization = SliceView(md[i].value);
      has_authorization = true;
    }
  }
  auto [code, message] = gate.Check(path, has_authorization ? &authorization : nullptr);
  cb(user_data, nullptr, 0, nullptr, 0, code, message);
}

// Server credentials made with gRPC's C API, so that the gate above can be attached to
// plaintext credentials too (the C++ InsecureServerCredentials() refuses a processor).
class GatedCredentials final : public grpc::ServerCredentials {
 public:
  // Takes ownership of `creds` and of `gate`.
  GatedCredentials(grpc_server_credentials* creds, std::unique_ptr<Gate> gate) : creds_(creds) {
    grpc_auth_metadata_processor p;
    p.process = ProcessAuthMetadata;
    p.destroy = [](void* state) { delete static_cast<Gate*>(state); };
    p.state = gate.release();
    grpc_server_credentials_set_auth_metadata_processor(creds_, p);
  }
  ~GatedCredentials() override { grpc_server_credentials_release(creds_); }
  // The gate is the processor; no other is taken.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override {}

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }
  grpc_server_credentials* creds_;
};

// gRPC's reflection library registers its plugin for every server the process builds, from
// a static initializer, once it is linked: this option takes it out again, or makes sure it
// is there.
class ReflectionBuilderOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionBuilderOption(bool on) : on_(on) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [&](const auto& p) { return p->name() == name; }),
                   plugins->end());
    if (on_) plugins->push_back(std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
  }

 private:
  bool on_;
};

// Runs `fn` (returning absl::StatusOr<Response>), copying the response. The gate has run.
template <typename Response, typename Fn>
grpc::Status Handle(Response* out, Fn&& fn) {
  absl::StatusOr<Response> r = fn();
  if (!r.ok()) return ToGrpc(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

class TunerImpl final : public v1::Tuner::Service {
 public:
  TunerImpl(TunerService* s, const std::atomic<bool>* stopping) : s_(s), stopping_(stopping) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    return Handle(resp, [&] { return s_->SubmitJob(*req); });
  }
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobStatus>* writer) override {
    uint64_t version = 0;
    for (;;) {
      const uint64_t before = version;
      absl::StatusOr<v1::JobStatus> st = s_->WatchJob(req->job_id(), &version, 1000);
      if (!st.ok()) return ToGrpc(st.status());
      if (version != before && !writer->Write(*st)) return grpc::Status::OK;  // client gone
      const v1::JobState state = st->state();
      if (state == v1::DONE || state == v1::FAILED || state == v1::CANCELLED) {
        return grpc::Status::OK;
      }
      if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      if (stopping_->load()) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "lathed is shutting down");
      }
    }
  }
  grpc::Status CancelJob(grpc::ServerContext* ctx, const v1::CancelJobRequest* req,
                         v1::CancelJobResponse* resp) override {
    return Handle(resp, [&] { return s_->CancelJob(*req); });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return Handle(resp, [&] { return s_->ListJobs(*req); });
  }
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override {
    return Handle(resp, [&] { return s_->ListWorkers(*req); });
  }
  grpc::Status QueryBest(grpc::ServerContext* ctx, const v1::QueryBestRequest* req,
                         v1::QueryBestResponse* resp) override {
    return Handle(resp, [&] { return s_->QueryBest(*req); });
  }
  grpc::Status QueryBestMany(grpc::ServerContext* ctx, const v1::QueryBestManyRequest* req,
                             v1::QueryBestManyResponse* resp) override {
    return Handle(resp, [&] { return s_->QueryBestMany(*req); });
  }

 private:
  TunerService* s_;
  const std::atomic<bool>* stopping_;
};

// A Lease call on gRPC's callback API: its long poll holds no thread while it waits (on the
// synchronous server, 1,000 long-polling workers held 1,000 server threads, made and ended as
// calls came and went: with their wakeups, a large share of the daemon's CPU in bench_service
// part 5). The answer is
// sent from whichever thread ends the wait (TunerService::StartLease). A worker that stops
// mid-call (SIGTERM cancels its long poll) is not handed tasks it will never see: OnCancel
// ends the long poll, and a lease granted just as the call went away is released at once
// (else its tasks would wait for the lease to expire). Deletes itself when gRPC is done.
class LeaseReactor final : public grpc::ServerUnaryReactor {
 public:
  LeaseReactor(TunerService* s, grpc::CallbackServerContext* ctx, const v1::LeaseRequest* req,
               v1::LeaseResponse* resp)
      : s_(s), ctx_(ctx), req_(req), resp_(resp) {}

  // Called by the handler before it returns the reactor: gRPC calls OnCancel and OnDone only
  // after that, so `this` outlives Start even when the answer is sent before StartLease returns.
  void Start() {
    const uint64_t id =
        s_->StartLease(*req_, [this](absl::StatusOr<v1::LeaseResponse> r) { Send(std::move(r)); });
    std::lock_guard<std::mutex> lock(mu_);
    wait_id_ = id;
  }

  void OnCancel() override {
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      id = wait_id_;
    }
    if (id != 0) s_->CancelLease(id);  // nothing when the call was answered already
  }

  void OnDone() override { delete this; }

 private:
  // The answer, exactly once; Finish is the last use of `this`.
  void Send(absl::StatusOr<v1::LeaseResponse> r) {
    if (!r.ok()) return Finish(ToGrpc(r.status()));
    if (!r->lease_id().empty() && ctx_->IsCancelled()) {
      v1::ReleaseRequest release;
      release.set_worker_id(req_->worker_id());
      release.set_lease_id(r->lease_id());
      release.set_worker_secret(req_->worker_secret());
      (void)s_->Release(release);
      return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the lease"));
    }
    *resp_ = std::move(*r);
    Finish(grpc::Status::OK);
  }

  TunerService* s_;
  grpc::CallbackServerContext* ctx_;
  const v1::LeaseRequest* req_;
  v1::LeaseResponse* resp_;
  std::mutex mu_;
  uint64_t wait_id_ = 0;  // StartLease's id of the waiting call; 0: none (answered at once)
};

// A fixed set of threads that run what is posted, in order (the workers' reports).
class WorkQueue {
 public:
  explicit WorkQueue(int threads) {
    for (int i = 0; i < std::max(1, threads); ++i) {
      pool_.emplace_back([this] {
        NameThisThread("lathe-report");
        Loop();
      });
    }
  }
  // Runs what is posted already, then joins the threads.
  ~WorkQueue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : pool_) t.join();
  }
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> pool_;
};

// The worker service: Lease (LeaseReactor) and Report (on `reports`) on gRPC's callback API,
// the others synchronous.
class WorkerImpl final
    : public v1::WorkerService::WithCallbackMethod_Lease<
          v1::WorkerService::WithCallbackMethod_Report<v1::WorkerService::Service>> {
 public:
  WorkerImpl(TunerService* s, WorkQueue* reports) : s_(s), reports_(reports) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    return Handle(resp, [&] { return s_->Register(*req); });
  }
  grpc::ServerUnaryReactor* Lease(grpc::CallbackServerContext* ctx, const v1::LeaseRequest* req,
                                  v1::LeaseResponse* resp) override {
    auto* reactor = new LeaseReactor(s_, ctx, req, resp);
    reactor->Start();
    return reactor;
  }
  // On the callback API too, run by the report threads: a report waits for its database
  // commit, which must hold up neither gRPC's callback threads nor make a thread per call.
  grpc::ServerUnaryReactor* Report(grpc::CallbackServerContext* ctx, const v1::ReportRequest* req,
                                   v1::ReportResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reports_->Post([this, reactor, req, resp] {
      reactor->Finish(Handle(resp, [&] { return s_->Report(*req); }));
    });
    return reactor;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Handle(resp, [&] { return s_->Heartbeat(*req); });
  }
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override {
    return Handle(resp, [&] { return s_->Release(*req); });
  }

 private:
  TunerService* s_;
  WorkQueue* reports_;
};

}  // namespace

struct GrpcServer::Impl {
  TunerService* service = nullptr;
  std::atomic<bool> stopping{false};
  // Before `server`: destroyed after it, so the reports in flight at shutdown still finish.
  std::unique_ptr<WorkQueue> reports;
  std::unique_ptr<TunerImpl> tuner;
  std::unique_ptr<WorkerImpl> worker;
  std::unique_ptr<grpc::Server> server;
  std::once_flag shutdown_once;
  int port = 0;
  std::string address;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(TunerService* service,
                                                              const GrpcServerOptions& options) {
  if (service == nullptr) return absl::InvalidArgumentError("no service");
  // Debian's Abseil is built without NDEBUG, so every absl::Mutex (gRPC's own, on every call)
  // keeps a lock graph for deadlock detection: about 3 % of the daemon's CPU under 1,000
  // long-polling workers (bench_service part 5). A debugging aid only, off for the process.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (options.tls_cert_pem.empty() != options.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  if (!options.tls_client_ca_pem.empty() && options.tls_cert_pem.empty()) {
    return absl::InvalidArgumentError("a client CA (mTLS) needs a server certificate and key");
  }
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == options.listen.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen address '", options.listen, "' is not HOST:PORT"));
  }
  auto impl = std::make_unique<Impl>();
  impl->service = service;
  if (!options.worker_token.empty() && options.token.empty()) {
    return absl::InvalidArgumentError("a worker token needs a client token beside it");
  }
  if (!options.worker_token.empty() && options.worker_token == options.token) {
    return absl::InvalidArgumentError("the worker token and the client token are the same");
  }
  impl->tuner = std::make_unique<TunerImpl>(service, &impl->stopping);
  impl->reports = std::make_unique<WorkQueue>(options.report_threads);
  impl->worker = std::make_unique<WorkerImpl>(service, impl->reports.get());

  grpc::EnableDefaultHealthCheckService(true);
  auto gate = std::make_unique<Gate>();
  if (!options.token.empty()) gate->client_bearer = "Bearer " + options.token;
  if (!options.worker_token.empty()) gate->worker_bearer = "Bearer " + options.worker_token;
  grpc_server_credentials* core_creds = nullptr;
  if (options.tls_cert_pem.empty()) {
    core_creds = grpc_insecure_server_credentials_create();
  } else {
    grpc_ssl_pem_key_cert_pair pair{options.tls_key_pem.c_str(), options.tls_cert_pem.c_str()};
    core_creds = grpc_ssl_server_credentials_create_ex(
        options.tls_client_ca_pem.empty() ? nullptr : options.tls_client_ca_pem.c_str(), &pair, 1,
        options.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY,
        nullptr);
  }
  if (core_creds == nullptr) return absl::InvalidArgumentError("cannot set up TLS credentials");
  auto creds = std::make_shared<GatedCredentials>(core_creds, std::move(gate));
  grpc::ServerBuilder builder;
  builder.SetOption(ReflectionOption(options.reflection));
  builder.AddListeningPort(options.listen, creds, &impl->port);
  builder.SetMaxReceiveMessageSize(options.max_receive_bytes);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, options.keepalive_time_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, options.keepalive_timeout_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Workers may ping every 10 s while idle (they sit behind NAT) without being cut off.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.RegisterService(impl->tuner.get());
  builder.RegisterService(impl->worker.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen));
  }
  impl->address = absl::StrCat(options.listen.substr(0, colon), ":", impl->port);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

std::unique_ptr<grpc::ServerBuilderOption> ReflectionOption(bool on) {
  return std::make_unique<ReflectionBuilderOption>(on);
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() {
  Shutdown(std::chrono::milliseconds(0));
  Wait();
}

int GrpcServer::port() const { return impl_->port; }
const std::string& GrpcServer::address() const { return impl_->address; }

void GrpcServer::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(impl_->shutdown_once, [&] {
    impl_->stopping = true;
    impl_->service->BeginShutdown();
    impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  });
}

void GrpcServer::Wait() { impl_->server->Wait(); }

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, bool trim) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (trim) {
    size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    text = text.substr(b, e - b);
  }
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(path, " is empty"));
  return text;
}

}  // namespace lathe::daemon
