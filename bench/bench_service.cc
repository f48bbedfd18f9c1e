// bench_service: what lathed costs per candidate, how it holds up under many workers, and how
// measurement throughput scales with real workers. Figures are printed beside their targets,
// never asserted.
//
//   1. dispatch overhead: an in-process daemon (TunerService behind its gRPC server on
//      loopback, a small search so that candidate generation does not hide the rest) and one
//      synthetic worker that leases and reports fake results as fast as it can: µs per
//      candidate spent in Lease + Report (target <= 500 µs), and the wall time per candidate.
//   2. many workers: N simulated worker clients (threads with their own channels, bounded in
//      time and iterations) leasing one task at a time, "measuring" it (a sleep) and reporting
//      a fake result: leases/s and the p50/p99 latency of Lease calls (target p99 <= 50 ms).
//   3. real workers: lathe-worker processes from the build directory measure a pre-generated
//      set of candidates (the in-process daemon searches it in one round before the clock
//      starts) with 1 worker, then with 2, each worker pinned to its own core (taskset) and
//      measuring single-threaded candidates (device class ...:1c, LATHE_NUM_THREADS=1):
//      results/s from the first result to the last and the ratio (target >= 1.8x). Searching
//      inside the window, or workers whose parallel kernels fight over the same cores, would
//      measure the search and the scheduler rather than measurement throughput.
//
// Flags: --workers N (default 500), --seconds S (default 10, per part-2 run), --measure-ms M
// (simulated measurement per task in part 2, default 1000), --candidates N
// (part 1, default 3000), --real-trials N (part 3, default 48), --real-ms M (part 3's
// min_repeat_ms per candidate, default 20), --real-rounds N (part 3 repeated, the median
// ratio reported), --skip-real, --quick,
// --search-threads N and --search-nice N (the in-process daemon's search; lathed's defaults:
// every core but one, nice 10; `--search-threads 0 --search-nice 0` is the daemon before
// those existed), --part2-population N and --part2-generations N (part 2's search rounds,
// default 512 and 1; lathed's are 2048 and 4), --parts LIST (of 1,2a,2b,3,4; default all),
// --dashboard-jobs N (part 4's running jobs, default 20).
//   4. the dashboard's data endpoints and best_many under --workers simulated workers and
//      --dashboard-jobs jobs (bench/bench_dashboard.h).
//   5. a model job: PP-OCRv4 det's 71 tasks (embedded; --model-tasks FILE takes the JSON of
//      `lathe model tasks --json`) as one tasks job, --model-workers simulated workers (default
//      1000, in a child process so that this process's CPU time is the daemon's) leasing
//      --model-batch tasks at a time, measuring each 50-300 ms and reporting them, for --seconds:
//      the share of their demand fed (target >= 90 %), the p99 lease wait (target <= 50 ms) and the
//      daemon's CPU time per candidate, with --search-threads 1 and with --search-threads N side by
//      side;
//      --sim-nice N runs the workers' process at nice +N (they stand for other machines);
//      --model-batch N: tasks per lease (default 4, lathe-worker's).
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_dashboard.h"
#include "bench/bench_service_model.h"
#include "bench/bench_util.h"
#include "bench/service_harness.h"
#include "client/client.h"
#include "codegen/host.h"
#include "daemon/grpc_server.h"
#include "daemon/service.h"
#include "lathe/v1/service.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace {

using lathe::bench::Child;
using lathe::bench::Clock;
using lathe::bench::Daemon;
using lathe::bench::FakeWorker;
using lathe::bench::In;
using lathe::bench::Percentile;
using lathe::bench::Seconds;
using lathe::bench::Spawn;
using lathe::bench::SubmitJob;
using lathe::bench::TempDir;
using lathe::bench::TreeCpuSeconds;

