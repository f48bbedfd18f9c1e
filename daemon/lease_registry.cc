// The lease registry's long polls, leases, task queues and reports (see lease_registry.h);
// registration, heartbeats and the worker list are in lease_workers.cc.
#include "daemon/lease_registry.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/lease_registry_impl.h"
#include "daemon/log_text.h"
#include "daemon/metrics.h"
#include "daemon/niced_runner.h"
#include "spdlog/spdlog.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

using lease_internal::kCancelPoll;
using lease_internal::kMaxRememberedCompleted;
using lease_internal::kMaxRequestIdBytes;
using lease_internal::kTaskFraming;
using lease_internal::Locked;
using lease_internal::NotRegistered;
LeaseRegistry::LeaseRegistry(const LeaseRegistryOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

LeaseRegistry::~LeaseRegistry() { Stop(); }

void LeaseRegistry::Start() {
  Impl* s = impl_.get();
  s->reaper = std::thread([s] {
    NameThisThread("lathe-reaper");
    s->Reap();
  });
}

void LeaseRegistry::BeginShutdown() {
  Locked lock(*impl_);
  impl_->stopping = true;
  impl_->EndAllWaits();
  impl_->reaper_cv.notify_all();
}

void LeaseRegistry::Stop() {
  BeginShutdown();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  if (impl_->reaper.joinable()) impl_->reaper.join();
}

uint64_t LeaseRegistry::StartLease(const v1::LeaseRequest& req, LeaseDone done) {
  const Clock::time_point start = Clock::now();
  Impl& s = *impl_;
  Locked lock(s);
  auto answer = [&](absl::StatusOr<v1::LeaseResponse> r) {
    s.answers.emplace_back(std::move(done), std::move(r));
    return uint64_t{0};
  };
  if (req.worker_id().empty()) return answer(absl::InvalidArgumentError("empty worker_id"));
  if (req.max_tasks() < 1 || req.max_tasks() > s.options.max_tasks_per_lease) {
    return answer(absl::InvalidArgumentError(absl::StrCat(
        "max_tasks ", req.max_tasks(), " (need 1..", s.options.max_tasks_per_lease, ")")));
  }
  if (req.wait_ms() < 0 || req.wait_ms() > s.options.max_wait_ms) {
    return answer(absl::InvalidArgumentError(
        absl::StrCat("wait_ms ", req.wait_ms(), " (need 0..", s.options.max_wait_ms, ")")));
  }
  if (req.request_id().size() > kMaxRequestIdBytes) {
    return answer(absl::InvalidArgumentError(absl::StrCat(
        "request_id of ", req.request_id().size(), " bytes (at most ", kMaxRequestIdBytes, ")")));
  }
  const RequestKey request(req.worker_id(), req.request_id());
  if (!req.request_id().empty() && s.lease_of_request.count(request) > 0) {
    return answer(absl::AlreadyExistsError(
        absl::StrCat("request_id '", req.request_id(), "' was already granted a lease")));
  }
  WorkerEntry* authorized = s.Authorized(req.worker_id(), req.worker_secret());
  if (authorized == nullptr) return answer(NotRegistered(req.worker_id()));
  std::string dc = req.device_class();
  {
    WorkerEntry& w = *authorized;
    if (dc.empty()) dc = w.devices.front().device_class();
    bool known = false;
    for (const v1::DeviceInfo& d : w.devices) known = known || d.device_class() == dc;
    if (!known) {
      return answer(absl::InvalidArgumentError(
          absl::StrCat("device_class '", LogText(dc), "' is not one this worker registered")));
    }
    s.Seen(w);
  }
  if (!req.request_id().empty() && s.Released(request)) {
    return answer(absl::CancelledError(
        absl::StrCat("request_id '", req.request_id(), "' was released by the worker")));
  }
  std::vector<std::string> taken = s.Take(dc, req.max_tasks());
  if (!taken.empty()) {
    return answer(s.Grant(req.worker_id(), req.request_id(), taken, start, {}));
  }
  const Clock::time_point deadline = start + std::chrono::milliseconds(req.wait_ms());
  if (s.stopping || req.wait_ms() == 0) return answer(v1::LeaseResponse());
  const uint64_t id = s.next_wait_id++;
  Waiter& w = s.waiters[id];
  w.worker_id = req.worker_id();
  w.request_id = req.request_id();
  w.device_class = dc;
  w.max_tasks = req.max_tasks();
  w.start = start;
  w.deadline = deadline;
  w.done = std::move(done);
  s.waiting_of_class[dc].insert(id);
  // The reaper sleeps until its next round or the soonest deadline: tell it of a sooner one.
  if (s.wait_deadlines.empty() || deadline < s.wait_deadlines.begin()->first) {
    s.reaper_woken = true;
    s.reaper_cv.notify_one();
  }
  s.wait_deadlines.emplace(deadline, id);
  return id;
}

void LeaseRegistry::CancelLease(uint64_t wait_id) {
  Locked lock(*impl_);
  impl_->EndWait(wait_id, absl::CancelledError("the caller cancelled the lease"));
}

absl::StatusOr<v1::LeaseResponse> LeaseRegistry::Lease(const v1::LeaseRequest& req,
                                                       const std::function<bool()>& cancelled) {
  // The answer, handed from whichever thread ends the wait.
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<absl::StatusOr<v1::LeaseResponse>> answer;
  };
  auto slot = std::make_shared<Slot>();
  const uint64_t id = StartLease(req, [slot](absl::StatusOr<v1::LeaseResponse> r) {
    std::lock_guard<std::mutex> lock(slot->mu);
    slot->answer = std::move(r);
    slot->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(slot->mu);
  bool gone = false;
  while (!slot->answer.has_value()) {
    slot->cv.wait_for(lock, kCancelPoll);
    if (slot->answer.has_value() || gone || !cancelled || !cancelled()) continue;
    gone = true;
    lock.unlock();
    CancelLease(id);  // answers Cancelled unless the call was answered meanwhile
    lock.lock();
  }
  absl::StatusOr<v1::LeaseResponse> answer = std::move(*slot->answer);
  // A call that went away as it was granted tasks hands them back at once.
  if (answer.ok() && !answer->lease_id().empty() && cancelled && cancelled()) {
    lock.unlock();
    v1::ReleaseRequest release;
    release.set_worker_id(req.worker_id());
    release.set_worker_secret(req.worker_secret());
    release.set_lease_id(answer->lease_id());
    (void)Release(release);
    return absl::CancelledError("the caller cancelled the lease");
  }
  return answer;
}

absl::StatusOr<v1::ReleaseResponse> LeaseRegistry::Release(const v1::ReleaseRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  if (req.lease_id().empty() && req.lease_request_id().empty()) {
    return absl::InvalidArgumentError("empty lease_id and lease_request_id");
  }
  if (req.lease_request_id().size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("lease_request_id of ",
                                                   req.lease_request_id().size(),
                                                   " bytes (at most ", kMaxRequestIdBytes, ")"));
  }
  Impl& s = *impl_;
  if (req.candidate_ids_size() > s.options.max_tasks_per_lease) {
    return absl::InvalidArgumentError(absl::StrCat(req.candidate_ids_size(),
                                                   " candidate_ids (a lease holds at most ",
                                                   s.options.max_tasks_per_lease, ")"));
  }
  v1::ReleaseResponse resp;
  Locked lock(s);
  WorkerEntry* w = s.Authorized(req.worker_id(), req.worker_secret());
  if (w == nullptr) return NotRegistered(req.worker_id());
  s.Seen(*w);
  std::string lease_id = req.lease_id();
  if (lease_id.empty()) {
    const RequestKey request(req.worker_id(), req.lease_request_id());
    auto granted = s.lease_of_request.find(request);
    if (granted == s.lease_of_request.end()) {
      // Not granted (yet): a call still waiting takes nothing; one that ended empty or whose
      // lease ended (expired, reported) is unaffected.
      s.RememberReleased(request);
      return resp;
    }
    lease_id = granted->second;
  }
  auto l = s.leases.find(lease_id);
  // An expired (already requeued) or reported lease: nothing left to hand back.
  if (l == s.leases.end()) return resp;
  if (l->second.worker_id != req.worker_id()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "lease '", LogText(req.lease_id()), "' is not held by worker '", req.worker_id(), "'"));
  }
  std::vector<std::string> ids;
  if (req.candidate_ids().empty()) {
    ids.assign(l->second.tasks.begin(), l->second.tasks.end());
  } else {
    for (const std::string& id : req.candidate_ids()) {
      if (l->second.tasks.count(id) > 0) ids.push_back(id);
    }
  }
  const int back = s.Requeue(l->first, l->second, ids);
  spdlog::info("event=lease_released lease={} worker={} requeued={}{}", l->first,
               l->second.worker_id, back, req.lease_id().empty() ? " by_request_id=1" : "");
  if (l->second.tasks.empty()) s.EraseLease(l);
  resp.set_requeued(back);
  return resp;
}

