// \file
// bench_parallel_for: overhead of lathe_parallel_for per call (empty tasks), back to back
// (workers spinning) and after an idle gap (workers asleep on the futex).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <vector>

#include "codegen/runtime/runtime.h"

namespace {

std::atomic<int64_t> g_sink{0};

int EmptyTask(int64_t task, void* closure) {
  g_sink.fetch_add(task, std::memory_order_relaxed);
  return 0;
}

double MedianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  using Clock = std::chrono::steady_clock;
  std::printf("threads %d\n", lathe_num_threads());
  std::printf("%8s %16s %16s %16s\n", "tasks", "hot_median_us", "hot_p90_us", "idle_median_us");
  for (int64_t tasks : {2, 4, 8, 16, 64}) {
    std::vector<double> hot, idle;
    for (int i = 0; i < 20000; ++i) {
      const auto t0 = Clock::now();
      lathe_parallel_for(tasks, EmptyTask, nullptr);
      hot.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    for (int i = 0; i < 200; ++i) {
      usleep(2000);  // past the workers' spin window: they sleep on the futex
      const auto t0 = Clock::now();
      lathe_parallel_for(tasks, EmptyTask, nullptr);
      idle.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    std::vector<double> sorted = hot;
    std::sort(sorted.begin(), sorted.end());
    std::printf("%8ld %16.2f %16.2f %16.2f\n", static_cast<long>(tasks), MedianUs(hot),
                sorted[sorted.size() * 9 / 10], MedianUs(idle));
  }
  return 0;
}
