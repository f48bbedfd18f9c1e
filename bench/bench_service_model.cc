#include "bench/bench_service_model.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/det_tasks.h"
#include "bench/service_harness.h"
#include "client/client.h"
#include "codegen/host.h"

namespace lathe::bench {
namespace {

std::vector<std::pair<std::string, double>> ModelTasks(const std::string& path) {
  if (path.empty()) return lathe::bench::DetTasks();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::vector<std::pair<std::string, double>> tasks;
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc["tasks"].is_array()) {
    std::printf("   %s is not the JSON of `lathe model tasks --json`; the embedded det tasks\n",
                path.c_str());
    return lathe::bench::DetTasks();
  }
  for (const nlohmann::json& t : doc["tasks"]) {
    if (!t["workload"].is_string()) continue;
    tasks.emplace_back(t["workload"].get<std::string>(),
                       t["weight"].is_number() ? t["weight"].get<double>() : 1.0);
  }
  return tasks;
}

// What the simulated workers of a model-job run saw (the child process writes it, one line of
// numbers).
struct SimFigures {
  double measure_s = 0;  // simulated measurement, all workers
  double lease_s = 0;    // in Lease calls (waiting for a task), all workers
  int64_t candidates = 0;
  int64_t errors = 0;
  double lease_p50_ms = 0, lease_p99_ms = 0;
  double report_p50_ms = 0, report_p99_ms = 0;
  int registered = 0;
};

// The child side: `n` workers, each with its own channel, lease 1 task (long poll up to 1 s),
// "measure" it for 50-300 ms (uniform) and report it, for `seconds`; figures to `out`.
}  // namespace

int SimWorkersMain(const std::string& address, int n, int seconds, int batch,
                   const std::string& out) {
  std::mutex mu;
  std::vector<double> lease_ms, report_ms;
  std::atomic<int64_t> candidates{0}, errors{0};
  std::atomic<int> registered{0};
  double measure_s = 0, lease_s = 0;
  std::atomic<bool> go{false};
  Clock::time_point until;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      FakeWorker w(address, 5000 + i);
      if (!w.Register()) {
        ++errors;
        return;
      }
      ++registered;
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::mt19937_64 rng(i);
      std::uniform_int_distribution<int> measure(50, 300);
      std::vector<double> mine_lease, mine_report;
      double mine_measure = 0, mine_lease_s = 0;
      // Workers are mid-measurement at the start, not a thundering herd of first leases.
      std::this_thread::sleep_for(std::chrono::milliseconds(measure(rng)));
      while (Clock::now() < until) {
        lathe::v1::LeaseResponse lease;
        const auto a = Clock::now();
        if (!w.Lease(batch, 1000, &lease)) {
          ++errors;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        const double waited = Seconds(Clock::now() - a);
        mine_lease.push_back(waited * 1e3);
        mine_lease_s += waited;
        if (lease.tasks_size() == 0) continue;
        int ms = 0;
        for (int t = 0; t < lease.tasks_size(); ++t) ms += measure(rng);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        mine_measure += ms * 1e-3;
        candidates += lease.tasks_size();
        const auto r0 = Clock::now();
        if (!w.Report(lease, nullptr)) ++errors;
        mine_report.push_back(Seconds(Clock::now() - r0) * 1e3);
      }
      std::lock_guard<std::mutex> lock(mu);
      lease_ms.insert(lease_ms.end(), mine_lease.begin(), mine_lease.end());
      report_ms.insert(report_ms.end(), mine_report.begin(), mine_report.end());
      measure_s += mine_measure;
      lease_s += mine_lease_s;
    });
  }
  const auto reg_until = Clock::now() + std::chrono::seconds(120);
  while (registered.load() + errors.load() < n && Clock::now() < reg_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  until = Clock::now() + std::chrono::seconds(seconds);
  // The parent times the daemon's CPU from this line on.
  std::printf("go\n");
  std::fflush(stdout);
  go.store(true);
  for (std::thread& t : threads) t.join();
  std::ofstream f(out);
  f << measure_s << " " << lease_s << " " << candidates.load() << " " << errors.load() << " "
    << Percentile(lease_ms, 0.5) << " " << Percentile(lease_ms, 0.99) << " "
    << Percentile(report_ms, 0.5) << " " << Percentile(report_ms, 0.99) << " " << registered.load()
    << "\n";
  return 0;
}

