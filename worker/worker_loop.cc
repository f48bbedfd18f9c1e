// lathe-worker's lifecycle (Create, Run, Stop), its registration and the heartbeat thread
// (worker_impl.h).
#include <unistd.h>

#include <chrono>
#include <thread>

#include "spdlog/spdlog.h"
#include "worker/worker_impl.h"

#ifndef LATHE_VERSION
#define LATHE_VERSION "0.1.0"
#endif

namespace lathe::worker {

namespace {

using internal::Backoff;
using internal::Describe;
using internal::IsAuthError;
using internal::IsUnknownWorker;

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// The options Worker::Create refuses: no device, no tuner, half a client certificate, or a
// client certificate without TLS.
absl::Status CheckOptions(const WorkerOptions& opt) {
  if (opt.devices.empty()) return absl::InvalidArgumentError("no device to register");
  if (opt.tuner.empty()) return absl::InvalidArgumentError("no tuner address");
  if (opt.tls_cert_pem.empty() != opt.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("a client certificate needs both its file and its key");
  }
  if (!opt.tls_cert_pem.empty() && opt.tls_ca_pem.empty()) {
    return absl::InvalidArgumentError("a client certificate needs TLS: give the daemon's CA");
  }
  return absl::OkStatus();
}

// The channel to the tuner: keepalives, the reconnect backoff of the options, 64 MiB messages,
// TLS (with a client certificate) when the options carry the daemon's CA.
std::shared_ptr<grpc::Channel> ConnectToTuner(const WorkerOptions& opt) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, opt.backoff_min_ms);
  // gRPC reads this one as the least time a connection attempt is given (its
  // MIN_CONNECT_TIMEOUT), not as a backoff: at 100 ms a TLS handshake across a link of 80 ms
  // round trip never completed (found by tests/deploy/fleet_test.cc). gRPC's default.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, opt.backoff_max_ms);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (opt.tls_ca_pem.empty()) {
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = opt.tls_ca_pem;
    ssl.pem_cert_chain = opt.tls_cert_pem;
    ssl.pem_private_key = opt.tls_key_pem;
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(opt.tuner, creds, args);
}

}  // namespace

absl::Status Worker::Impl::Init() {
  if (absl::Status st = CheckOptions(opt_); !st.ok()) return st;
  if (opt_.hostname.empty()) opt_.hostname = Hostname();
  opt_.lease_batch = std::max(1, opt_.lease_batch);
  opt_.lease_ahead = std::max(0, opt_.lease_ahead);
  opt_.report_depth = std::max(1, opt_.report_depth);
  if (!opt_.spool_dir.empty()) {
    auto s = Spool::Open(opt_.spool_dir);
    if (!s.ok()) return s.status();
    spool_ = std::move(*s);
  }
  if (absl::Status st = StartMeasurers(); !st.ok()) return st;
  channel_ = ConnectToTuner(opt_);
  stub_ = lathe::v1::WorkerService::NewStub(channel_);
  return absl::OkStatus();
}

absl::Status Worker::Impl::Run() {
  LogDevices();
  if (auto st = EnsureRegistered(); !st.ok()) return Finish(st);
  FlushSpool();
  std::thread heartbeat([this] { HeartbeatLoop(); });
  std::vector<std::thread> loops;
  for (size_t i = 0; i < opt_.devices.size(); ++i) {
    if (measurers_[i]) loops.emplace_back([this, i] { DeviceLoop(i); });
  }
  if (loops.empty()) {
    // Nothing to measure: stay registered (heartbeats) until stopped.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return stopping_; });
  }
  for (std::thread& t : loops) t.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  heartbeat.join();
  const absl::Status fatal = fatal_status();
  if (fatal.ok()) FlushSpool();
  return Finish(fatal);
}

void Worker::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (grpc::ClientContext* c : polls_) c->TryCancel();
  }
  cv_.notify_all();
}

WorkerStats Worker::Impl::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string Worker::Impl::worker_id() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_id_;
}

std::string Worker::Impl::worker_secret() const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_secret_;
}

void Worker::Impl::LogDevices() const {
  for (const Device& d : opt_.devices) {
    spdlog::info("device {}: {}", d.info.device_class(), d.details);
    if (!d.can_measure) {
      spdlog::warn("device {} is registered but no tasks are leased for it: {}",
                   d.info.device_class(), d.why_not);
    }
  }
}

absl::Status Worker::Impl::fatal_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

absl::Status Worker::Impl::Finish(absl::Status st) {
  WorkerStats s = stats();
  spdlog::info(
      "worker stopped: {} measured, {} reported, {} spooled, {} re-sent from the spool, {} "
      "handed back unstarted",
      s.measured, s.reported, s.spooled, s.resent, s.released);
  if (spool_ && !spool_->Empty()) {
    spdlog::warn(
        "results are still waiting in {}; they are re-sent when a worker with this "
        "spool reaches the tuner",
        spool_->path());
  }
  if (st.code() == absl::StatusCode::kCancelled) return absl::OkStatus();  // stopped
  return st;
}

std::unique_ptr<grpc::ClientContext> Worker::Impl::Context(int timeout_ms) const {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!opt_.token.empty()) c->AddMetadata("authorization", "Bearer " + opt_.token);
  return c;
}

