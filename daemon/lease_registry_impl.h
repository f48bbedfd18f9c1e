// \file
// Internal to daemon/: the lease registry's state (LeaseRegistry::Impl), shared by its two
// halves: lease_registry.cc (long polls, leases, the task queues, reports) and
// lease_workers.cc (registration, heartbeats, the worker list). Nothing outside daemon/
// includes this header: use daemon/lease_registry.h.
#ifndef LATHE_DAEMON_LEASE_REGISTRY_IMPL_H_
#define LATHE_DAEMON_LEASE_REGISTRY_IMPL_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "daemon/lease_registry.h"
#include "daemon/log_text.h"
#include "daemon/metrics.h"
#include "spdlog/spdlog.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

namespace v1 = lathe::v1;

namespace lease_internal {

using Clock = std::chrono::steady_clock;

constexpr int kMaxDevicesPerWorker = 64;
constexpr int kMaxLeaseIds = 4096;
// How often the blocking Lease looks whether its caller went away (StartLease callers are told
// by CancelLease instead). Each look wakes only that call's thread.
constexpr auto kCancelPoll = std::chrono::milliseconds(1000);
// A LeaseResponse's bytes besides its tasks (lease id, deadline), and a task's besides its
// own (field tag and length), both rounded up.
constexpr size_t kLeaseFraming = 64;
constexpr size_t kTaskFraming = 8;
constexpr size_t kMaxRequestIdBytes = 128;
// Released request ids of Lease calls not answered yet that the registry remembers at most.
constexpr size_t kMaxReleasedRequests = 65536;
// Completed candidate ids remembered so that Enqueue skips them (see the header).
constexpr size_t kMaxRememberedCompleted = 65536;
// Registration strings (see the header).
constexpr size_t kMaxHostnameBytes = 255;
constexpr size_t kMaxDeviceTextBytes = 256;
constexpr size_t kMaxVersionBytes = 64;
constexpr size_t kMaxWorkerIdBytes = 64;
constexpr size_t kMaxSecretBytes = 128;
// All the strings of one registration together: with at most max_workers workers, what
// ListWorkers answers stays within what a client receives.
constexpr size_t kMaxRegistrationBytes = 2048;
// The leases a task was granted under that the registry remembers (the newest): a report
// answers one of them.
constexpr size_t kMaxGrants = 8;

struct TaskEntry {
  HeldTask d;            // never null
  std::string lease_id;  // empty: queued
  size_t bytes = 0;      // what the task adds to a LeaseResponse (see kTaskFraming)
  // (lease id, worker id) of the leases it was granted under, newest last (kMaxGrants).
  std::deque<std::pair<std::string, std::string>> grants;
};

struct LeaseEntry {
  std::string worker_id;
  std::string request_id;  // LeaseRequest.request_id; empty when none was given
  Clock::time_point deadline;
  std::set<std::string> tasks;  // unreported candidate ids
};

// (worker id, LeaseRequest.request_id)
using RequestKey = std::pair<std::string, std::string>;

// A Lease call waiting for tasks of its device class (StartLease).
struct Waiter {
  std::string worker_id;
  std::string request_id;
  std::string device_class;
  int max_tasks = 1;
  Clock::time_point start;
  Clock::time_point deadline;
  LeaseRegistry::LeaseDone done;
};

// A long poll's answer, run once the registry's mutex is released.
using Answer = std::pair<LeaseRegistry::LeaseDone, absl::StatusOr<v1::LeaseResponse>>;

struct WorkerEntry {
  std::string secret;  // RegisterResponse.worker_secret
  uint64_t seq = 0;    // order of first registration
  std::string hostname;
  std::string version;
  std::vector<v1::DeviceInfo> devices;
  Clock::time_point last_seen;
  int64_t last_seen_ms = 0;
  int64_t measured = 0;
  bool lost = false;
};

// Constant-time comparison of two secrets.
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// 32 random bytes (the OS's generator behind std::random_device) as 64 hex digits.
std::string NewSecret();
// InvalidArgument naming `what` when `text` is empty (unless allowed), longer than
// `max_bytes` or holds a control character.
absl::Status CheckText(absl::string_view what, absl::string_view text, size_t max_bytes,
                       bool may_be_empty = false);
// NotFound: `worker_id` is not registered (or not with this secret).
absl::Status NotRegistered(const std::string& worker_id);

}  // namespace lease_internal

