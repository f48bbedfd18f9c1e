// \file
// Shared helpers of lathe's benchmarks: JIT a schedule, time a kernel on random inputs.
#ifndef LATHE_BENCH_BENCH_UTIL_H_
#define LATHE_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cpu_kernel.h"
#include "codegen/lower.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"

namespace lathe::bench {

struct KernelTiming {
  double median_s = 0;
  double gflops = 0;
  double compile_ms = 0;
  bool correct = false;
  std::string error;
};

// The workload's arguments at `offset` bytes past an `align`-byte boundary.
// Benchmarks time lathe's kernels where the tuner times them (codegen::kTimedBufferOffset)
// and their baselines on the libraries' own (64-byte-aligned) buffers.
struct Placed {
  std::vector<std::unique_ptr<char, void (*)(void*)>> blocks;
  std::vector<void*> ptrs;
  Placed(const std::vector<std::vector<float>>& args, size_t align, size_t offset) {
    for (const std::vector<float>& a : args) {
      size_t bytes = (a.size() * 4 + offset + align - 1) / align * align;
      char* block = static_cast<char*>(std::aligned_alloc(align, bytes));
      blocks.emplace_back(block, std::free);
      float* p = reinterpret_cast<float*>(block + offset);
      std::copy(a.begin(), a.end(), p);
      ptrs.push_back(p);
    }
  }
};

// Times `fn` after one warm-up call until at least `min_seconds` passed (and at least 3
// repeats); returns every repeat in seconds.
inline std::vector<double> Repeat(const std::function<void()>& fn, double min_seconds) {
  fn();
  std::vector<double> t;
  auto start = std::chrono::steady_clock::now();
  while (t.size() < 3 ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             min_seconds) {
    auto a = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  return t;
}

// CPU seconds this process has used so far, every thread together (user + system).
inline double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Lowers and JIT-compiles `sch`, checks it against the reference once, then times it.
inline KernelTiming TimeSchedule(const ir::Schedule& sch, double min_seconds = 0.5,
                                 const codegen::LowerOptions& lower = {}) {
  KernelTiming r;
  const ir::Workload& w = sch.workload();
  auto t0 = std::chrono::steady_clock::now();
  auto f = codegen::Lower(sch, "kernel", lower);
  if (!f.ok()) {
    r.error = f.status().ToString();
    return r;
  }
  auto k = codegen::JitCompile(*f);
  if (!k.ok()) {
    r.error = k.status().ToString();
    return r;
  }
  r.compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto args = ir::AllocateArgs(w);
  ir::FillRandomInputs(args, 7);
  auto ref = args;
  (void)ir::ComputeReference(w, ref);
  Placed placed(args, 64, codegen::kTimedBufferOffset);
  const int n = static_cast<int>(placed.ptrs.size());
  (*k)->Run(placed.ptrs.data(), n);
  std::copy_n(static_cast<const float*>(placed.ptrs.back()), args.back().size(),
              args.back().begin());
  absl::Status st = ir::CheckOutput(args.back(), ref.back(), w.output()->shape);
  r.correct = st.ok();
  if (!st.ok()) r.error = st.ToString();
  r.median_s = MedianOf(Repeat([&] { (*k)->Run(placed.ptrs.data(), n); }, min_seconds));
  r.gflops = w.flops / r.median_s * 1e-9;
  return r;
}

}  // namespace lathe::bench

#endif  // LATHE_BENCH_BENCH_UTIL_H_
