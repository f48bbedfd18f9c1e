// \file
// Part 5 of bench_service: a model job on a fleet. PP-OCRv4 det's 71 tasks (embedded; or the
// JSON of `lathe model tasks --json`) as one tasks job of an in-process daemon, `workers`
// simulated workers in a child process (this binary again, --sim-workers: so that this
// process's CPU time is the daemon's) leasing `batch` tasks at a time, "measuring" each 50-300
// ms and reporting them: the share of their demand fed (target >= 90 %), the p99 lease wait
// (target <= 50 ms) and the daemon's CPU time per candidate, with one search thread and with
// `search_threads` side by side.
#ifndef LATHE_BENCH_BENCH_SERVICE_MODEL_H_
#define LATHE_BENCH_BENCH_SERVICE_MODEL_H_

#include <string>

namespace lathe::bench {

struct ModelJobOptions {
  int workers = 1000;
  int seconds = 10;
  std::string tasks_file;  // empty: det's tasks, embedded
  int search_threads = 0;  // the daemon's (lathed's --search-threads; 0: every core)
  int search_nice = 10;
  int population = 512;  // per search round
  int generations = 1;
  int sim_nice = 0;  // the workers' process runs at this nice value (they stand for other hosts)
  int batch = 4;     // tasks per lease (lathe-worker's --batch default)
};

void ModelJob(const ModelJobOptions& options);

// The child side: `n` workers, each with its own channel, leasing `batch` tasks (long poll up
// to 1 s), "measuring" each for 50-300 ms and reporting, for `seconds`; figures to `out`.
int SimWorkersMain(const std::string& address, int n, int seconds, int batch,
                   const std::string& out);

}  // namespace lathe::bench

#endif  // LATHE_BENCH_BENCH_SERVICE_MODEL_H_
