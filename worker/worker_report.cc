// lathe-worker's report thread (ReportLoop) and its Report calls, split in halves when too
// large, retried, then spooled (worker_impl.h).
#include <chrono>
#include <thread>

#include "spdlog/spdlog.h"
#include "worker/worker_impl.h"

namespace lathe::worker {

namespace internal {

void AttachTasks(lathe::v1::ReportRequest& batch, const lathe::v1::LeaseResponse& lease) {
  if (batch.tasks_size() > 0) return;
  std::set<std::string> ids;
  for (const lathe::v1::MeasureResult& r : batch.results()) ids.insert(r.candidate_id());
  for (const lathe::v1::Task& t : lease.tasks()) {
    if (ids.count(t.candidate_id()) > 0) *batch.add_tasks() = t;
  }
}

}  // namespace internal

namespace {

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

}  // namespace

using internal::AttachTasks;
using internal::Backoff;
using internal::Describe;
using internal::IsAuthError;
using internal::IsPermanent;
using internal::IsUnknownWorker;

void Worker::Impl::ReportLoop(Pipeline& p) {
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

grpc::Status Worker::Impl::SendReport(const lathe::v1::ReportRequest& batch,
                                      lathe::v1::ReportResponse* resp) {
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

void Worker::Impl::Deliver(lathe::v1::ReportRequest batch, const lathe::v1::LeaseResponse& lease) {
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
      spdlog::info("the tuner did not know {} result(s) of lease {}; sending them with their tasks",
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

void Worker::Impl::Reported(const lathe::v1::ReportRequest& batch,
                            const lathe::v1::ReportResponse& resp) {
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

}  // namespace lathe::worker