bool Worker::Impl::SleepOrStop(int ms) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_; });
}

bool Worker::Impl::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

void Worker::Impl::Fatal(absl::Status st) {
  spdlog::error("{}", std::string(st.message()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fatal_.ok()) fatal_ = st;
  }
  Stop();
}

absl::Status Worker::Impl::RefusedToken(const grpc::Status& s, const char* call) {
  absl::Status st(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat("the tuner at ", opt_.tuner, " refused this worker's ", call, " (", Describe(s),
                   "); check --token-file: it must hold the daemon's token"));
  Fatal(st);
  return st;
}

void Worker::Impl::MarkUnregistered() {
  std::lock_guard<std::mutex> lock(mu_);
  registered_ = false;
}

absl::Status Worker::Impl::EnsureRegistered() {
  std::lock_guard<std::mutex> reg(register_mu_);
  std::string previous, previous_secret;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (registered_) return absl::OkStatus();
    previous = worker_id_;
    previous_secret = worker_secret_;
  }
  Backoff backoff(opt_.backoff_min_ms, opt_.backoff_max_ms);
  for (int attempt = 1;; ++attempt) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return fatal_.ok() ? absl::CancelledError("stopping") : fatal_;
    }
    lathe::v1::RegisterResponse resp;
    auto ctx = Context(opt_.rpc_timeout_ms);
    grpc::Status s =
        stub_->Register(ctx.get(), RegisterRequestOf(previous, previous_secret), &resp);
    if (s.ok()) {
      Registered(resp);
      return absl::OkStatus();
    }
    if (IsAuthError(s)) return RefusedToken(s, "registration");
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS && !previous.empty()) {
      // The daemon restarted and another worker holds this id now: take a new one.
      spdlog::info("the tuner gave worker id {} to another worker; registering anew", previous);
      previous.clear();
      previous_secret.clear();
      continue;
    }
    int delay = backoff.Next();
    auto log = attempt == 1 || attempt % 10 == 0 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(log, "cannot register with the tuner at {} ({}); retrying in {} ms", opt_.tuner,
                Describe(s), delay);
    SleepOrStop(delay);
  }
}

lathe::v1::RegisterRequest Worker::Impl::RegisterRequestOf(
    const std::string& previous, const std::string& previous_secret) const {
  lathe::v1::RegisterRequest req;
  req.set_hostname(opt_.hostname);
  req.set_lathe_version(LATHE_VERSION);
  req.set_worker_id(previous);
  req.set_worker_secret(previous_secret);
  for (const Device& d : opt_.devices) *req.add_devices() = d.info;
  return req;
}

void Worker::Impl::Registered(const lathe::v1::RegisterResponse& resp) {
  std::lock_guard<std::mutex> lock(mu_);
  worker_id_ = resp.worker_id();
  worker_secret_ = resp.worker_secret();
  if (resp.heartbeat_interval_ms() > 0) heartbeat_ms_ = resp.heartbeat_interval_ms();
  registered_ = true;
  ++stats_.registrations;
  spdlog::info("registered with {} as worker {} ({} device(s), heartbeat every {} ms)", opt_.tuner,
               worker_id_, opt_.devices.size(), heartbeat_ms_);
}

void Worker::Impl::HeartbeatLoop() {
  bool was_down = false;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::milliseconds(heartbeat_ms_), [this] { return done_; }))
        return;
    }
    Heartbeat(was_down);
  }
}

void Worker::Impl::Heartbeat(bool& was_down) {
  bool registered;
  lathe::v1::HeartbeatRequest req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    registered = registered_;
    req.set_worker_id(worker_id_);
    req.set_worker_secret(worker_secret_);
    for (const std::string& l : active_leases_) req.add_lease_ids(l);
  }
  if (!registered) {
    // Device loops register; with none (or all stopped), the heartbeat does.
    if (!stopping()) (void)EnsureRegistered();
    return;
  }
  lathe::v1::HeartbeatResponse resp;
  auto ctx = Context(opt_.rpc_timeout_ms);
  grpc::Status s = stub_->Heartbeat(ctx.get(), req, &resp);
  if (!s.ok()) {
    if (IsAuthError(s)) {
      (void)RefusedToken(s, "heartbeat");
      return;
    }
    if (IsUnknownWorker(s)) {
      MarkUnregistered();
      return;
    }
    if (!was_down) spdlog::warn("heartbeat to {} failed ({})", opt_.tuner, Describe(s));
    was_down = true;
    return;
  }
  was_down = false;
  if (resp.reregister()) {
    spdlog::info("the tuner does not know worker {} (it restarted); registering again",
                 req.worker_id());
    MarkUnregistered();
    if (!EnsureRegistered().ok()) return;
  }
  FlushSpool();
}

absl::StatusOr<std::unique_ptr<Worker>> Worker::Create(WorkerOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (auto st = impl->Init(); !st.ok()) return st;
  return std::unique_ptr<Worker>(new Worker(std::move(impl)));
}

Worker::Worker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Worker::~Worker() = default;
absl::Status Worker::Run() { return impl_->Run(); }
void Worker::Stop() { impl_->Stop(); }
WorkerStats Worker::stats() const { return impl_->stats(); }
std::string Worker::worker_id() const { return impl_->worker_id(); }

}  // namespace lathe::worker
