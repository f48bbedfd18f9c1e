#include "tuner/local_runner.h"

#include <climits>
#include <set>
#include <utility>

#include "proto/trace_io.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

LocalRunner::LocalRunner(std::vector<ir::Workload> workloads, std::string device_class,
                         std::string worker, db::Database* database, measure::Measurer* measurer,
                         const std::atomic<bool>* stop)
    : workloads_(std::move(workloads)),
      device_class_(std::move(device_class)),
      gpu_(IsGpuDeviceClass(device_class_)),
      worker_(std::move(worker)),
      db_(database),
      measurer_(measurer),
      stop_(stop),
      done_(workloads_.size(), 0),
      pending_of_(workloads_.size(), 0) {}

Runner::Counts LocalRunner::Progress(int task) {
  if (task < 0 || static_cast<size_t>(task) >= done_.size()) return {};
  return Counts{done_[task], pending_of_[task]};
}

int LocalRunner::Room() { return pending_.empty() ? INT_MAX : 0; }

absl::StatusOr<std::vector<std::string>> LocalRunner::Dispatch(std::vector<Trial> trials) {
  for (Trial& t : trials) {
    if (t.task < 0 || static_cast<size_t>(t.task) >= workloads_.size()) {
      return absl::InvalidArgumentError("a trial for an unknown task");
    }
    ++pending_of_[t.task];
    pending_.push_back(std::move(t));
  }
  return std::vector<std::string>{};
}

bool LocalRunner::Stopping() { return stop_ != nullptr && stop_->load(std::memory_order_relaxed); }

absl::Status LocalRunner::Finish() { return Commit(); }

absl::Status LocalRunner::Commit() {
  if (buffered_.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<db::InsertResult>> ins = db_->InsertBatch(buffered_);
  buffered_.clear();
  return ins.status();
}

absl::StatusOr<std::vector<TrialOutcome>> LocalRunner::Wait(bool) {
  if (Stopping()) {
    pending_.clear();
    std::fill(pending_of_.begin(), pending_of_.end(), 0);
    if (absl::Status st = Commit(); !st.ok()) return st;
    return std::vector<TrialOutcome>{};
  }
  if (pending_.empty()) return std::vector<TrialOutcome>{};
  Trial t = std::move(pending_.front());
  pending_.pop_front();
  --pending_of_[t.task];
  absl::StatusOr<lathe::v1::MeasureResult> m = measurer_->Measure(t.request);
  if (!m.ok()) {
    // The sandbox itself failed: keep what this round measured, then report.
    (void)Commit();
    return m.status();
  }
  const ir::Workload& w = workloads_[t.task];
  db::Record r = MakeRecord(
      w.canonical, w.key, w.flops, device_class_,
      t.trace_json.empty() ? traceio::RequestTraceJson(t.request) : std::move(t.trace_json), *m,
      worker_);
  TrialOutcome out;
  out.task = t.task;
  out.candidate_id = r.candidate_id;
  out.error_class = r.error_class;
  out.median_us = r.median_us;
  ++done_[t.task];
  buffered_.push_back(std::move(r));
  if (pending_.empty()) {
    if (absl::Status st = Commit(); !st.ok()) return st;
  }
  return std::vector<TrialOutcome>{std::move(out)};
}

absl::StatusOr<std::vector<bool>> LocalRunner::Retime(
    const std::vector<RetimeRequest>& requests, double ms,
    const std::function<void(int done, int total)>& progress) {
  // Two passes over the set, each record for ms / 2 per pass, interleaved so that a burst of
  // noise does not land on one record's whole figure. Each pass's repeats are added as soon as
  // they are measured, so a stop keeps what was done; a record whose pass fails keeps what it
  // had and is not timed again.
  std::vector<bool> added(requests.size(), false);
  std::set<size_t> failed;
  const int total = 2 * static_cast<int>(requests.size());
  int done = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t k = 0; k < requests.size(); ++k) {
      if (Stopping()) return added;
      if (failed.count(k)) continue;
      if (progress) progress(done, total);
      const RetimeRequest& r = requests[k];
      lathe::v1::MeasureRequest req;
      req.set_candidate_id(r.candidate_id);
      req.set_workload(r.workload);
      traceio::SetRequestTraceJson(r.trace_json, &req);
      req.set_min_repeat_ms(ms / 2);
      req.set_flush_cache(gpu_);
      req.set_cold_weights(r.cold_weights);
      absl::StatusOr<lathe::v1::MeasureResult> m = measurer_->Measure(req);
      if (!m.ok()) return m.status();
      ++done;
      std::vector<double> repeats(m->repeats_us().begin(), m->repeats_us().end());
      if (m->error_class() != lathe::v1::OK || repeats.empty() ||
          !db_->AddRepeats(r.candidate_id, repeats, NowUnixMs()).ok()) {
        failed.insert(k);  // added stays as the first pass left it
        continue;
      }
      if (pass == 0) added[k] = true;
    }
  }
  if (progress) progress(total, total);
  return added;
}

}  // namespace lathe::tuner