using lease_internal::Answer;
using lease_internal::Clock;
using lease_internal::ConstantTimeEquals;
using lease_internal::kLeaseFraming;
using lease_internal::kMaxGrants;
using lease_internal::kMaxReleasedRequests;
using lease_internal::LeaseEntry;
using lease_internal::RequestKey;
using lease_internal::TaskEntry;
using lease_internal::Waiter;
using lease_internal::WorkerEntry;

class LeaseRegistry::Impl {
 public:
  explicit Impl(const LeaseRegistryOptions& o) : options(o) {}

  LeaseRegistryOptions options;
  std::mutex mu;
  // Lease calls waiting for tasks, by id (the order they came in), their ids per device class
  // and by deadline. A task queued goes to the oldest waiter of its class at once (Serve), on
  // the thread that queued it: no thread wakes to find nothing, and a waiting call holds none.
  // A waiter exists only while its class's queue holds no task it could take.
  std::map<uint64_t, Waiter> waiters;
  std::map<std::string, std::set<uint64_t>> waiting_of_class;
  std::set<std::pair<Clock::time_point, uint64_t>> wait_deadlines;
  uint64_t next_wait_id = 1;
  // Answers of long polls ended with `mu` held, run by Locked once it is released.
  std::vector<Answer> answers;
  std::condition_variable reaper_cv;  // stopping, or a waiter due before the reaper looks
  bool reaper_woken = false;
  bool stopping = false;
  bool stopped = false;
  std::map<std::string, TaskEntry> tasks;                 // candidate id -> task
  std::map<std::string, std::deque<std::string>> queues;  // device class -> candidate ids
  std::map<std::string, LeaseEntry> leases;
  std::map<RequestKey, std::string> lease_of_request;  // -> lease id, for leases that have one
  // Request ids released before their Lease call was answered, with when to forget them, and
  // the same in the order they were released (every id is kept for the same time, so that is
  // the order to forget them in; an entry whose time no longer matches the map's is stale: the
  // id was released again or forgotten).
  std::map<RequestKey, Clock::time_point> released_requests;
  std::deque<std::pair<Clock::time_point, RequestKey>> released_order;
  // The most recently completed candidate ids (their results are stored), oldest first.
  std::set<std::string> completed;
  std::deque<std::string> completed_order;
  std::map<std::string, WorkerEntry> workers;
  uint64_t next_seq = 0;
  // Queued (not leased) tasks per job and workload index, kept beside `tasks` so that the job
  // runner can ask at every wake-up without a walk over every task.
  std::map<std::string, std::map<int, int>> queued_of_job;
  std::thread reaper;
  std::mt19937_64 id_rng{std::random_device{}() ^
                         static_cast<uint64_t>(Clock::now().time_since_epoch().count())};

  Metrics* metrics() { return options.metrics; }

  // --- helpers; all expect `mu` held ---