// The in-process daemon's search settings (lathed's defaults unless given).
int g_search_threads = lathe::daemon::DefaultSearchThreads();
int g_search_nice = 10;
// Part 2's search per round (a light one by default; lathed's own is 2048 and 4).
int g_part2_population = 512;
int g_part2_generations = 1;
// Part 5's simulated workers run at this nice value relative to the daemon (0: the same), and
// lease this many tasks at a time (lathe-worker's --batch default).
int g_sim_nice = 0;
int g_model_batch = 4;

// --- part 1 ---

void DispatchOverhead(int candidates) {
  std::printf("\n1. dispatch overhead per candidate (in-process daemon, 1 synthetic worker)\n");
  auto d = Daemon::Start(/*population=*/256, /*generations=*/1, g_search_threads, g_search_nice);
  if (!d) return;
  FakeWorker w(d->server->address(), 1);
  if (!w.Register()) {
    std::printf("   register failed\n");
    return;
  }
  const std::string workload = "matmul:m=512,n=512,k=512";
  if (SubmitJob(d->server->address(), workload, candidates, 256).empty()) return;
  double lease_s = 0, report_s = 0, empty_wait_s = 0;
  int done = 0, leases = 0, reports = 0;
  auto t0 = Clock::now();
  auto give_up = t0 + std::chrono::seconds(300);
  while (done < candidates && Clock::now() < give_up) {
    lathe::v1::LeaseResponse lease;
    auto a = Clock::now();
    if (!w.Lease(64, 2000, &lease)) break;
    auto b = Clock::now();
    if (lease.tasks_size() == 0) {
      empty_wait_s += Seconds(b - a);
      continue;
    }
    lease_s += Seconds(b - a);
    ++leases;
    int accepted = 0;
    if (!w.Report(lease, &accepted)) break;
    report_s += Seconds(Clock::now() - b);
    ++reports;
    done += lease.tasks_size();
  }
  double wall = Seconds(Clock::now() - t0);
  if (done == 0) {
    std::printf("   no candidate was dispatched\n");
    return;
  }
  double per = (lease_s + report_s) / done * 1e6;
  std::printf("   %d candidates in %d leases (64 max), %.2f s wall\n", done, leases, wall);
  std::printf("   Lease   %7.1f us/candidate (includes waiting for the round's search)\n",
              lease_s / done * 1e6);
  std::printf("   Report  %7.1f us/candidate (SQLite commit per report)\n", report_s / done * 1e6);
  std::printf("   daemon  %7.1f us/candidate in Lease+Report   target <= 500 us  %s\n", per,
              per <= 500 ? "ok" : "MISSED");
  std::printf("   wall    %7.1f us/candidate, search included (%.2f s waiting for rounds)\n",
              wall / done * 1e6, empty_wait_s);
}

// --- part 2 ---

