#include "client/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "lathe/v1/service.grpc.pb.h"

namespace lathe::client {

namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  return s.str();
}

// gRPC's codes are absl's codes (both are the canonical google.rpc codes).
absl::Status ToAbsl(const grpc::Status& s, const std::string& address, const char* what) {
  if (s.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(s.error_code());
  std::string msg = s.error_message();
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(absl::StrCat("cannot reach lathed at ", address, " (", what,
                                               msg.empty() ? "" : ": ", msg, ")"));
  }
  return absl::Status(code, absl::StrCat("lathed at ", address, ": ", what, ": ", msg));
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> s = ReadFile(path, "token file");
  if (!s.ok()) return s.status();
  std::string token(absl::StripAsciiWhitespace(*s));
  if (token.empty()) return absl::InvalidArgumentError("token file " + path + " is empty");
  return token;
}

bool IsFinal(lathe::v1::JobState state) {
  return state == lathe::v1::DONE || state == lathe::v1::FAILED || state == lathe::v1::CANCELLED;
}

std::string JobStateName(lathe::v1::JobState state) {
  switch (state) {
    case lathe::v1::QUEUED:
      return "queued";
    case lathe::v1::RUNNING:
      return "running";
    case lathe::v1::DONE:
      return "done";
    case lathe::v1::FAILED:
      return "failed";
    case lathe::v1::CANCELLED:
      return "cancelled";
    default:
      return "unknown";
  }
}

struct TunerClient::Impl {
  ClientOptions options;
  std::string token;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<lathe::v1::Tuner::Stub> stub;

  void Prepare(grpc::ClientContext* ctx, bool deadline) const {
    if (deadline) {
      ctx->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(options.timeout_ms));
    }
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  }

  template <typename Req, typename Resp>
  absl::Status Call(const char* what,
                    grpc::Status (lathe::v1::Tuner::Stub::*fn)(grpc::ClientContext*, const Req&,
                                                               Resp*),
                    const Req& req, Resp* resp) const {
    grpc::ClientContext ctx;
    Prepare(&ctx, /*deadline=*/true);
    return ToAbsl((stub.get()->*fn)(&ctx, req, resp), options.address, what);
  }
};

TunerClient::TunerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TunerClient::~TunerClient() = default;

const std::string& TunerClient::address() const { return impl_->options.address; }