  std::string NewId(const char* prefix) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%012llx", prefix,
                  static_cast<unsigned long long>(id_rng() & 0xffffffffffffull));
    return buf;
  }

  // Counts a task entering (+1) or leaving (-1) the queued state.
  void CountQueued(const DispatchedTask& d, int delta) {
    auto job = queued_of_job.find(d.task.job_id());
    if (job == queued_of_job.end()) {
      if (delta < 0) return;
      job = queued_of_job.emplace(d.task.job_id(), std::map<int, int>()).first;
    }
    int& n = job->second[d.workload];
    n = std::max(0, n + delta);
    if (n == 0) job->second.erase(d.workload);
    if (job->second.empty()) queued_of_job.erase(job);
  }

  void Seen(WorkerEntry& w) {
    w.last_seen = Clock::now();
    w.last_seen_ms = tuner::NowUnixMs();
    w.lost = false;
  }

  // Workers holding a lease with unreported tasks: one pass over the leases.
  std::set<std::string> BusyWorkers() const {
    std::set<std::string> busy;
    for (const auto& [id, l] : leases) {
      if (!l.tasks.empty()) busy.insert(l.worker_id);
    }
    return busy;
  }

  // Forgets a lease (and its request id).
  std::map<std::string, LeaseEntry>::iterator EraseLease(
      std::map<std::string, LeaseEntry>::iterator it) {
    if (!it->second.request_id.empty()) {
      lease_of_request.erase(RequestKey(it->second.worker_id, it->second.request_id));
    }
    return leases.erase(it);
  }

  // The worker `id` when `secret` is the one it registered with, else null.
  WorkerEntry* Authorized(const std::string& id, const std::string& secret) {
    auto it = workers.find(id);
    if (it == workers.end() || !ConstantTimeEquals(secret, it->second.secret)) return nullptr;
    return &it->second;
  }

  bool Released(const RequestKey& key) const { return released_requests.count(key) > 0; }

  // Remembers that the Lease call `key` was given up on (see the header), and wakes it.
  void RememberReleased(const RequestKey& key) {
    const Clock::time_point forget =
        Clock::now() + std::chrono::milliseconds(int64_t{options.max_wait_ms} +
                                                 int64_t{options.lease_duration_ms});
    released_requests[key] = forget;
    released_order.emplace_back(forget, key);
    if (released_order.size() > 2 * kMaxReleasedRequests) {
      // One id released again and again leaves stale entries behind: keep the current ones.
      std::deque<std::pair<Clock::time_point, RequestKey>> current;
      for (const auto& [t, k] : released_order) {
        auto it = released_requests.find(k);
        if (it != released_requests.end() && it->second == t) current.emplace_back(t, k);
      }
      released_order = std::move(current);
    }
    ForgetReleased(Clock::time_point::min());
    for (auto it = waiters.begin(); it != waiters.end();) {
      const uint64_t id = it->first;
      const bool match = it->second.worker_id == key.first && it->second.request_id == key.second;
      ++it;
      if (match) {
        EndWait(id, absl::CancelledError(
                        absl::StrCat("request_id '", key.second, "' was released by the worker")));
      }
    }
  }

  // Forgets the released request ids due by `now`, and the oldest ones past
  // kMaxReleasedRequests.
  void ForgetReleased(Clock::time_point now) {
    while (!released_order.empty()) {
      const auto& [forget, key] = released_order.front();
      auto it = released_requests.find(key);
      const bool current = it != released_requests.end() && it->second == forget;
      if (current && forget > now && released_requests.size() <= kMaxReleasedRequests) break;
      if (current) released_requests.erase(it);
      released_order.pop_front();
    }
  }

  int64_t Queued() const {
    int64_t n = 0;
    for (const auto& [job, per_workload] : queued_of_job) {
      for (const auto& [workload, queued] : per_workload) n += queued;
    }
    return n;
  }

  // Takes up to `max_tasks` queued tasks of `device_class` from the front of its queue, within
  // max_lease_bytes (one task always goes; the rest waits at the front for the next lease).
  std::vector<std::string> Take(const std::string& device_class, int max_tasks) {
    std::vector<std::string> taken;
    auto qi = queues.find(device_class);
    if (qi == queues.end()) return taken;
    std::deque<std::string>& q = qi->second;
    const size_t max_bytes = static_cast<size_t>(std::max<int64_t>(0, options.max_lease_bytes));
    size_t bytes = kLeaseFraming;
    while (!q.empty() && static_cast<int>(taken.size()) < max_tasks) {
      auto t = tasks.find(q.front());
      if (t == tasks.end() || !t->second.lease_id.empty()) {  // stale entry
        q.pop_front();
        continue;
      }
      if (!taken.empty() && bytes + t->second.bytes > max_bytes) break;
      bytes += t->second.bytes;
      taken.push_back(std::move(q.front()));
      q.pop_front();
    }
    return taken;
  }

  // Records a lease of the tasks `taken` for a Lease call of `worker_id` that came in at
  // `start` and waited `waited` of that for tasks; returns its answer.
  v1::LeaseResponse Grant(const std::string& worker_id, const std::string& request_id,
                          const std::vector<std::string>& taken, Clock::time_point start,
                          Clock::duration waited) {
    v1::LeaseResponse resp;
    const std::string lease_id = NewId("lease-");
    LeaseEntry& lease = leases[lease_id];
    lease.worker_id = worker_id;
    lease.request_id = request_id;
    if (!request_id.empty()) lease_of_request[RequestKey(worker_id, request_id)] = lease_id;
    lease.deadline = Clock::now() + std::chrono::milliseconds(options.lease_duration_ms);
    for (const std::string& id : taken) {
      TaskEntry& t = tasks[id];
      t.lease_id = lease_id;
      t.grants.emplace_back(lease_id, worker_id);
      if (t.grants.size() > kMaxGrants) t.grants.pop_front();
      CountQueued(*t.d, -1);
      lease.tasks.insert(id);
      *resp.add_tasks() = t.d->task;
    }
    resp.set_lease_id(lease_id);
    resp.set_deadline_ms(tuner::NowUnixMs() + options.lease_duration_ms);
    if (Metrics* m = metrics()) {
      m->AddLeaseGranted(static_cast<int64_t>(taken.size()));
      m->ObserveDispatchLatency(
          std::chrono::duration<double>(Clock::now() - start - waited).count());
    }
    return resp;
  }

  // Ends the waiting call `id` with `answer` (run once `mu` is released).
  void EndWait(uint64_t id, absl::StatusOr<v1::LeaseResponse> answer) {
    auto w = waiters.find(id);
    if (w == waiters.end()) return;
    auto of_class = waiting_of_class.find(w->second.device_class);
    of_class->second.erase(id);
    if (of_class->second.empty()) waiting_of_class.erase(of_class);
    wait_deadlines.erase({w->second.deadline, id});
    answers.emplace_back(std::move(w->second.done), std::move(answer));
    waiters.erase(w);
  }

  // Hands the queued tasks of `device_class` to its waiting calls, the oldest first.
  void Serve(const std::string& device_class) {
    auto of_class = waiting_of_class.find(device_class);
    while (of_class != waiting_of_class.end()) {
      const uint64_t id = *of_class->second.begin();
      const Waiter& w = waiters.at(id);
      std::vector<std::string> taken = Take(device_class, w.max_tasks);
      if (taken.empty()) return;
      const Clock::time_point now = Clock::now();
      v1::LeaseResponse resp = Grant(w.worker_id, w.request_id, taken, w.start, now - w.start);
      EndWait(id, std::move(resp));
      of_class = waiting_of_class.find(device_class);
    }
  }

  // Ends every waiting call (stopping) with an empty lease.
  void EndAllWaits() {
    while (!waiters.empty()) EndWait(waiters.begin()->first, v1::LeaseResponse());
  }

  // Ends the waiting calls whose wait_ms has passed by `now` with an empty lease.
  void ExpireWaits(Clock::time_point now) {
    while (!wait_deadlines.empty() && wait_deadlines.begin()->first <= now) {
      EndWait(wait_deadlines.begin()->second, v1::LeaseResponse());
    }
  }

  // Puts the unreported tasks `ids` of lease `lease_id` back at the front of their queues
  // (in their order: they waited longest) and forgets them in the lease; returns how many.
  int Requeue(const std::string& lease_id, LeaseEntry& lease, const std::vector<std::string>& ids) {
    int back = 0;
    std::set<std::string> classes;
    for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
      lease.tasks.erase(*it);
      auto task = tasks.find(*it);
      if (task == tasks.end() || task->second.lease_id != lease_id) continue;
      task->second.lease_id.clear();
      CountQueued(*task->second.d, +1);
      const std::string& dc = task->second.d->task.device_class();
      queues[dc].push_front(*it);
      classes.insert(dc);
      ++back;
    }
    for (const std::string& dc : classes) Serve(dc);
    return back;
  }

  // Refreshed by the reaper every reaper_interval_ms (and on Register), not on the Lease and
  // Report paths: it walks every task.
  void UpdateGauges() {
    if (metrics() == nullptr) return;
    const std::set<std::string> busy_set = BusyWorkers();
    int64_t idle = 0, busy = 0, lost = 0;
    for (const auto& [id, w] : workers) {
      if (w.lost) {
        ++lost;
      } else if (busy_set.count(id) > 0) {
        ++busy;
      } else {
        ++idle;
      }
    }
    metrics()->SetWorkers(idle, busy, lost);
    metrics()->SetQueueDepth(Queued());
    metrics()->SetActiveLeases(static_cast<int64_t>(leases.size()));
  }

  // The reaper: expired leases, lost workers, gauges every reaper_interval_ms, and the long
  // polls whose wait_ms has passed when it does.
  void Reap() {
    std::unique_lock<std::mutex> lock(mu);
    const auto interval = std::chrono::milliseconds(options.reaper_interval_ms);
    Clock::time_point next_reap = Clock::now() + interval;
    while (!stopping) {
      Clock::time_point until = next_reap;
      if (!wait_deadlines.empty()) until = std::min(until, wait_deadlines.begin()->first);
      reaper_cv.wait_until(lock, until, [&] { return stopping || reaper_woken; });
      reaper_woken = false;
      if (stopping) break;
      const Clock::time_point now = Clock::now();
      ExpireWaits(now);
      if (now >= next_reap) {
        next_reap = now + interval;
        ReapOnce(now);
      }
      if (!answers.empty()) {
        std::vector<Answer> ended;
        ended.swap(answers);
        lock.unlock();
        for (auto& [done, answer] : ended) done(std::move(answer));
        lock.lock();
      }
    }
  }

  // One round of the reaper (see the header): expired leases, released request ids, lost and
  // forgotten workers, the gauges. `mu` held.
  void ReapOnce(Clock::time_point now) {
    for (auto it = leases.begin(); it != leases.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      std::vector<std::string> ids(it->second.tasks.begin(), it->second.tasks.end());
      const int back = Requeue(it->first, it->second, ids);
      spdlog::warn("event=lease_expired lease={} worker={} requeued={}", it->first,
                   it->second.worker_id, back);
      it = EraseLease(it);
    }
    ForgetReleased(now);
    const auto lost_after = std::chrono::milliseconds(int64_t{options.heartbeat_interval_ms} *
                                                      std::max(1, options.lost_after_heartbeats));
    const auto forget_after = std::chrono::milliseconds(options.forget_lost_after_ms);
    for (auto it = workers.begin(); it != workers.end();) {
      WorkerEntry& w = it->second;
      if (!w.lost && now - w.last_seen > lost_after) {
        w.lost = true;
        spdlog::warn("event=worker_lost worker={} hostname=\"{}\" last_seen_ms={}", it->first,
                     LogText(w.hostname), w.last_seen_ms);
      }
      if (w.lost && now - w.last_seen > forget_after) {
        spdlog::info("event=worker_forgotten worker={} hostname=\"{}\"", it->first,
                     LogText(w.hostname));
        it = workers.erase(it);
        continue;
      }
      ++it;
    }
    UpdateGauges();
  }
};

namespace lease_internal {

// Holds the registry's mutex; once it is released, runs the answers of the long polls ended
// under it (an answer's callback never runs under the mutex: it may call the registry).
class Locked {
 public:
  explicit Locked(LeaseRegistry::Impl& s) : s_(s), lock_(s.mu) {}
  ~Locked() {
    std::vector<Answer> ended;
    ended.swap(s_.answers);
    lock_.unlock();
    for (auto& [done, answer] : ended) done(std::move(answer));
  }
  Locked(const Locked&) = delete;
  Locked& operator=(const Locked&) = delete;

 private:
  LeaseRegistry::Impl& s_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace lease_internal

}  // namespace lathe::daemon

#endif  // LATHE_DAEMON_LEASE_REGISTRY_IMPL_H_
