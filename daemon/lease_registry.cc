#include "daemon/lease_registry.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "daemon/log_text.h"
#include "daemon/metrics.h"
#include "daemon/niced_runner.h"
#include "spdlog/spdlog.h"
#include "tuner/tune_common.h"

namespace lathe::tuner {

namespace v1 = lathe::v1;

namespace {

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

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// 32 random bytes (the OS's generator behind std::random_device) as 64 hex digits.
std::string NewSecret() {
  std::random_device rd;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = rd();
    for (int b = 0; b < 8; ++b, v >>= 4) out.push_back(kHex[v & 15]);
  }
  return out;
}

// InvalidArgument naming `what` when `text` is empty (unless allowed), longer than
// `max_bytes` or holds a control character.
absl::Status CheckText(absl::string_view what, absl::string_view text, size_t max_bytes,
                       bool may_be_empty = false) {
  if (text.empty() && !may_be_empty)
    return absl::InvalidArgumentError(absl::StrCat("empty ", what));
  if (text.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of ", text.size(), " bytes (at most ", max_bytes, ")"));
  }
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(what, " holds a control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status NotRegistered(const std::string& worker_id) {
  return absl::NotFoundError(absl::StrCat("worker '", LogText(worker_id, kMaxWorkerIdBytes),
                                          "' is not registered (or not with this secret); "
                                          "register again"));
}

struct TaskEntry {
  DispatchedTask d;
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

}  // namespace

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
    w.last_seen_ms = NowUnixMs();
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
      CountQueued(t.d, -1);
      lease.tasks.insert(id);
      *resp.add_tasks() = t.d.task;
    }
    resp.set_lease_id(lease_id);
    resp.set_deadline_ms(NowUnixMs() + options.lease_duration_ms);
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
      CountQueued(task->second.d, +1);
      const std::string& dc = task->second.d.task.device_class();
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

namespace {

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

}  // namespace

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

absl::StatusOr<v1::RegisterResponse> LeaseRegistry::Register(const v1::RegisterRequest& req) {
  if (absl::Status st = CheckText("hostname", req.hostname(), kMaxHostnameBytes); !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckText("lathe_version", req.lathe_version(), kMaxVersionBytes, true);
      !st.ok()) {
    return st;
  }
  if (req.devices().empty()) return absl::InvalidArgumentError("no devices");
  if (req.devices_size() > kMaxDevicesPerWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.devices_size(), " devices (at most ", kMaxDevicesPerWorker, ")"));
  }
  for (int i = 0; i < req.devices_size(); ++i) {
    const v1::DeviceInfo& d = req.devices(i);
    const std::string at = absl::StrCat("devices[", i, "]");
    absl::Status st = CheckText(at + ".device_class", d.device_class(), kMaxDeviceTextBytes);
    if (st.ok()) st = CheckText(at + ".name", d.name(), kMaxDeviceTextBytes, true);
    if (st.ok()) st = CheckText(at + ".kind", d.kind(), kMaxDeviceTextBytes, true);
    if (!st.ok()) return st;
  }
  size_t total = req.hostname().size() + req.lathe_version().size();
  for (const v1::DeviceInfo& d : req.devices()) {
    total += d.device_class().size() + d.name().size() + d.kind().size();
  }
  if (total > kMaxRegistrationBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "registration of ", total, " bytes of text (at most ", kMaxRegistrationBytes, ")"));
  }
  if (req.worker_id().size() > kMaxWorkerIdBytes) {
    return absl::InvalidArgumentError("worker_id too long");
  }
  for (char c : req.worker_id()) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return absl::InvalidArgumentError("worker_id holds a character other than [A-Za-z0-9._-]");
    }
  }
  if (req.worker_secret().size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError("worker_secret too long");
  }
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::string id = req.worker_id();
  auto known = id.empty() ? s.workers.end() : s.workers.find(id);
  if (known != s.workers.end() && !ConstantTimeEquals(req.worker_secret(), known->second.secret)) {
    spdlog::warn("event=worker_id_refused worker={} hostname=\"{}\"", id, LogText(req.hostname()));
    return absl::AlreadyExistsError(
        absl::StrCat("worker id '", id,
                     "' is registered to another worker (re-registering it needs its secret)"));
  }
  if (known == s.workers.end()) {
    if (static_cast<int64_t>(s.workers.size()) >= s.options.max_workers) {
      return absl::ResourceExhaustedError(
          absl::StrCat(s.workers.size(), " workers registered (at most ", s.options.max_workers,
                       "); lost ones are forgotten after ", s.options.forget_lost_after_ms, " ms"));
    }
    // An id given but unknown here (the registry restarted, or forgot a lost worker) is the
    // worker's again, under a new secret.
    if (id.empty()) {
      do {
        id = s.NewId("w-");
      } while (s.workers.count(id) > 0);
    }
    known = s.workers.emplace(id, WorkerEntry()).first;
    known->second.secret = NewSecret();
    known->second.seq = s.next_seq++;
  }
  WorkerEntry& w = known->second;
  w.hostname = req.hostname();
  w.version = req.lathe_version();
  w.devices.assign(req.devices().begin(), req.devices().end());
  s.Seen(w);
  std::vector<std::string> classes;
  for (const v1::DeviceInfo& d : w.devices) classes.push_back(d.device_class());
  spdlog::info("event=worker_registered worker={} hostname=\"{}\" devices=\"{}\" version=\"{}\"",
               id, LogText(w.hostname), LogText(absl::StrJoin(classes, ";"), 1024),
               LogText(w.version));
  s.UpdateGauges();
  v1::RegisterResponse resp;
  resp.set_worker_id(id);
  resp.set_heartbeat_interval_ms(s.options.heartbeat_interval_ms);
  resp.set_lease_duration_ms(s.options.lease_duration_ms);
  resp.set_worker_secret(w.secret);
  return resp;
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

