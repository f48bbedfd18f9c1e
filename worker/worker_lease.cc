// A device's lease thread (FetchLoop) and the Lease and Release calls of lathe-worker
// (worker_impl.h).
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/worker_impl.h"

namespace lathe::worker {

using internal::Backoff;
using internal::Describe;
using internal::IsAuthError;
using internal::IsUnknownWorker;

std::optional<lathe::v1::LeaseResponse> Worker::Impl::NextLease(const std::string& dc,
                                                                internal::Backoff& backoff,
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

void Worker::Impl::FetchLoop(const std::string& dc, Pipeline& p) {
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

int Worker::Impl::TasksToLease() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (opt_.max_tasks <= 0) return opt_.lease_batch;
  const int64_t left = opt_.max_tasks - tasks_leased_;
  if (left <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(opt_.lease_batch, left));
}

lathe::v1::LeaseRequest Worker::Impl::LeaseRequestFor(const std::string& device_class, int want) {
  lathe::v1::LeaseRequest req;
  req.set_worker_id(worker_id());
  req.set_worker_secret(worker_secret());
  req.set_device_class(device_class);
  req.set_max_tasks(want);
  req.set_wait_ms(opt_.lease_wait_ms);
  req.set_request_id(NewRequestId());
  return req;
}

std::optional<grpc::Status> Worker::Impl::CallLease(const lathe::v1::LeaseRequest& req,
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

bool Worker::Impl::LeaseFailed(const grpc::Status& s, const lathe::v1::LeaseRequest& req,
                               internal::Backoff& backoff, int& failures) {
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

void Worker::Impl::ReleaseRest(const lathe::v1::LeaseResponse& lease, int from) {
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

std::string Worker::Impl::NewRequestId() {
  std::lock_guard<std::mutex> lock(mu_);
  return absl::StrCat(absl::Hex(request_rng_(), absl::kZeroPad16),
                      absl::Hex(request_rng_(), absl::kZeroPad16));
}

void Worker::Impl::ReleaseUnseen(const std::string& worker_id, const std::string& secret,
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
    spdlog::info("{} task(s) of a lease whose answer never arrived: handed back", resp.requeued());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.released += resp.requeued();
  }
}

}  // namespace lathe::worker
