// \file
// The harness of the end-to-end tests: real lathed, lathe-worker and lathe processes from the
// build directory on loopback, each in a temporary directory with its own database, spools
// and logs (printed when a test fails). Paths of the binaries come from compile definitions
// (tests/e2e/CMakeLists.txt).
#ifndef LATHE_TESTS_E2E_E2E_UTIL_H_
#define LATHE_TESTS_E2E_E2E_UTIL_H_

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "db/database.h"
#include "gtest/gtest.h"
#include "tests/e2e/process.h"

namespace lathe::e2e {

// What the database holds for a workload.
struct DbCount {
  int64_t records = 0;
  int64_t distinct_candidates = 0;
  std::map<std::string, int64_t> by_error;  // error class name -> records
};

inline DbCount CountRecords(const std::string& db_path, const std::string& workload_key) {
  DbCount c;
  db::OpenOptions o;
  o.create_if_missing = false;
  absl::StatusOr<std::unique_ptr<db::Database>> d = db::Database::Open(db_path, o);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return c;
  std::set<std::string> ids;
  absl::Status s = (*d)->ForEachRecord([&](const db::Record& r) {
    if (r.workload_key != workload_key) return absl::OkStatus();
    ++c.records;
    ids.insert(r.candidate_id);
    ++c.by_error[std::string(db::ErrorClassName(r.error_class))];
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  c.distinct_candidates = static_cast<int64_t>(ids.size());
  return c;
}

// A scratch directory with a daemon and workers; everything is killed at the end, and the
// logs are printed when the test failed.
class Cluster {
 public:
  Cluster() {
    char tmpl[] = "/tmp/lathe_e2e_XXXXXX";
    dir_ = mkdtemp(tmpl);
    db_ = dir_ + "/tuning.db";
  }
  ~Cluster() {
    const bool failed = ::testing::Test::HasFailure();
    for (auto& p : procs_) {
      if (p && p->running()) {
        p->Signal(SIGCONT);
        p->Signal(SIGKILL);
        p->Wait(10000);
      }
    }
    if (failed) {
      for (const std::string& log : logs_) {
        std::string text = ReadAll(log);
        if (text.size() > 6000) text = "...\n" + text.substr(text.size() - 6000);
        std::fprintf(stderr, "---- %s ----\n%s\n", log.c_str(), text.c_str());
      }
      std::fprintf(stderr, "(kept %s)\n", dir_.c_str());
    } else {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  const std::string& dir() const { return dir_; }
  const std::string& db() const { return db_; }
  // The daemons started from now on use `location` (e.g. a postgresql:// URL) as their --db.
  void UseDatabase(const std::string& location) { db_ = location; }
  const std::string& address() const { return address_; }
  Process* daemon() const { return daemon_; }

  // Starts lathed on `listen` (default: a free port) with `extra` flags; waits for its
  // "listening on" line. Returns false (with a test failure) when it does not come up.
  bool StartDaemon(const std::vector<std::string>& extra = {},
                   const std::string& listen = "127.0.0.1:0") {
    std::vector<std::string> argv = {LATHED_BIN, "--listen", listen, "--db", db_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::string log = dir_ + "/lathed." + std::to_string(daemons_++) + ".log";
    auto p = Process::Spawn(argv, {}, log);
    logs_.push_back(log);
    if (!p) {
      ADD_FAILURE() << "cannot spawn " << LATHED_BIN;
      return false;
    }
    std::optional<std::string> addr = p->WaitForLine("lathed: listening on ", 30000);
    if (!addr) {
      ADD_FAILURE() << "lathed did not say it was listening; log:\n" << ReadAll(log);
      return false;
    }
    address_ = *addr;
    daemon_ = p.get();
    procs_.push_back(std::move(p));
    return true;
  }

  // Starts a lathe-worker for the daemon (or for `tuner`, e.g. a proxy in front of it).
  Process* StartWorker(const std::vector<std::string>& extra = {},
                       const std::vector<std::string>& env = {}, const std::string& tuner = "") {
    const int n = workers_++;
    std::vector<std::string> argv = {LATHE_WORKER_BIN,
                                     "--tuner",
                                     tuner.empty() ? address_ : tuner,
                                     "--device",
                                     "cpu",
                                     "--spool",
                                     dir_ + "/spool" + std::to_string(n)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::string log = dir_ + "/worker" + std::to_string(n) + ".log";
    auto p = Process::Spawn(argv, env, log);
    logs_.push_back(log);
    if (!p) {
      ADD_FAILURE() << "cannot spawn " << LATHE_WORKER_BIN;
      return nullptr;
    }
    Process* raw = p.get();
    procs_.push_back(std::move(p));
    return raw;
  }

  std::unique_ptr<client::TunerClient> Client(const std::string& token = "") const {
    client::ClientOptions o;
    o.address = address_;
    o.token = token;
    o.timeout_ms = 10000;
    o.reconnect_ms = 60000;
    absl::StatusOr<std::unique_ptr<client::TunerClient>> c = client::TunerClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Waits until `n` workers are registered and not lost.
  bool WaitForWorkers(client::TunerClient& client, int n, int timeout_ms = 30000) {
    auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (Clock::now() < until) {
      absl::StatusOr<std::vector<lathe::v1::WorkerInfo>> ws = client.ListWorkers();
      if (ws.ok()) {
        int live = 0;
        for (const auto& w : *ws) live += w.state() != "lost";
        if (live >= n) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << n << " workers did not register within " << timeout_ms << " ms";
    return false;
  }

 private:
  std::string dir_, db_, address_;
  Process* daemon_ = nullptr;
  int daemons_ = 0, workers_ = 0;
  std::vector<std::unique_ptr<Process>> procs_;
  std::vector<std::string> logs_;
};

// A small job: one workload, quick measurements.
inline lathe::v1::JobSpec SmallJob(const std::string& workload, int trials, int batch) {
  lathe::v1::JobSpec spec;
  spec.add_workloads(workload);
  spec.set_target("cpu");
  spec.set_trials(trials);
  spec.set_batch(batch);
  spec.set_seed(7);
  spec.set_min_repeat_ms(2);
  return spec;
}

// Follows a job until it ends or `timeout_s` passes (then the status is DeadlineExceeded).
// `on_status` sees every status.
inline absl::StatusOr<lathe::v1::JobStatus> WaitForJob(
    client::TunerClient& client, const std::string& job_id, int timeout_s,
    const std::function<void(const lathe::v1::JobStatus&)>& on_status = nullptr) {
  std::atomic<bool> stop{false}, done{false};
  std::thread timer([&] {
    auto until = Clock::now() + std::chrono::seconds(timeout_s);
    while (!done.load() && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!done.load()) stop.store(true);
  });
  absl::StatusOr<lathe::v1::JobStatus> r = client.Watch(
      job_id,
      [&](const lathe::v1::JobStatus& s) {
        if (on_status) on_status(s);
      },
      &stop);
  done.store(true);
  timer.join();
  if (!r.ok() && stop.load()) {
    return absl::DeadlineExceededError("job " + job_id + " did not end within " +
                                       std::to_string(timeout_s) + " s");
  }
  return r;
}

inline int TrialsDone(const lathe::v1::JobStatus& s) {
  return s.workloads_size() > 0 ? s.workloads(0).trials_done() : 0;
}

}  // namespace lathe::e2e

#endif  // LATHE_TESTS_E2E_E2E_UTIL_H_