absl::StatusOr<v1::HeartbeatResponse> LeaseRegistry::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.worker_id().empty()) return absl::InvalidArgumentError("empty worker_id");
  if (req.lease_ids_size() > kMaxLeaseIds) {
    return absl::InvalidArgumentError("too many lease_ids");
  }
  for (int i = 0; i < req.lease_ids_size(); ++i) {
    if (req.lease_ids(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("lease_ids[", i, "] is empty"));
    }
  }
  Impl& s = *impl_;
  v1::HeartbeatResponse resp;
  std::lock_guard<std::mutex> lock(s.mu);
  WorkerEntry* w = s.Authorized(req.worker_id(), req.worker_secret());
  if (w == nullptr) {
    resp.set_reregister(true);
    return resp;
  }
  const bool was_lost = w->lost;
  s.Seen(*w);
  if (was_lost) spdlog::info("event=worker_back worker={}", req.worker_id());
  const Clock::time_point now = Clock::now();
  for (const std::string& id : req.lease_ids()) {
    auto l = s.leases.find(id);
    if (l == s.leases.end() || l->second.worker_id != req.worker_id()) continue;
    l->second.deadline = now + std::chrono::milliseconds(s.options.lease_duration_ms);
  }
  return resp;
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
                           std::vector<std::string>* skipped) {
  Impl& s = *impl_;
  Locked lock(s);
  int queued = 0;
  std::set<std::string> classes;
  for (v1::Task& t : tasks) {
    const std::string id = t.candidate_id();
    std::deque<std::string>& q = s.queues[t.device_class()];
    TaskEntry e;
    e.bytes = t.ByteSizeLong() + kTaskFraming;
    e.d.task = std::move(t);
    e.d.workload = workload;
    // Its result was just stored (another job dispatched it): not a task any more, except
    // for a re-timing of the stored record.
    if (!e.d.task.remeasure() && s.completed.count(id) > 0) {
      if (skipped) skipped->push_back(id);
      continue;
    }
    auto [it, fresh] = s.tasks.emplace(id, std::move(e));
    if (!fresh) {  // another job dispatched it
      if (skipped) skipped->push_back(id);
      continue;
    }
    s.CountQueued(it->second.d, +1);
    q.push_back(id);
    classes.insert(it->second.d.task.device_class());
    ++queued;
  }
  for (const std::string& dc : classes) s.Serve(dc);
  return queued;
}

void LeaseRegistry::DropQueued(const std::string& job_id) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.tasks.begin(); it != s.tasks.end();) {
    if (it->second.d.task.job_id() == job_id && it->second.lease_id.empty()) {
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
      const DispatchedTask& d = t->second.d;
      if (d.workload != workload || d.task.job_id() != job_id || d.task.remeasure()) continue;
      s.CountQueued(d, -1);
      withdrawn.push_back(*it);
      s.tasks.erase(t);
      it = q.erase(it);
    }
  }
  return withdrawn;
}

absl::StatusOr<std::string> LeaseRegistry::AuthorizeReport(const std::string& worker_id,
                                                           const std::string& secret) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  WorkerEntry* w = s.Authorized(worker_id, secret);
  if (w == nullptr) return NotRegistered(worker_id);
  s.Seen(*w);
  return absl::StrCat(worker_id, "@", w->hostname);
}