int LeaseRegistry::Enqueue(int workload, std::vector<v1::Task> tasks,
                           std::vector<std::string>* skipped, std::vector<std::string> trace_json) {
  Impl& s = *impl_;
  Locked lock(s);
  int queued = 0;
  std::set<std::string> classes;
  const bool stored_forms = trace_json.size() == tasks.size();
  for (size_t k = 0; k < tasks.size(); ++k) {
    v1::Task& t = tasks[k];
    const std::string id = t.candidate_id();
    std::deque<std::string>& q = s.queues[t.device_class()];
    // Its result was just stored (another job dispatched it): not a task any more, except
    // for a re-timing of the stored record.
    if (!t.remeasure() && s.completed.count(id) > 0) {
      if (skipped) skipped->push_back(id);
      continue;
    }
    auto [it, fresh] = s.tasks.try_emplace(id);
    if (!fresh) {  // another job dispatched it
      if (skipped) skipped->push_back(id);
      continue;
    }
    TaskEntry& e = it->second;
    e.bytes = t.ByteSizeLong() + kTaskFraming;
    auto d = std::make_shared<DispatchedTask>();
    d->task = std::move(t);
    d->workload = workload;
    if (stored_forms) d->trace_json = std::move(trace_json[k]);
    e.d = std::move(d);
    s.CountQueued(*e.d, +1);
    q.push_back(id);
    classes.insert(e.d->task.device_class());
    ++queued;
  }
  for (const std::string& dc : classes) s.Serve(dc);
  return queued;
}

