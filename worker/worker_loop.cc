#include "worker/worker_loop.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lathe/v1/service.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/spool.h"

#ifndef LATHE_VERSION
#define LATHE_VERSION "0.1.0"
#endif

namespace lathe::worker {

namespace {

using lathe::v1::WorkerService;

bool IsAuthError(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         s.error_code() == grpc::StatusCode::PERMISSION_DENIED;
}

// The daemon does not know this worker or lease: it restarted and lost its registrations.
bool IsUnknownWorker(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::NOT_FOUND ||
         s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
}

// The daemon refused the batch itself (it will refuse it again): sending it later is futile.
// After SendReport, RESOURCE_EXHAUSTED means a single result larger than the daemon takes.
bool IsPermanent(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
         s.error_code() == grpc::StatusCode::OUT_OF_RANGE ||
         s.error_code() == grpc::StatusCode::UNIMPLEMENTED ||
         s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
}

// A report larger than this is sent in parts: lathed refuses messages over 4 MiB (a lease of
// 1024 tasks whose results keep 1000 repeats each is about 8 MiB, more with their tasks).
constexpr size_t kMaxReportBytes = 3 << 20;

// The halves of `batch`: its results split in two, each half with the tasks of its results.
std::pair<lathe::v1::ReportRequest, lathe::v1::ReportRequest> SplitReport(
    const lathe::v1::ReportRequest& batch) {
  std::pair<lathe::v1::ReportRequest, lathe::v1::ReportRequest> halves;
  const int mid = batch.results_size() / 2;
  for (lathe::v1::ReportRequest* half : {&halves.first, &halves.second}) {
    half->set_worker_id(batch.worker_id());
    half->set_worker_secret(batch.worker_secret());
    half->set_lease_id(batch.lease_id());
    half->set_device_class(batch.device_class());
  }
  std::set<std::string> first_ids;
  for (int i = 0; i < batch.results_size(); ++i) {
    lathe::v1::ReportRequest& half = i < mid ? halves.first : halves.second;
    *half.add_results() = batch.results(i);
    if (i < mid) first_ids.insert(batch.results(i).candidate_id());
  }
  for (const lathe::v1::Task& t : batch.tasks()) {
    *(first_ids.count(t.candidate_id()) > 0 ? halves.first : halves.second).add_tasks() = t;
  }
  return halves;
}

std::string Describe(const grpc::Status& s) {
  return absl::StrCat(absl::StatusCodeToString(static_cast<absl::StatusCode>(s.error_code())), ": ",
                      s.error_message());
}

// Exponential backoff with jitter: the n-th delay is drawn from [d/2, d], d = min * 2^n
// capped at max.
class Backoff {
 public:
  Backoff(int min_ms, int max_ms) : min_ms_(min_ms), max_ms_(max_ms), next_ms_(min_ms) {}
  int Next() {
    int d = next_ms_;
    next_ms_ = std::min(max_ms_, next_ms_ * 2);
    std::uniform_int_distribution<int> jitter(d / 2, d);
    return jitter(rng_);
  }
  void Reset() { next_ms_ = min_ms_; }

 private:
  int min_ms_, max_ms_, next_ms_;
  std::mt19937 rng_{std::random_device{}()};
};

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

// The tasks of `lease` whose results `batch` holds: with them, a daemon that restarted since
// the lease can still store the results.
void AttachTasks(lathe::v1::ReportRequest& batch, const lathe::v1::LeaseResponse& lease) {
  if (batch.tasks_size() > 0) return;
  std::set<std::string> ids;
  for (const lathe::v1::MeasureResult& r : batch.results()) ids.insert(r.candidate_id());
  for (const lathe::v1::Task& t : lease.tasks()) {
    if (ids.count(t.candidate_id()) > 0) *batch.add_tasks() = t;
  }
}

}  // namespace

class Worker::Impl {
 public:
  explicit Impl(WorkerOptions options) : opt_(std::move(options)) {}

  absl::Status Init() {
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
    stub_ = WorkerService::NewStub(channel_);
    return absl::OkStatus();
  }

  absl::Status Run() {
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

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      for (grpc::ClientContext* c : polls_) c->TryCancel();
    }
    cv_.notify_all();
  }

  WorkerStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  std::string worker_id() const {
    std::lock_guard<std::mutex> lock(mu_);
    return worker_id_;
  }

  std::string worker_secret() const {
    std::lock_guard<std::mutex> lock(mu_);
    return worker_secret_;
  }

 private:
  // One measurement child per device that can measure (null for the others); a GPU's child is
  // told its ordinal.
  absl::Status StartMeasurers() {
    for (const Device& d : opt_.devices) {
      if (!d.can_measure) {
        measurers_.push_back(nullptr);
        continue;
      }
      auto m = measure::Measurer::Create(MeasurerOptionsFor(d, opt_.measurer));
      if (!m.ok()) {
        return absl::Status(m.status().code(),
                            absl::StrCat("cannot start the measurement child for ",
                                         d.info.device_class(), ": ", m.status().message()));
      }
      measurers_.push_back(std::move(*m));
    }
    return absl::OkStatus();
  }

  void LogDevices() const {
    for (const Device& d : opt_.devices) {
      spdlog::info("device {}: {}", d.info.device_class(), d.details);
      if (!d.can_measure) {
        spdlog::warn("device {} is registered but no tasks are leased for it: {}",
                     d.info.device_class(), d.why_not);
      }
    }
  }

  absl::Status fatal_status() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fatal_;
  }

  absl::Status Finish(absl::Status st) {
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

  std::unique_ptr<grpc::ClientContext> Context(int timeout_ms) const {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!opt_.token.empty()) c->AddMetadata("authorization", "Bearer " + opt_.token);
    return c;
  }

  // Sleeps `ms` unless stopping; true when stopping.
  bool SleepOrStop(int ms) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_; });
  }

  bool stopping() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stopping_;
  }

  void Fatal(absl::Status st) {
    spdlog::error("{}", std::string(st.message()));
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fatal_.ok()) fatal_ = st;
    }
    Stop();
  }

  absl::Status RefusedToken(const grpc::Status& s, const char* call) {
    absl::Status st(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat("the tuner at ", opt_.tuner, " refused this worker's ", call, " (",
                     Describe(s), "); check --token-file: it must hold the daemon's token"));
    Fatal(st);
    return st;
  }

  void MarkUnregistered() {
    std::lock_guard<std::mutex> lock(mu_);
    registered_ = false;
  }

  // Registers (again) unless registered; retries with backoff until it works, the token is
  // refused (fatal) or the worker stops (Cancelled).
  absl::Status EnsureRegistered() {
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

  // This worker and its devices; `previous`: the id (and secret) it had, kept when the
  // daemon still knows it.
  lathe::v1::RegisterRequest RegisterRequestOf(const std::string& previous,
                                               const std::string& previous_secret) const {
    lathe::v1::RegisterRequest req;
    req.set_hostname(opt_.hostname);
    req.set_lathe_version(LATHE_VERSION);
    req.set_worker_id(previous);
    req.set_worker_secret(previous_secret);
    for (const Device& d : opt_.devices) *req.add_devices() = d.info;
    return req;
  }

  void Registered(const lathe::v1::RegisterResponse& resp) {
    std::lock_guard<std::mutex> lock(mu_);
    worker_id_ = resp.worker_id();
    worker_secret_ = resp.worker_secret();
    if (resp.heartbeat_interval_ms() > 0) heartbeat_ms_ = resp.heartbeat_interval_ms();
    registered_ = true;
    ++stats_.registrations;
    spdlog::info("registered with {} as worker {} ({} device(s), heartbeat every {} ms)",
                 opt_.tuner, worker_id_, opt_.devices.size(), heartbeat_ms_);
  }

  // Leases tasks for device `i` and serves each lease, until stopped, fatal, or --max-tasks
  // tasks were leased: pipelined (lease_ahead > 0) or one lease at a time.
  void DeviceLoop(size_t i) {
    if (opt_.lease_ahead > 0) {
      PipelinedDeviceLoop(i);
    } else {
      SerialDeviceLoop(i);
    }
    spdlog::debug("device loop for {} ends", opt_.devices[i].info.device_class());
  }

  // Lease, measure, report, in turn.
  void SerialDeviceLoop(size_t i) {
    const Device& dev = opt_.devices[i];
    measure::Measurer& measurer = *measurers_[i];
    const std::string& dc = dev.info.device_class();
    Backoff backoff(opt_.backoff_min_ms, opt_.backoff_max_ms);
    int failures = 0;
    while (!stopping()) {
      std::optional<lathe::v1::LeaseResponse> lease = NextLease(dc, backoff, failures);
      if (!lease.has_value()) break;
      if (lease->tasks_size() == 0) continue;
      ServeLease(dev, measurer, *lease);
    }
  }

  // One Lease call for `dc` with its failure handling; an empty lease when the call failed or
  // brought nothing (try again), nullopt when the loop should end (stopping, fatal, or
  // --max-tasks tasks leased).
  std::optional<lathe::v1::LeaseResponse> NextLease(const std::string& dc, Backoff& backoff,
                                                    int& failures) {
    const int want = TasksToLease();
    if (want == 0) return std::nullopt;
    if (!EnsureRegistered().ok()) return std::nullopt;
    lathe::v1::LeaseRequest req = LeaseRequestFor(dc, want);
    lathe::v1::LeaseResponse lease;
    std::optional<grpc::Status> s = CallLease(req, &lease);
    if (!s.has_value()) return std::nullopt;  // stopping
    if (!s->ok()) {
      if (!LeaseFailed(*s, req, backoff, failures)) return std::nullopt;
      return lathe::v1::LeaseResponse();
    }
    if (failures > 0) spdlog::info("the tuner at {} answers again", opt_.tuner);
    failures = 0;
    backoff.Reset();
    return lease;
  }

  // The pipeline of one device (under mu_; cv_ announces every change): leases taken ahead and
  // not started, and measured batches waiting for their Report.
  struct Pipeline {
    std::deque<lathe::v1::LeaseResponse> leases;
    bool fetching_done = false;
    std::deque<std::pair<lathe::v1::ReportRequest, lathe::v1::LeaseResponse>> reports;
    bool measuring_done = false;
  };

  // Three threads per device: one leases up to lease_ahead leases ahead of the one being
  // measured, this one measures them in order, one reports the measured batches (at most
  // report_depth waiting; the measurer waits beyond that). Stopping: the lease being measured
  // finishes its task and hands back the rest, every lease taken ahead is handed back whole,
  // and the batches measured are reported (or spooled) before the loop returns.
  void PipelinedDeviceLoop(size_t i) {
    const Device& dev = opt_.devices[i];
    measure::Measurer& measurer = *measurers_[i];
    const std::string dc = dev.info.device_class();
    Pipeline p;
    std::thread fetcher([&] { FetchLoop(dc, p); });
    std::thread reporter([&] { ReportLoop(p); });
    for (;;) {
      lathe::v1::LeaseResponse lease;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !p.leases.empty() || p.fetching_done; });
        if (p.leases.empty()) break;
        lease = std::move(p.leases.front());
        p.leases.pop_front();
        ++measuring_;
      }
      cv_.notify_all();  // the fetcher may lease the next one now
      lathe::v1::ReportRequest batch;
      if (stopping()) {
        ReleaseRest(lease, 0);
      } else {
        batch = MeasureLease(dc, measurer, lease);
      }
      std::unique_lock<std::mutex> lock(mu_);
      --measuring_;
      if (batch.results_size() == 0) {
        active_leases_.erase(lease.lease_id());
        continue;
      }
      cv_.wait(lock, [&] { return static_cast<int>(p.reports.size()) < opt_.report_depth; });
      p.reports.emplace_back(std::move(batch), std::move(lease));
      lock.unlock();
      cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      p.measuring_done = true;
    }
    cv_.notify_all();
    fetcher.join();
    reporter.join();
  }

  // Leases for `dc` whenever fewer than lease_ahead leases wait to be measured.
  void FetchLoop(const std::string& dc, Pipeline& p) {
    Backoff backoff(opt_.backoff_min_ms, opt_.backoff_max_ms);
    int failures = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock,
                 [&] { return stopping_ || static_cast<int>(p.leases.size()) < opt_.lease_ahead; });
        if (stopping_) break;
      }
      std::optional<lathe::v1::LeaseResponse> lease = NextLease(dc, backoff, failures);
      if (!lease.has_value()) break;
      if (lease->tasks_size() == 0) continue;
      spdlog::debug("lease {}: {} task(s) for {}", lease->lease_id(), lease->tasks_size(), dc);
      {
        std::lock_guard<std::mutex> lock(mu_);
        // Extended by the heartbeat from now on, measured or not.
        active_leases_.insert(lease->lease_id());
        tasks_leased_ += lease->tasks_size();
        if (p.leases.empty() && measuring_) ++stats_.leased_ahead;
        p.leases.push_back(std::move(*lease));
      }
      cv_.notify_all();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      p.fetching_done = true;
    }
    cv_.notify_all();
  }

  // Reports the measured batches in order; ends once the measuring ended and all are sent.
  void ReportLoop(Pipeline& p) {
    for (;;) {
      std::pair<lathe::v1::ReportRequest, lathe::v1::LeaseResponse> item;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !p.reports.empty() || p.measuring_done; });
        if (p.reports.empty()) return;
        item = std::move(p.reports.front());
        p.reports.pop_front();
      }
      cv_.notify_all();  // room for the measurer's next batch
      Deliver(std::move(item.first), item.second);
      std::lock_guard<std::mutex> lock(mu_);
      active_leases_.erase(item.second.lease_id());
    }
  }

  // How many tasks to ask for next: the lease batch, fewer near --max-tasks; 0 once
  // --max-tasks tasks were leased.
  int TasksToLease() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (opt_.max_tasks <= 0) return opt_.lease_batch;
    const int64_t left = opt_.max_tasks - tasks_leased_;
    if (left <= 0) return 0;
    return static_cast<int>(std::min<int64_t>(opt_.lease_batch, left));
  }

  lathe::v1::LeaseRequest LeaseRequestFor(const std::string& device_class, int want) {
    lathe::v1::LeaseRequest req;
    req.set_worker_id(worker_id());
    req.set_worker_secret(worker_secret());
    req.set_device_class(device_class);
    req.set_max_tasks(want);
    req.set_wait_ms(opt_.lease_wait_ms);
    req.set_request_id(NewRequestId());
    return req;
  }

  // One Lease call (a long poll that Stop() cancels); nullopt when stopping before it began.
  std::optional<grpc::Status> CallLease(const lathe::v1::LeaseRequest& req,
                                        lathe::v1::LeaseResponse* lease) {
    auto ctx = Context(opt_.lease_wait_ms + opt_.rpc_timeout_ms);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return std::nullopt;
      polls_.insert(ctx.get());
    }
    grpc::Status s = stub_->Lease(ctx.get(), req, lease);
    {
      std::lock_guard<std::mutex> lock(mu_);
      polls_.erase(ctx.get());
    }
    return s;
  }

  // After a failed Lease call `req`: hands back a lease granted to a call given up on,
  // registers again when the daemon forgot this worker, else waits out the backoff. False
  // when the device loop should end (stopping, or the token was refused).
  bool LeaseFailed(const grpc::Status& s, const lathe::v1::LeaseRequest& req, Backoff& backoff,
                   int& failures) {
    // Given up before the answer came (Stop() cancelled the call, or its deadline passed): a
    // lease may have been granted all the same; hand it back by request id.
    if (s.error_code() == grpc::StatusCode::CANCELLED ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ReleaseUnseen(req.worker_id(), req.worker_secret(), req.request_id());
    }
    if (stopping()) return false;
    if (IsAuthError(s)) {
      (void)RefusedToken(s, "lease");
      return false;
    }
    if (IsUnknownWorker(s)) {
      spdlog::info("the tuner does not know worker {} ({}); registering again", worker_id(),
                   Describe(s));
      MarkUnregistered();
      return true;
    }
    int delay = backoff.Next();
    ++failures;
    auto log = failures == 1 || failures % 10 == 0 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(log, "lease for {} failed ({}); retrying in {} ms", req.device_class(), Describe(s),
                delay);
    SleepOrStop(delay);
    return true;
  }

  // Measures the tasks of `lease` one after another and delivers their results; the tasks not
  // started (stopping, or the sandbox failed) are handed back.
  void ServeLease(const Device& dev, measure::Measurer& measurer,
                  const lathe::v1::LeaseResponse& lease) {
    const std::string& dc = dev.info.device_class();
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_leases_.insert(lease.lease_id());
      tasks_leased_ += lease.tasks_size();
    }
    spdlog::debug("lease {}: {} task(s) for {}", lease.lease_id(), lease.tasks_size(), dc);
    lathe::v1::ReportRequest batch = MeasureLease(dc, measurer, lease);
    if (batch.results_size() > 0) Deliver(std::move(batch), lease);
    std::lock_guard<std::mutex> lock(mu_);
    active_leases_.erase(lease.lease_id());
  }

  // Measures the tasks of `lease` one after another; the tasks not started (stopping, or the
  // sandbox failed) are handed back. Returns the results, to be delivered.
  lathe::v1::ReportRequest MeasureLease(const std::string& dc, measure::Measurer& measurer,
                                        const lathe::v1::LeaseResponse& lease) {
    lathe::v1::ReportRequest batch;
    batch.set_lease_id(lease.lease_id());
    batch.set_device_class(dc);
    int t = 0;
    for (; t < lease.tasks_size(); ++t) {
      if (stopping()) break;
      const lathe::v1::Task& task = lease.tasks(t);
      lathe::v1::MeasureRequest req = task.request();  // the test-only fault passes through
      if (!task.candidate_id().empty()) req.set_candidate_id(task.candidate_id());
      auto r = measurer.Measure(req);
      if (!r.ok()) {
        Fatal(absl::Status(r.status().code(), absl::StrCat("the measurement sandbox failed on ", dc,
                                                           ": ", r.status().message())));
        break;
      }
      r->set_candidate_id(req.candidate_id());
      spdlog::debug("{} {}: {} {:.2f} us {}", req.candidate_id(), req.workload(),
                    lathe::v1::ErrorClass_Name(r->error_class()), r->median_us(), r->error_msg());
      *batch.add_results() = std::move(*r);
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.measured;
    }
    if (t < lease.tasks_size()) ReleaseRest(lease, t);
    return batch;
  }

  // Hands the tasks of `lease` from index `from` on (not started: stopping, or the sandbox
  // failed) back to the daemon, so that they are leased again at once rather than when the
  // lease expires. Best effort: when it fails they still return at expiry.
  void ReleaseRest(const lathe::v1::LeaseResponse& lease, int from) {
    const int rest = lease.tasks_size() - from;
    lathe::v1::ReleaseRequest req;
    req.set_worker_id(worker_id());
    req.set_worker_secret(worker_secret());
    req.set_lease_id(lease.lease_id());
    for (int t = from; t < lease.tasks_size(); ++t) {
      req.add_candidate_ids(lease.tasks(t).candidate_id());
    }
    lathe::v1::ReleaseResponse resp;
    auto ctx = Context(std::min(opt_.rpc_timeout_ms, 5000));
    grpc::Status s = stub_->Release(ctx.get(), req, &resp);
    if (s.ok()) {
      spdlog::info("{} task(s) of lease {} not started: handed back ({} requeued)", rest,
                   lease.lease_id(), resp.requeued());
      std::lock_guard<std::mutex> lock(mu_);
      stats_.released += rest;
      return;
    }
    spdlog::warn(
        "{} task(s) of lease {} not started and could not be handed back ({}); they return "
        "to the queue when the lease expires",
        rest, lease.lease_id(), Describe(s));
  }

  // A fresh LeaseRequest.request_id.
  std::string NewRequestId() {
    std::lock_guard<std::mutex> lock(mu_);
    return absl::StrCat(absl::Hex(request_rng_(), absl::kZeroPad16),
                        absl::Hex(request_rng_(), absl::kZeroPad16));
  }

  // Releases whatever lease the daemon granted to the Lease call `request_id` whose answer
  // never arrived; the daemon also makes that call take nothing if it is still waiting. Best
  // effort: when it fails, such a lease's tasks return to the queue when it expires.
  void ReleaseUnseen(const std::string& worker_id, const std::string& secret,
                     const std::string& request_id) {
    lathe::v1::ReleaseRequest req;
    req.set_worker_id(worker_id);
    req.set_worker_secret(secret);
    req.set_lease_request_id(request_id);
    lathe::v1::ReleaseResponse resp;
    auto ctx = Context(std::min(opt_.rpc_timeout_ms, 5000));
    grpc::Status s = stub_->Release(ctx.get(), req, &resp);
    if (!s.ok()) {
      spdlog::debug("could not release the lease of a call given up on ({})", Describe(s));
      return;
    }
    if (resp.requeued() > 0) {
      spdlog::info("{} task(s) of a lease whose answer never arrived: handed back",
                   resp.requeued());
      std::lock_guard<std::mutex> lock(mu_);
      stats_.released += resp.requeued();
    }
  }

  // Sends one Report, or several when `batch` is over kMaxReportBytes or the daemon refuses it
  // as too large (RESOURCE_EXHAUSTED): halves, down to single results, each with the tasks of
  // its results. The answers add up in `resp`; the first failure ends it (a resend is
  // harmless: Report is idempotent by candidate id).
  grpc::Status SendReport(const lathe::v1::ReportRequest& batch, lathe::v1::ReportResponse* resp) {
    grpc::Status s;
    if (batch.results_size() < 2 || batch.ByteSizeLong() <= kMaxReportBytes) {
      lathe::v1::ReportResponse part;
      auto ctx = Context(opt_.rpc_timeout_ms);
      s = stub_->Report(ctx.get(), batch, &part);
      if (s.ok()) {
        resp->set_accepted(resp->accepted() + part.accepted());
        resp->set_duplicates(resp->duplicates() + part.duplicates());
        resp->set_rejected(resp->rejected() + part.rejected());
      }
      if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED || batch.results_size() < 2) {
        return s;
      }
      spdlog::info("the tuner refused {} result(s) of lease {} in one report ({}); sending halves",
                   batch.results_size(), batch.lease_id(), Describe(s));
    }
    auto [first, second] = SplitReport(batch);
    s = SendReport(first, resp);
    if (!s.ok()) return s;
    return SendReport(second, resp);
  }

  // Reports one lease's results; a few quick retries, then the spool.
  // The first attempt sends the results alone; a retry, a resend after the daemon rejected
  // some (it restarted since the lease) and the spool carry the lease's tasks too.
  void Deliver(lathe::v1::ReportRequest batch, const lathe::v1::LeaseResponse& lease) {
    grpc::Status s;
    Backoff backoff(opt_.backoff_min_ms, opt_.backoff_max_ms);
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(backoff.Next()));
        AttachTasks(batch, lease);
      }
      batch.set_worker_id(worker_id());
      batch.set_worker_secret(worker_secret());
      lathe::v1::ReportResponse resp;
      s = SendReport(batch, &resp);
      if (s.ok() && resp.rejected() > 0 && batch.tasks_size() == 0) {
        spdlog::info(
            "the tuner did not know {} result(s) of lease {}; sending them with their tasks",
            resp.rejected(), batch.lease_id());
        AttachTasks(batch, lease);
        resp.Clear();
        s = SendReport(batch, &resp);
      }
      if (s.ok()) {
        Reported(batch, resp);
        return;
      }
      if (IsAuthError(s)) {
        (void)RefusedToken(s, "report");
        break;
      }
      if (IsUnknownWorker(s)) {
        MarkUnregistered();
        break;
      }
      if (IsPermanent(s)) {
        spdlog::error("the tuner refused {} result(s) of lease {} ({}); dropping them",
                      batch.results_size(), batch.lease_id(), Describe(s));
        return;
      }
    }
    SpoolOrDrop(std::move(batch), lease, s);
  }

  void Reported(const lathe::v1::ReportRequest& batch, const lathe::v1::ReportResponse& resp) {
    spdlog::debug("reported {} result(s) of lease {}: {} new, {} duplicate(s), {} rejected",
                  batch.results_size(), batch.lease_id(), resp.accepted(), resp.duplicates(),
                  resp.rejected());
    if (resp.rejected() > 0) {
      spdlog::warn("the tuner rejected {} result(s) of lease {} (see its log)", resp.rejected(),
                   batch.lease_id());
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.reported += batch.results_size();
    stats_.rejected += resp.rejected();
  }

  // Keeps a batch that could not be reported (the last failure: `s`) in the spool, with its
  // tasks, until the tuner is back; without a spool, or when writing it fails, the results are
  // lost, saying so.
  void SpoolOrDrop(lathe::v1::ReportRequest batch, const lathe::v1::LeaseResponse& lease,
                   const grpc::Status& s) {
    if (!spool_) {
      spdlog::error(
          "could not report {} result(s) of lease {} ({}) and there is no spool: they "
          "are lost",
          batch.results_size(), batch.lease_id(), Describe(s));
      return;
    }
    AttachTasks(batch, lease);
    batch.clear_worker_secret();  // a new registration's goes with the re-send
    if (auto st = spool_->Append(batch); !st.ok()) {
      spdlog::error("could not report {} result(s) of lease {} ({}) nor spool them: {}",
                    batch.results_size(), batch.lease_id(), Describe(s), std::string(st.message()));
      return;
    }
    spdlog::warn(
        "could not report {} result(s) of lease {} ({}); kept in {} until the tuner is "
        "back",
        batch.results_size(), batch.lease_id(), Describe(s), spool_->path());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.spooled += batch.results_size();
  }

  // Re-sends the spooled batches; keeps them all when one fails (resending is harmless).
  void FlushSpool() {
    if (!spool_ || spool_->Empty()) return;
    std::lock_guard<std::mutex> flush(flush_mu_);
    auto contents = spool_->ReadAll();
    if (!contents.ok()) {
      spdlog::error("cannot read the spool: {}", contents.status().ToString());
      return;
    }
    int64_t n = 0, rejected = 0, accepted = 0, duplicates = 0;
    for (lathe::v1::ReportRequest& batch : contents->batches) {
      batch.set_worker_id(worker_id());
      batch.set_worker_secret(worker_secret());
      lathe::v1::ReportResponse resp;
      grpc::Status s = SendReport(batch, &resp);
      if (!s.ok() && IsPermanent(s)) {
        spdlog::error("the tuner refused {} spooled result(s) of lease {} ({}); dropping them",
                      batch.results_size(), batch.lease_id(), Describe(s));
        continue;
      }
      if (!s.ok()) {
        if (IsAuthError(s)) (void)RefusedToken(s, "report");
        if (IsUnknownWorker(s)) MarkUnregistered();
        spdlog::debug("re-sending the spool failed ({}); trying again later", Describe(s));
        return;
      }
      if (resp.rejected() > 0) {
        spdlog::warn("the tuner rejected {} spooled result(s) of lease {} (see its log)",
                     resp.rejected(), batch.lease_id());
      }
      n += batch.results_size();
      rejected += resp.rejected();
      accepted += resp.accepted();
      duplicates += resp.duplicates();
    }
    if (auto st = spool_->DropThrough(contents->end); !st.ok()) {
      spdlog::error("cannot shrink the spool: {}", st.ToString());
    }
    // Already stored: the daemon had them measured again after this worker's lease expired.
    if (n > 0) {
      spdlog::info("re-sent {} spooled result(s) to {} ({} stored, {} already stored)", n,
                   opt_.tuner, accepted, duplicates);
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_.reported += n;
    stats_.resent += n;
    stats_.rejected += rejected;
  }

  // Extends active leases, notices a restarted daemon, and drains the spool when the daemon
  // answers. Runs until the device loops are done, through a graceful stop's drain.
  void HeartbeatLoop() {
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

  // One heartbeat: registers when unregistered, else extends the active leases, notices a
  // daemon that forgot this worker, and drains the spool when the daemon answers.
  void Heartbeat(bool& was_down) {
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

  WorkerOptions opt_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<WorkerService::Stub> stub_;
  std::unique_ptr<Spool> spool_;
  std::vector<std::unique_ptr<measure::Measurer>> measurers_;  // per device; null: cannot measure

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool done_ = false;  // the device loops have ended
  bool registered_ = false;
  std::string worker_id_;
  std::string worker_secret_;  // RegisterResponse.worker_secret: every call of this id carries it
  int heartbeat_ms_ = 5000;
  int64_t tasks_leased_ = 0;
  int measuring_ = 0;  // pipelined devices measuring a lease now
  std::set<std::string> active_leases_;
  std::set<grpc::ClientContext*> polls_;  // Lease calls in flight, cancelled by Stop()
  std::mt19937_64 request_rng_{std::random_device{}()};  // LeaseRequest.request_id
  absl::Status fatal_;
  WorkerStats stats_;

  std::mutex register_mu_;  // one registration at a time
  std::mutex flush_mu_;     // one spool flush at a time
};

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
