#include "tuner/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <cctype>
#include <fstream>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lathe/v1/service.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace lathe::tuner {

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

// The shared token check, run first in every handler of the lathe services.
class Auth {
 public:
  explicit Auth(std::string token) : expected_(token.empty() ? "" : "Bearer " + token) {}
  grpc::Status Check(const grpc::ServerContext* ctx) const {
    if (expected_.empty()) return grpc::Status::OK;
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    if (it == md.end()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing authorization metadata");
    }
    if (!ConstantTimeEquals(absl::string_view(it->second.data(), it->second.size()), expected_)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "invalid token");
    }
    return grpc::Status::OK;
  }

 private:
  std::string expected_;
};

// Runs `fn` (returning absl::StatusOr<Response>) after the token check, copying the response.
template <typename Response, typename Fn>
grpc::Status Handle(const Auth& auth, const grpc::ServerContext* ctx, Response* out, Fn&& fn) {
  if (grpc::Status a = auth.Check(ctx); !a.ok()) return a;
  absl::StatusOr<Response> r = fn();
  if (!r.ok()) return ToGrpc(r.status());
  *out = std::move(*r);
  return grpc::Status::OK;
}

class TunerImpl final : public v1::Tuner::Service {
 public:
  TunerImpl(TunerService* s, const Auth* auth, const std::atomic<bool>* stopping)
      : s_(s), auth_(auth), stopping_(stopping) {}

  grpc::Status SubmitJob(grpc::ServerContext* ctx, const v1::SubmitJobRequest* req,
                         v1::SubmitJobResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->SubmitJob(*req); });
  }
  grpc::Status WatchJob(grpc::ServerContext* ctx, const v1::WatchJobRequest* req,
                        grpc::ServerWriter<v1::JobStatus>* writer) override {
    if (grpc::Status a = auth_->Check(ctx); !a.ok()) return a;
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
    return Handle(*auth_, ctx, resp, [&] { return s_->CancelJob(*req); });
  }
  grpc::Status ListJobs(grpc::ServerContext* ctx, const v1::ListJobsRequest* req,
                        v1::ListJobsResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->ListJobs(*req); });
  }
  grpc::Status ListWorkers(grpc::ServerContext* ctx, const v1::ListWorkersRequest* req,
                           v1::ListWorkersResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->ListWorkers(*req); });
  }
  grpc::Status QueryBest(grpc::ServerContext* ctx, const v1::QueryBestRequest* req,
                         v1::QueryBestResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->QueryBest(*req); });
  }
  grpc::Status QueryBestMany(grpc::ServerContext* ctx, const v1::QueryBestManyRequest* req,
                             v1::QueryBestManyResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->QueryBestMany(*req); });
  }

 private:
  TunerService* s_;
  const Auth* auth_;
  const std::atomic<bool>* stopping_;
};

class WorkerImpl final : public v1::WorkerService::Service {
 public:
  WorkerImpl(TunerService* s, const Auth* auth) : s_(s), auth_(auth) {}

  grpc::Status Register(grpc::ServerContext* ctx, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->Register(*req); });
  }
  // A worker that stops mid-call (SIGTERM cancels its long poll) is not handed tasks it will
  // never see: the long poll ends when the call is cancelled, and a lease granted just as it
  // was is released at once (else its tasks would wait for the lease to expire).
  grpc::Status Lease(grpc::ServerContext* ctx, const v1::LeaseRequest* req,
                     v1::LeaseResponse* resp) override {
    grpc::Status st = Handle(*auth_, ctx, resp,
                             [&] { return s_->Lease(*req, [ctx] { return ctx->IsCancelled(); }); });
    if (!st.ok() || resp->lease_id().empty() || !ctx->IsCancelled()) return st;
    v1::ReleaseRequest release;
    release.set_worker_id(req->worker_id());
    release.set_lease_id(resp->lease_id());
    (void)s_->Release(release);
    return grpc::Status(grpc::StatusCode::CANCELLED, "the caller cancelled the lease");
  }
  grpc::Status Report(grpc::ServerContext* ctx, const v1::ReportRequest* req,
                      v1::ReportResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->Report(*req); });
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->Heartbeat(*req); });
  }
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override {
    return Handle(*auth_, ctx, resp, [&] { return s_->Release(*req); });
  }

 private:
  TunerService* s_;
  const Auth* auth_;
};

}  // namespace

struct GrpcServer::Impl {
  TunerService* service = nullptr;
  std::unique_ptr<Auth> auth;
  std::atomic<bool> stopping{false};
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
  impl->auth = std::make_unique<Auth>(options.token);
  impl->tuner = std::make_unique<TunerImpl>(service, impl->auth.get(), &impl->stopping);
  impl->worker = std::make_unique<WorkerImpl>(service, impl->auth.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options.tls_cert_pem.empty()) {
    creds = grpc::InsecureServerCredentials();
  } else {
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_client_ca_pem;
    ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
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

}  // namespace lathe::tuner