namespace {

struct ModelJobFigures {
  bool ok = false;
  SimFigures sim;
  double daemon_cpu_s = 0;
  std::map<std::string, double> cpu_by_thread;  // in the window, by thread name
  double wall_s = 0;
  double first_task_s = 0;  // from the job's submission to its first queued task
};

// One model-job run: an in-process daemon with `search_threads` search threads, a tasks job
// of `tasks`, `n` simulated workers in a child process (so that this process's CPU time is
// the daemon's) for `seconds`.
ModelJobFigures ModelJobRun(const std::vector<std::pair<std::string, double>>& tasks,
                            const ModelJobOptions& o, int search_threads) {
  ModelJobFigures fig;
  const int n = o.workers, seconds = o.seconds;
  auto d = Daemon::Start(o.population, o.generations, search_threads, o.search_nice);
  if (!d) return fig;
  const std::string address = d->server->address();
  lathe::client::ClientOptions co;
  co.address = address;
  auto client = lathe::client::TunerClient::Connect(co);
  if (!client.ok()) return fig;
  lathe::v1::JobSpec spec;
  for (const auto& [workload, weight] : tasks) {
    lathe::v1::TaskSpec* t = spec.add_tasks();
    t->set_workload(workload);
    t->set_weight(weight);
  }
  spec.set_target("cpu");
  spec.set_device_class(lathe::codegen::HostDeviceClass());
  spec.set_trials(1000000);
  spec.set_batch(64);
  spec.set_seed(1);
  spec.set_min_repeat_ms(1);
  const auto submitted = Clock::now();
  auto id = (*client)->SubmitJob(spec);
  if (!id.ok()) {
    std::printf("   submit: %s\n", id.status().ToString().c_str());
    return fig;
  }
  for (auto until = Clock::now() + std::chrono::seconds(300);
       d->service->QueueDepth() == 0 && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  fig.first_task_s = Seconds(Clock::now() - submitted);
  const std::string out = d->dir + "/sim.txt", log = d->dir + "/sim.log";
  char self[4096] = {0};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) {
    std::printf("   cannot find this program's path\n");
    return fig;
  }
  std::vector<std::string> argv = {self,    "--sim-workers", std::to_string(n),       "--address",
                                   address, "--seconds",     std::to_string(seconds), "--sim-out",
                                   out,     "--model-batch", std::to_string(o.batch)};
  // The workers stand for other machines: niced, they leave the daemon the CPU it would have
  // on its own host (both share this one).
  if (o.sim_nice > 0) {
    argv.insert(argv.begin(), {"/usr/bin/nice", "-n", std::to_string(o.sim_nice)});
  }
  auto child = Spawn(argv, log);
  if (child->pid <= 0) {
    std::printf("   cannot start the simulated workers\n");
    return fig;
  }
  // The window starts when every worker has registered (the child logs "go").
  double cpu0 = -1;
  std::map<std::string, double> threads0;
  Clock::time_point t0;
  for (auto until = Clock::now() + std::chrono::seconds(180); Clock::now() < until;) {
    std::ifstream in(log);
    std::string line;
    bool go = false;
    while (std::getline(in, line)) go = go || line == "go";
    if (go) {
      cpu0 = ProcessCpuSeconds();
      threads0 = ThreadCpuByName();
      t0 = Clock::now();
      break;
    }
    if (waitpid(child->pid, nullptr, WNOHANG) == child->pid) {
      child->pid = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (cpu0 < 0 || child->pid <= 0) {
    std::printf("   the simulated workers did not start (see %s)\n", log.c_str());
    return fig;
  }
  int status = 0;
  waitpid(child->pid, &status, 0);
  child->pid = -1;
  fig.daemon_cpu_s = ProcessCpuSeconds() - cpu0;
  for (const auto& [name, s] : ThreadCpuByName()) fig.cpu_by_thread[name] = s - threads0[name];
  fig.wall_s = Seconds(Clock::now() - t0);
  std::ifstream in(out);
  SimFigures& s = fig.sim;
  if (!(in >> s.measure_s >> s.lease_s >> s.candidates >> s.errors >> s.lease_p50_ms >>
        s.lease_p99_ms >> s.report_p50_ms >> s.report_p99_ms >> s.registered)) {
    std::printf("   no figures from the simulated workers\n");
    return fig;
  }
  fig.ok = true;
  return fig;
}

}  // namespace

void ModelJob(const ModelJobOptions& o) {
  const std::string& tasks_file = o.tasks_file;
  const std::vector<std::pair<std::string, double>> tasks = ModelTasks(tasks_file);
  std::printf(
      "\n5. a model job: %zu tasks of %s, %d simulated workers (a child process) leasing %d "
      "task(s) (long poll <= 1 s), measuring each 50-300 ms and reporting, %d s; rounds of 64, "
      "population "
      "%d, %d generation(s), no cost model; --search-threads 1 (one round at a time) against "
      "%d; the workers' process at nice +%d\n",
      tasks.size(), tasks_file.empty() ? "PP-OCRv4 det (embedded)" : tasks_file.c_str(), o.workers,
      o.batch, o.seconds, o.population, o.generations, o.search_threads, o.sim_nice);
  if (tasks.empty()) {
    std::printf("   no tasks\n");
    return;
  }
  std::vector<int> settings = {1};
  if (o.search_threads != 1) settings.push_back(o.search_threads);
  std::vector<ModelJobFigures> figs;
  for (int threads : settings) figs.push_back(ModelJobRun(tasks, o, threads));
  std::printf("   %-34s", "--search-threads");
  for (int t : settings) std::printf(" %14d", t);
  std::printf("\n");
  auto row = [&](const char* name, const std::function<std::string(const ModelJobFigures&)>& f) {
    std::printf("   %-34s", name);
    for (const ModelJobFigures& g : figs) std::printf(" %14s", g.ok ? f(g).c_str() : "failed");
    std::printf("\n");
  };
  auto fmt = [](const char* format, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, format, v);
    return std::string(buf);
  };
  row("workers registered",
      [&](const ModelJobFigures& g) { return fmt("%.0f", g.sim.registered); });
  row("first task queued after (s)",
      [&](const ModelJobFigures& g) { return fmt("%.2f", g.first_task_s); });
  row("candidates measured /s", [&](const ModelJobFigures& g) {
    return fmt("%.0f", g.sim.candidates / std::max(1e-9, g.wall_s));
  });
  row("demand fed (target >= 90 %)", [&](const ModelJobFigures& g) {
    return fmt("%.1f %%", 100 * g.sim.measure_s / std::max(1e-9, g.sim.measure_s + g.sim.lease_s));
  });
  row("lease wait p50 (ms)",
      [&](const ModelJobFigures& g) { return fmt("%.1f", g.sim.lease_p50_ms); });
  row("lease wait p99 (ms, target <= 50)",
      [&](const ModelJobFigures& g) { return fmt("%.1f", g.sim.lease_p99_ms); });
  row("report p50 / p99 (ms)", [&](const ModelJobFigures& g) {
    return fmt("%.1f", g.sim.report_p50_ms) + fmt(" / %.1f", g.sim.report_p99_ms);
  });
  row("daemon CPU per candidate (ms)", [&](const ModelJobFigures& g) {
    return fmt("%.2f", g.daemon_cpu_s * 1e3 / std::max<int64_t>(1, g.sim.candidates));
  });
  row("daemon CPU (s) in the window",
      [&](const ModelJobFigures& g) { return fmt("%.1f", g.daemon_cpu_s); });
  row("errors", [&](const ModelJobFigures& g) { return fmt("%.0f", g.sim.errors); });
  for (size_t k = 0; k < figs.size(); ++k) {
    const ModelJobFigures& g = figs[k];
    if (!g.ok) continue;
    std::vector<std::pair<double, std::string>> parts;
    for (const auto& [name, s] : g.cpu_by_thread) {
      if (s > 0) parts.emplace_back(s, name);
    }
    std::sort(parts.rbegin(), parts.rend());
    std::printf("   daemon CPU per candidate by thread (ms), --search-threads %d:", settings[k]);
    for (const auto& [s, name] : parts) {
      std::printf(" %s %.3f", name.c_str(), 1e3 * s / std::max<int64_t>(1, g.sim.candidates));
    }
    std::printf("\n");
  }
  std::printf(
      "   demand fed: the workers' time measuring over their time measuring or waiting in Lease "
      "(reports excluded: a pipelined worker sends them in the background)\n");
}

}  // namespace lathe::bench