// With `prefill`, a round of 4096 tasks is queued before the clock starts and the next
// round's search overlaps only the end of the window: the dispatch path nearly alone. Without
// it, rounds of 256 are searched while the workers lease: the daemon as it runs a job.
void ManyWorkers(int n, int seconds, int measure_ms, bool prefill) {
  std::printf(
      "\n2%s. %d simulated workers on loopback, %d s; each lease (1 task, no wait) is followed "
      "by %d ms (+-50%%) of simulated measurement and a report, an empty one by 100 ms; %s\n",
      prefill ? "a" : "b", n, seconds, measure_ms,
      prefill ? "4096 tasks queued first" : "rounds of 256 searched meanwhile");
  auto d = Daemon::Start(g_part2_population, g_part2_generations, g_search_threads, g_search_nice);
  if (!d) return;
  const std::string address = d->server->address();
  const int batch = prefill ? 4096 : 256;
  if (SubmitJob(address, "matmul:m=1024,n=1024,k=1024", 1000000, batch).empty()) return;
  for (auto until = Clock::now() + std::chrono::seconds(180);
       prefill && d->service->QueueDepth() < batch && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::mutex mu;
  std::vector<double> lat_ms, lat_tasks_ms, report_ms;
  std::atomic<int64_t> leases{0}, tasks{0}, errors{0}, registered{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  const auto stop_at_fn = [&] { return Clock::now() + std::chrono::seconds(seconds); };
  Clock::time_point stop_at;
  std::mutex start_mu;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      FakeWorker w(address, 1000 + i);
      if (!w.Register()) {
        ++errors;
        return;
      }
      ++registered;
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      Clock::time_point until;
      {
        std::lock_guard<std::mutex> lock(start_mu);
        until = stop_at;
      }
      std::vector<double> mine, mine_tasks, mine_reports;
      std::mt19937_64 rng(i);
      std::uniform_int_distribution<int> measure(measure_ms / 2, measure_ms * 3 / 2);
      // Workers are mid-measurement at the start, not a thundering herd of first leases.
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, measure_ms)(rng)));
      for (int iter = 0; iter < 100000 && Clock::now() < until; ++iter) {
        lathe::v1::LeaseResponse lease;
        auto a = Clock::now();
        if (!w.Lease(1, 0, &lease)) {
          ++errors;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        double ms = Seconds(Clock::now() - a) * 1e3;
        mine.push_back(ms);
        ++leases;
        if (lease.tasks_size() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          continue;
        }
        mine_tasks.push_back(ms);
        tasks += lease.tasks_size();
        // "Measure" the candidate, then report it.
        std::this_thread::sleep_for(std::chrono::milliseconds(measure(rng)));
        const auto r0 = Clock::now();
        if (!w.Report(lease, nullptr)) ++errors;
        mine_reports.push_back(Seconds(Clock::now() - r0) * 1e3);
      }
      std::lock_guard<std::mutex> lock(mu);
      lat_ms.insert(lat_ms.end(), mine.begin(), mine.end());
      lat_tasks_ms.insert(lat_tasks_ms.end(), mine_tasks.begin(), mine_tasks.end());
      report_ms.insert(report_ms.end(), mine_reports.begin(), mine_reports.end());
    });
  }
  auto reg_until = Clock::now() + std::chrono::seconds(60);
  while (registered.load() + errors.load() < n && Clock::now() < reg_until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lock(start_mu);
    stop_at = stop_at_fn();
  }
  auto t0 = Clock::now();
  go.store(true);
  for (auto& t : threads) t.join();
  // Leasing stops at the deadline; what follows is the last simulated measurements.
  double wall = std::min<double>(Seconds(Clock::now() - t0), seconds);
  double p99 = Percentile(lat_ms, 0.99);
  std::printf("   %lld registered, %lld errors\n", static_cast<long long>(registered.load()),
              static_cast<long long>(errors.load()));
  std::printf("   %.0f leases/s (%.0f with a task, i.e. candidates/s), %.1f s\n",
              leases.load() / wall, tasks.load() / wall, wall);
  std::printf("   Lease latency p50 %.2f ms  p99 %.2f ms   target p99 <= 50 ms  %s\n",
              Percentile(lat_ms, 0.5), p99, p99 <= 50 ? "ok" : "MISSED");
  std::printf("   Lease latency of leases that got a task: p50 %.2f ms  p99 %.2f ms\n",
              Percentile(lat_tasks_ms, 0.5), Percentile(lat_tasks_ms, 0.99));
  std::printf(
      "   Report latency (1 result; concurrent reports share a commit): p50 %.2f ms  p99 "
      "%.2f ms\n",
      Percentile(report_ms, 0.5), Percentile(report_ms, 0.99));
}

// --- part 3 ---

// The device class of this host's CPU restricted to one core: the class a lathe-worker
// pinned to one core (taskset) registers, since discovery counts the cores of its affinity.
std::string OneCoreDeviceClass() {
  lathe::codegen::CpuInfo info = lathe::codegen::HostCpu();
  info.cores = 1;
  return lathe::codegen::CpuDeviceClass(info);
}

