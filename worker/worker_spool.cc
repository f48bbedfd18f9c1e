// Results lathe-worker could not report: kept in the spool (worker/spool.h) with their tasks,
// and re-sent when the tuner answers again (worker_impl.h).
#include "spdlog/spdlog.h"
#include "worker/worker_impl.h"

namespace lathe::worker {

using internal::AttachTasks;
using internal::Describe;
using internal::IsAuthError;
using internal::IsPermanent;
using internal::IsUnknownWorker;

void Worker::Impl::SpoolOrDrop(lathe::v1::ReportRequest batch,
                               const lathe::v1::LeaseResponse& lease, const grpc::Status& s) {
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

void Worker::Impl::FlushSpool() {
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
    spdlog::info("re-sent {} spooled result(s) to {} ({} stored, {} already stored)", n, opt_.tuner,
                 accepted, duplicates);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.reported += n;
  stats_.resent += n;
  stats_.rejected += rejected;
}

}  // namespace lathe::worker
