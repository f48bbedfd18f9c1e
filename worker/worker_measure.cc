// A device's measuring thread in lathe-worker: the serial (lease, measure, report in turn) and
// the pipelined device loops (worker_impl.h).
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/worker_impl.h"

namespace lathe::worker {

using internal::Backoff;

absl::Status Worker::Impl::StartMeasurers() {
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

void Worker::Impl::DeviceLoop(size_t i) {
  if (opt_.lease_ahead > 0) {
    PipelinedDeviceLoop(i);
  } else {
    SerialDeviceLoop(i);
  }
  spdlog::debug("device loop for {} ends", opt_.devices[i].info.device_class());
}

void Worker::Impl::SerialDeviceLoop(size_t i) {
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

void Worker::Impl::PipelinedDeviceLoop(size_t i) {
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

void Worker::Impl::ServeLease(const Device& dev, measure::Measurer& measurer,
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

lathe::v1::ReportRequest Worker::Impl::MeasureLease(const std::string& dc,
                                                    measure::Measurer& measurer,
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

}  // namespace lathe::worker