// Measurement throughput of `workers` real lathe-worker processes on a pre-generated set of
// `trials` candidates: the in-process daemon searches the whole set in one round (batch =
// trials) before any worker starts, so no search runs in the timed window. Each worker is
// pinned to its own core (taskset -c i) and measures single-threaded (target 1 core,
// LATHE_NUM_THREADS=1), so that the work parallelizes across workers and nothing else of
// ours competes for those cores except the daemon's Lease/Report handling. Returns results
// per second from the first result to the last (0 on failure).
double RealThroughput(int workers, int trials, int min_repeat_ms, bool pin,
                      double* cpu_share = nullptr) {
  const unsigned cores = std::thread::hardware_concurrency();
  const std::string dc = pin ? OneCoreDeviceClass() : lathe::codegen::HostDeviceClass();
  auto d = Daemon::Start(/*population=*/std::max(256, trials * 2), /*generations=*/1,
                         g_search_threads, g_search_nice);
  if (!d) return 0;
  const std::string address = d->server->address();
  lathe::client::ClientOptions co;
  co.address = address;
  auto client = lathe::client::TunerClient::Connect(co);
  if (!client.ok()) return 0;
  lathe::v1::JobSpec spec;
  spec.add_workloads("matmul:m=64,n=64,k=64");
  spec.set_target("cpu");
  spec.set_device_class(dc);
  spec.set_trials(trials);
  spec.set_batch(trials);
  spec.set_seed(5);
  spec.set_min_repeat_ms(min_repeat_ms);
  auto id = (*client)->SubmitJob(spec);
  if (!id.ok()) {
    std::printf("   submit: %s\n", id.status().ToString().c_str());
    return 0;
  }
  // The whole set is queued before the clock starts (the search found `queued` distinct
  // candidates; fewer than `trials` when the space is small).
  int64_t queued = 0;
  for (auto until = Clock::now() + std::chrono::seconds(300); Clock::now() < until;) {
    const int64_t q = d->service->QueueDepth();
    if (q >= trials || (q > 0 && q == queued)) break;
    queued = q;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  queued = d->service->QueueDepth();
  if (queued == 0) {
    std::printf("   the search queued nothing\n");
    return 0;
  }
  std::vector<std::unique_ptr<Child>> ws;
  for (int i = 0; i < workers; ++i) {
    std::vector<std::string> argv;
    if (pin) {
      argv = {"/usr/bin/taskset", "-c", std::to_string(i % std::max(1u, cores))};
    }
    for (const std::string& a :
         {std::string(LATHE_WORKER_BIN), std::string("--tuner"), address, std::string("--device"),
          std::string("cpu"), std::string("--batch"), std::string("2"), std::string("--spool"),
          d->dir + "/spool" + std::to_string(i)}) {
      argv.push_back(a);
    }
    ws.push_back(Spawn(argv, d->dir + "/worker" + std::to_string(i) + ".log"));
  }
  std::vector<pid_t> pids;
  for (const auto& w : ws) pids.push_back(w->pid);
  Clock::time_point first, last;
  int first_done = -1, last_done = 0;
  double cpu_first = 0, cpu_last = 0, wait_first = 0, wait_last = 0, self_first = 0, self_last = 0;
  auto st = (*client)->Watch(*id, [&](const lathe::v1::JobStatus& s) {
    int n = s.workloads_size() ? s.workloads(0).trials_done() : 0;
    if (first_done < 0 && n >= 1) {
      first_done = n;
      first = Clock::now();
      cpu_first = TreeCpuSeconds(pids, &wait_first);
      self_first = lathe::bench::ProcessCpuSeconds();
    }
    if (n > last_done) {
      last_done = n;
      last = Clock::now();
      wait_last = 0;
      cpu_last = TreeCpuSeconds(pids, &wait_last);
      self_last = lathe::bench::ProcessCpuSeconds();
    }
  });
  std::vector<std::string> per_worker;
  if (auto l = (*client)->ListWorkers(); l.ok()) {
    for (const lathe::v1::WorkerInfo& w : *l) per_worker.push_back(std::to_string(w.measured()));
  }
  ws.clear();
  if (!st.ok() || first_done < 0 || last_done <= first_done) {
    std::printf("   job failed: %s\n", st.status().ToString().c_str());
    return 0;
  }
  const double wall = Seconds(last - first);
  const double rate = (last_done - first_done) / wall;
  const double cpu = cpu_last - cpu_first;
  const double runqueue = wait_last - wait_first;
  std::string split;
  for (const std::string& m : per_worker) split += (split.empty() ? "" : "+") + m;
  std::printf(
      "   %d worker%s: %6.2f results/s (%d results in %.1f s after the first; %s each); the "
      "workers got %.0f%% of their %d core%s (%.1f CPU s; %.1f s runnable but waiting for a "
      "CPU; the in-process daemon used %.1f CPU s): %.2f results per CPU s\n",
      workers, workers == 1 ? " " : "s", rate, last_done - first_done, wall, split.c_str(),
      100 * cpu / (wall * workers), workers, workers == 1 ? "" : "s", cpu, runqueue,
      self_last - self_first, cpu > 0 ? (last_done - first_done) / cpu : 0.0);
  if (cpu_share != nullptr) *cpu_share = cpu / (wall * workers);
  return rate;
}

void RealWorkers(int trials, int min_repeat_ms, int rounds) {
  const unsigned cores = std::thread::hardware_concurrency();
  const bool pin = cores >= 2 && access("/usr/bin/taskset", X_OK) == 0;
  std::printf(
      "\n3. real lathe-worker processes, matmul:m=64,n=64,k=64, %d pre-generated candidates "
      "(searched before the clock starts), %d ms per candidate; %s\n",
      trials, min_repeat_ms,
      pin ? "each worker pinned to its own core, measuring single-threaded (class ...:1c)"
          : "workers NOT pinned (no taskset or 1 core): the figure is not comparable");
  setenv("LATHE_NUM_THREADS", "1", 1);  // inherited by the workers' measurement children
  std::vector<double> ratios, normalized;
  for (int r = 0; r < rounds; ++r) {
    double share1 = 0, share2 = 0;
    double one = RealThroughput(1, trials, min_repeat_ms, pin, &share1);
    double two = RealThroughput(2, trials, min_repeat_ms, pin, &share2);
    if (one > 0 && two > 0) ratios.push_back(two / one);
    if (one > 0 && two > 0 && share1 > 0 && share2 > 0) {
      normalized.push_back((two / share2) / (one / share1));
    }
  }
  if (ratios.empty()) return;
  const double ratio = Percentile(ratios, 0.5);
  if (!normalized.empty()) {
    std::printf(
        "   2 workers vs 1 per CPU second the workers actually got: %.2fx (what the ratio "
        "would be if other processes left them their cores)\n",
        Percentile(normalized, 0.5));
  }
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf(
      "   2 workers vs 1: %.2fx (median of %zu)   target >= 1.8x  %s (%u cores here, load "
      "average %.2f)\n",
      ratio, ratios.size(), ratio >= 1.8 ? "ok" : "MISSED", cores, load[0]);
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 500, seconds = 10, candidates = 3000, real_trials = 48, measure_ms = 1000;
  int real_ms = 20, real_rounds = 1, dashboard_jobs = 20;
  bool skip_real = false;
  std::string parts = "1,2a,2b,3,4,5";
  std::string model_tasks, sim_address, sim_out;
  int model_workers = 1000, sim_workers = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--workers") {
      workers = next();
    } else if (a == "--seconds") {
      seconds = next();
    } else if (a == "--measure-ms") {
      measure_ms = std::max(2, next());
    } else if (a == "--candidates") {
      candidates = next();
    } else if (a == "--real-trials") {
      real_trials = next();
    } else if (a == "--real-ms") {
      real_ms = next();
    } else if (a == "--real-rounds") {
      real_rounds = std::max(1, next());
    } else if (a == "--search-threads") {
      g_search_threads = next();
    } else if (a == "--search-nice") {
      g_search_nice = next();
    } else if (a == "--part2-population") {
      g_part2_population = std::max(1, next());
    } else if (a == "--part2-generations") {
      g_part2_generations = std::max(1, next());
    } else if (a == "--parts" && i + 1 < argc) {
      parts = argv[++i];
    } else if (a == "--dashboard-jobs") {
      dashboard_jobs = std::max(1, next());
    } else if (a == "--model-workers") {
      model_workers = std::max(1, next());
    } else if (a == "--model-tasks" && i + 1 < argc) {
      model_tasks = argv[++i];
    } else if (a == "--model-batch") {
      g_model_batch = std::max(1, next());
    } else if (a == "--sim-nice") {
      g_sim_nice = std::max(0, next());
    } else if (a == "--sim-workers") {  // the child of part 5
      sim_workers = next();
    } else if (a == "--address" && i + 1 < argc) {
      sim_address = argv[++i];
    } else if (a == "--sim-out" && i + 1 < argc) {
      sim_out = argv[++i];
    } else if (a == "--skip-real") {
      skip_real = true;
    } else if (a == "--quick") {
      workers = 100;
      seconds = 3;
      candidates = 500;
      real_trials = 24;
    } else {
      std::fprintf(
          stderr,
          "usage: bench_service [--workers N] [--seconds S] [--measure-ms M] [--candidates N] "
          "[--real-trials N] [--skip-real] [--quick] [--search-threads N] [--search-nice N] "
          "[--parts 1,2a,2b,3,4] [--real-ms M] [--real-rounds N] [--part2-population N] "
          "[--part2-generations N] [--dashboard-jobs N] [--model-workers N] "
          "[--model-tasks FILE] [--model-batch N] [--sim-nice N]\n");
      return 2;
    }
  }
  if (sim_workers > 0) {
    return lathe::bench::SimWorkersMain(sim_address, sim_workers, seconds, g_model_batch, sim_out);
  }
  spdlog::set_level(spdlog::level::warn);  // the in-process daemon logs every registration
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  std::printf("bench_service on %s, load average %.2f (figures on a loaded machine are low)\n",
              lathe::codegen::HostDeviceClass().c_str(), load[0]);
  std::printf(
      "in-process daemon: search on %d thread(s) (0: every core) at nice %d; part 2 rounds: "
      "population %d, %d generation(s)\n",
      g_search_threads, g_search_nice, g_part2_population, g_part2_generations);
  auto part = [&](const char* name) {
    return absl::StrContains(absl::StrCat(",", parts, ","), absl::StrCat(",", name, ","));
  };
  if (part("1")) DispatchOverhead(candidates);
  if (part("2a")) ManyWorkers(workers, seconds, measure_ms, /*prefill=*/true);
  if (part("2b")) ManyWorkers(workers, seconds, measure_ms, /*prefill=*/false);
  if (part("3") && !skip_real) RealWorkers(real_trials, real_ms, real_rounds);
  if (part("5")) {
    lathe::bench::ModelJobOptions mo;
    mo.workers = model_workers;
    mo.seconds = seconds;
    mo.tasks_file = model_tasks;
    mo.search_threads = g_search_threads;
    mo.search_nice = g_search_nice;
    mo.population = g_part2_population;
    mo.generations = g_part2_generations;
    mo.sim_nice = g_sim_nice;
    mo.batch = g_model_batch;
    lathe::bench::ModelJob(mo);
  }
  if (part("4")) {
    lathe::bench::DashboardUnderLoad(workers, dashboard_jobs, seconds, measure_ms, g_search_threads,
                                     g_search_nice);
  }
  return 0;
}
