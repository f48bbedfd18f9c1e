// The lease registry's workers: registration, heartbeats, report authorization and the worker
// list (see lease_registry.h); the leases and queues are in lease_registry.cc.
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/lease_registry.h"
#include "daemon/lease_registry_impl.h"
#include "daemon/log_text.h"
#include "spdlog/spdlog.h"
#include "tuner/tune_common.h"

namespace lathe::daemon {

namespace lease_internal {

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
                       bool may_be_empty) {
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

}  // namespace lease_internal

using lease_internal::CheckText;
using lease_internal::kMaxDevicesPerWorker;
using lease_internal::kMaxDeviceTextBytes;
using lease_internal::kMaxHostnameBytes;
using lease_internal::kMaxLeaseIds;
using lease_internal::kMaxRegistrationBytes;
using lease_internal::kMaxSecretBytes;
using lease_internal::kMaxVersionBytes;
using lease_internal::kMaxWorkerIdBytes;
using lease_internal::NewSecret;
using lease_internal::NotRegistered;

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

absl::StatusOr<std::string> LeaseRegistry::AuthorizeReport(const std::string& worker_id,
                                                           const std::string& secret) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  WorkerEntry* w = s.Authorized(worker_id, secret);
  if (w == nullptr) return NotRegistered(worker_id);
  s.Seen(*w);
  return absl::StrCat(worker_id, "@", w->hostname);
}

void LeaseRegistry::AddMeasured(const std::string& worker_id, int64_t n) {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto w = s.workers.find(worker_id); w != s.workers.end()) w->second.measured += n;
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
      if (t != s.tasks.end()) h.jobs.insert(t->second.d->task.job_id());
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

}  // namespace lathe::daemon