void LeaseRegistry::DropQueued(const std::string& job_id) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.tasks.begin(); it != s.tasks.end();) {
    if (it->second.d->task.job_id() == job_id && it->second.lease_id.empty()) {
      it = s.tasks.erase(it);
    } else {
      ++it;
    }
  }
  s.queued_of_job.erase(job_id);
}

std::vector<std::string> LeaseRegistry::Withdraw(const std::string& job_id, int workload, int n) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<std::string> withdrawn;
  for (auto& [device_class, q] : s.queues) {
    for (auto it = q.end(); it != q.begin() && static_cast<int>(withdrawn.size()) < n;) {
      --it;
      auto t = s.tasks.find(*it);
      if (t == s.tasks.end() || !t->second.lease_id.empty()) continue;  // stale or leased
      const DispatchedTask& d = *t->second.d;
      if (d.workload != workload || d.task.job_id() != job_id || d.task.remeasure()) continue;
      s.CountQueued(d, -1);
      withdrawn.push_back(*it);
      s.tasks.erase(t);
      it = q.erase(it);
    }
  }
  return withdrawn;
}

std::vector<HeldTask> LeaseRegistry::Find(const std::vector<std::string>& candidate_ids,
                                          const LeaseHolder* holder, std::vector<bool>* foreign) {
  Impl& s = *impl_;
  std::vector<HeldTask> out(candidate_ids.size());
  if (foreign != nullptr) foreign->assign(candidate_ids.size(), false);
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < candidate_ids.size(); ++i) {
    auto t = s.tasks.find(candidate_ids[i]);
    if (t == s.tasks.end()) continue;
    if (holder != nullptr) {
      const auto& g = t->second.grants;
      const bool granted = std::any_of(g.begin(), g.end(), [&](const auto& lease_worker) {
        return lease_worker.first == holder->lease_id && lease_worker.second == holder->worker_id;
      });
      if (!granted && foreign != nullptr) (*foreign)[i] = true;
    }
    out[i] = t->second.d;
  }
  return out;
}

std::vector<HeldTask> LeaseRegistry::Complete(const std::vector<std::string>& candidate_ids,
                                              const std::optional<std::string>& only_lease) {
  Impl& s = *impl_;
  std::vector<HeldTask> out(candidate_ids.size());
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < candidate_ids.size(); ++i) {
    auto t = s.tasks.find(candidate_ids[i]);
    if (t == s.tasks.end()) continue;
    if (only_lease.has_value() && (t->second.lease_id.empty() || t->second.lease_id != *only_lease))
      continue;
    TaskEntry task = std::move(t->second);
    s.tasks.erase(t);
    if (!task.d->task.remeasure() && s.completed.insert(candidate_ids[i]).second) {
      s.completed_order.push_back(candidate_ids[i]);
      if (s.completed_order.size() > kMaxRememberedCompleted) {
        s.completed.erase(s.completed_order.front());
        s.completed_order.pop_front();
      }
    }
    if (task.lease_id.empty()) {
      s.CountQueued(*task.d, -1);
    } else {
      if (auto l = s.leases.find(task.lease_id); l != s.leases.end()) {
        l->second.tasks.erase(candidate_ids[i]);
        if (l->second.tasks.empty()) s.EraseLease(l);
      }
    }
    out[i] = std::move(task.d);
  }
  return out;
}

int LeaseRegistry::QueuedOf(const std::string& job_id, int workload) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto job = s.queued_of_job.find(job_id);
  if (job == s.queued_of_job.end()) return 0;
  if (workload < 0) {
    int all = 0;
    for (const auto& [w, count] : job->second) all += count;
    return all;
  }
  auto n = job->second.find(workload);
  return n == job->second.end() ? 0 : n->second;
}

int64_t LeaseRegistry::Waiting() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int64_t>(impl_->waiters.size());
}

int64_t LeaseRegistry::Queued() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->Queued();
}

}  // namespace lathe::daemon