std::vector<std::optional<DispatchedTask>> LeaseRegistry::Find(
    const std::vector<std::string>& candidate_ids, const LeaseHolder* holder,
    std::vector<bool>* foreign) {
  Impl& s = *impl_;
  std::vector<std::optional<DispatchedTask>> out(candidate_ids.size());
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

std::vector<std::optional<DispatchedTask>> LeaseRegistry::Complete(
    const std::vector<std::string>& candidate_ids, const std::optional<std::string>& only_lease) {
  Impl& s = *impl_;
  std::vector<std::optional<DispatchedTask>> out(candidate_ids.size());
  std::lock_guard<std::mutex> lock(s.mu);
  for (size_t i = 0; i < candidate_ids.size(); ++i) {
    auto t = s.tasks.find(candidate_ids[i]);
    if (t == s.tasks.end()) continue;
    if (only_lease.has_value() && (t->second.lease_id.empty() || t->second.lease_id != *only_lease))
      continue;
    TaskEntry task = std::move(t->second);
    s.tasks.erase(t);
    if (!task.d.task.remeasure() && s.completed.insert(candidate_ids[i]).second) {
      s.completed_order.push_back(candidate_ids[i]);
      if (s.completed_order.size() > kMaxRememberedCompleted) {
        s.completed.erase(s.completed_order.front());
        s.completed_order.pop_front();
      }
    }
    if (task.lease_id.empty()) {
      s.CountQueued(task.d, -1);
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

void LeaseRegistry::AddMeasured(const std::string& worker_id, int64_t n) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto w = s.workers.find(worker_id); w != s.workers.end()) w->second.measured += n;
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

v1::ListWorkersResponse LeaseRegistry::ListWorkers() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  const std::set<std::string> busy = s.BusyWorkers();
  // Each worker's leases with unreported tasks: their task count, soonest deadline and jobs.
  struct Held {
    int tasks = 0;
    Clock::time_point deadline = Clock::time_point::max();
    std::set<std::string> jobs;
  };
  std::map<std::string, Held> held;
  for (const auto& [lease_id, l] : s.leases) {
    if (l.tasks.empty()) continue;
    Held& h = held[l.worker_id];
    h.tasks += static_cast<int>(l.tasks.size());
    h.deadline = std::min(h.deadline, l.deadline);
    for (const std::string& c : l.tasks) {
      auto t = s.tasks.find(c);
      if (t != s.tasks.end()) h.jobs.insert(t->second.d.task.job_id());
    }
  }
  const Clock::time_point now = Clock::now();
  const int64_t now_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  v1::ListWorkersResponse resp;
  for (const auto& [id, w] : s.workers) {
    v1::WorkerInfo* info = resp.add_workers();
    info->set_worker_id(id);
    info->set_hostname(w.hostname);
    std::vector<std::string> classes;
    for (const v1::DeviceInfo& d : w.devices) classes.push_back(d.device_class());
    info->set_device_class(absl::StrJoin(classes, ";"));
    info->set_state(w.lost ? "lost" : busy.count(id) > 0 ? "busy" : "idle");
    info->set_measured(w.measured);
    info->set_last_seen_ms(w.last_seen_ms);
    info->set_lathe_version(w.version);
    auto h = held.find(id);
    if (h != held.end()) {
      info->set_leased_tasks(h->second.tasks);
      info->set_lease_deadline_ms(
          now_unix_ms +
          std::chrono::duration_cast<std::chrono::milliseconds>(h->second.deadline - now).count());
      for (const std::string& j : h->second.jobs) info->add_lease_job_ids(j);
    }
  }
  return resp;
}

std::vector<std::string> LeaseRegistry::DeviceClasses(ir::TargetKind kind) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<const WorkerEntry*> live;
  for (const auto& [id, w] : s.workers) {
    if (!w.lost) live.push_back(&w);
  }
  std::sort(live.begin(), live.end(),
            [](const WorkerEntry* a, const WorkerEntry* b) { return a->seq < b->seq; });
  std::vector<std::string> classes;
  std::set<std::string> seen;
  for (const WorkerEntry* w : live) {
    for (const v1::DeviceInfo& d : w->devices) {
      absl::StatusOr<ir::TargetKind> k = ir::DeviceClassKind(d.device_class());
      if (k.ok() && *k == kind && seen.insert(d.device_class()).second) {
        classes.push_back(d.device_class());
      }
    }
  }
  return classes;
}

}  // namespace lathe::tuner