absl::StatusOr<std::unique_ptr<TunerClient>> TunerClient::Connect(const ClientOptions& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("no daemon address (HOST:PORT)");
  if (options.timeout_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("timeout ", options.timeout_ms, " ms"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->token = options.token;
  if (impl->token.empty() && !options.token_file.empty()) {
    absl::StatusOr<std::string> t = ReadTokenFile(options.token_file);
    if (!t.ok()) return absl::InvalidArgumentError(t.status().message());
    impl->token = *t;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (options.tls_ca.empty()) {
    if (!options.tls_cert.empty() || !options.tls_key.empty()) {
      return absl::InvalidArgumentError("a client certificate needs TLS: give the daemon's CA");
    }
    creds = grpc::InsecureChannelCredentials();
  } else {
    absl::StatusOr<std::string> pem = ReadFile(options.tls_ca, "TLS CA file");
    if (!pem.ok()) return absl::InvalidArgumentError(pem.status().message());
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *pem;
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return absl::InvalidArgumentError("a client certificate needs both its file and its key");
    }
    if (!options.tls_cert.empty()) {
      absl::StatusOr<std::string> cert = ReadFile(options.tls_cert, "TLS certificate file");
      if (!cert.ok()) return absl::InvalidArgumentError(cert.status().message());
      absl::StatusOr<std::string> key = ReadFile(options.tls_key, "TLS key file");
      if (!key.ok()) return absl::InvalidArgumentError(key.status().message());
      ssl.pem_cert_chain = *cert;
      ssl.pem_private_key = *key;
    }
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // Reconnect quickly after the daemon restarts (gRPC's default backoff grows to 2 minutes).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  // gRPC reads this one as the least time a connection attempt is given, not as a backoff:
  // 200 ms is too short for a TLS handshake across a slow link. gRPC's default.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  impl->channel = grpc::CreateCustomChannel(options.address, creds, args);
  // Wait until connected: a refused connection fails at once (gRPC keeps a channel in
  // TRANSIENT_FAILURE while it retries), a silent peer at the deadline.
  auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(options.timeout_ms);
  while (true) {
    grpc_connectivity_state state = impl->channel->GetState(/*try_to_connect=*/true);
    if (state == GRPC_CHANNEL_READY) break;
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
      return absl::UnavailableError(
          absl::StrCat("cannot reach lathed at ", options.address, " (connection failed)"));
    }
    if (!impl->channel->WaitForStateChange(state, deadline)) {
      return absl::UnavailableError(absl::StrCat("cannot reach lathed at ", options.address,
                                                 " within ", options.timeout_ms, " ms"));
    }
  }
  impl->stub = lathe::v1::Tuner::NewStub(impl->channel);
  return std::unique_ptr<TunerClient>(new TunerClient(std::move(impl)));
}

absl::StatusOr<std::string> TunerClient::SubmitJob(const lathe::v1::JobSpec& spec) {
  lathe::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  lathe::v1::SubmitJobResponse resp;
  absl::Status s = impl_->Call("submit job", &lathe::v1::Tuner::Stub::SubmitJob, req, &resp);
  if (!s.ok()) return s;
  if (resp.job_id().empty()) {
    return absl::InternalError("lathed at " + address() + " accepted the job without an id");
  }
  return resp.job_id();
}

absl::StatusOr<lathe::v1::JobStatus> TunerClient::Watch(
    const std::string& job_id, const std::function<void(const lathe::v1::JobStatus&)>& on_status,
    const std::atomic<bool>* stop) {
  auto stopped = [stop] { return stop != nullptr && stop->load(); };
  auto cancelled = [&] {
    return absl::CancelledError("stopped following job " + job_id +
                                " (it keeps running on the daemon)");
  };
  const auto reconnect = std::chrono::milliseconds(std::max(0, impl_->options.reconnect_ms));
  auto give_up_at = Clock::now() + reconnect;
  auto backoff = std::chrono::milliseconds(100);
  lathe::v1::WatchJobRequest req;
  req.set_job_id(job_id);
  while (true) {
    if (stopped()) return cancelled();
    grpc::ClientContext ctx;
    impl_->Prepare(&ctx, /*deadline=*/false);
    std::unique_ptr<grpc::ClientReader<lathe::v1::JobStatus>> reader =
        impl_->stub->WatchJob(&ctx, req);
    // Read() blocks; a watcher cancels the call when the stop flag is raised.
    std::atomic<bool> done{false};
    std::thread watcher;
    if (stop != nullptr) {
      watcher = std::thread([&] {
        while (!done.load()) {
          if (stop->load()) {
            ctx.TryCancel();
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      });
    }
    lathe::v1::JobStatus status;
    bool final_seen = false;
    bool got_any = false;
    lathe::v1::JobStatus last;
    while (reader->Read(&status)) {
      got_any = true;
      last = status;
      if (on_status) on_status(status);
      if (IsFinal(status.state())) {
        final_seen = true;
        ctx.TryCancel();  // the daemon ends the stream too; do not wait for it
        break;
      }
    }
    grpc::Status s = reader->Finish();
    done.store(true);
    if (watcher.joinable()) watcher.join();
    if (final_seen) return last;
    if (stopped()) return cancelled();
    absl::Status as = ToAbsl(s, address(), "watch job");
    bool retry = s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                 s.error_code() == grpc::StatusCode::CANCELLED ||
                 s.error_code() == grpc::StatusCode::ABORTED;
    if (!retry) return as;
    if (got_any) {
      give_up_at = Clock::now() + reconnect;
      backoff = std::chrono::milliseconds(100);
    }
    if (Clock::now() >= give_up_at) {
      if (s.ok()) {
        return absl::UnavailableError("lathed at " + address() + " ended the watch of job " +
                                      job_id + " before the job ended");
      }
      return as;
    }
    // Sleep in small steps so that the stop flag is honoured quickly.
    for (auto slept = std::chrono::milliseconds(0); slept < backoff && !stopped();
         slept += std::chrono::milliseconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

absl::StatusOr<lathe::v1::JobStatus> TunerClient::Cancel(const std::string& job_id) {
  lathe::v1::CancelJobRequest req;
  req.set_job_id(job_id);
  lathe::v1::CancelJobResponse resp;
  absl::Status s = impl_->Call("cancel job", &lathe::v1::Tuner::Stub::CancelJob, req, &resp);
  if (!s.ok()) return s;
  return resp.status();
}

absl::StatusOr<std::vector<lathe::v1::JobStatus>> TunerClient::ListJobs() {
  lathe::v1::ListJobsRequest req;
  lathe::v1::ListJobsResponse resp;
  absl::Status s = impl_->Call("list jobs", &lathe::v1::Tuner::Stub::ListJobs, req, &resp);
  if (!s.ok()) return s;
  return std::vector<lathe::v1::JobStatus>(resp.jobs().begin(), resp.jobs().end());
}

absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> TunerClient::ListWorkers() {
  lathe::v1::ListWorkersRequest req;
  lathe::v1::ListWorkersResponse resp;
  absl::Status s = impl_->Call("list workers", &lathe::v1::Tuner::Stub::ListWorkers, req, &resp);
  if (!s.ok()) return s;
  return std::vector<lathe::v1::WorkerInfo>(resp.workers().begin(), resp.workers().end());
}

absl::StatusOr<lathe::v1::QueryBestResponse> TunerClient::QueryBest(
    const std::string& workload, const std::string& device_class) {
  lathe::v1::QueryBestRequest req;
  req.set_workload(workload);
  req.set_device_class(device_class);
  lathe::v1::QueryBestResponse resp;
  absl::Status s = impl_->Call("query best", &lathe::v1::Tuner::Stub::QueryBest, req, &resp);
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<std::vector<lathe::v1::QueryBestResponse>> TunerClient::QueryBestMany(
    const std::vector<std::string>& workloads, const std::string& device_class) {
  lathe::v1::QueryBestManyRequest req;
  for (const std::string& w : workloads) {
    lathe::v1::QueryBestRequest* q = req.add_queries();
    q->set_workload(w);
    q->set_device_class(device_class);
  }
  lathe::v1::QueryBestManyResponse resp;
  absl::Status s =
      impl_->Call("query best (many)", &lathe::v1::Tuner::Stub::QueryBestMany, req, &resp);
  if (!s.ok()) return s;
  if (resp.results_size() != req.queries_size()) {
    return absl::InternalError(absl::StrCat("lathed at ", address(), " answered ",
                                            resp.results_size(), " of ", req.queries_size(),
                                            " queries"));
  }
  return std::vector<lathe::v1::QueryBestResponse>(resp.results().begin(), resp.results().end());
}

}  // namespace lathe::client
