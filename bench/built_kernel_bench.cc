// \file
// What the tuner records against what a user gets: the best record of each workload in a
// tuning database, built into a shared library as `lathe build` does (codegen::
// WriteSharedLibrary), loaded with dlopen and called through the C ABI on buffers placed as a
// malloc's large blocks are (16 bytes past a 64-byte line) and on page-aligned ones (on a line,
// where records are timed: codegen::kTimedBufferOffset), alternating the two, next to the
// record's latency.
//
// Usage: bench_built_kernel (--db PATH [--workload SPEC ...] | --trace FILE ...) [--rounds N]
//                           [--seconds S] [--cold-weights] [--cold-output] [--cold-all]
//   --workload  workloads to look up (default: every workload with an ok record on this
//               machine's device class)
//   --trace     time this schedule trace (JSON, as `lathe build --trace` reads) instead of a
//               database's record: schedules a tuning has not stored, side by side
//   --rounds    alternations of the two placements (default 5); the figure is the median of
//               the rounds' medians
//   --seconds   time per placement and round (default 0.3)
//   --cold-weights  a third column: page-aligned, the parameters (measure::ParameterArgs: W,
//               packed B, bias, scale, shift, ...) evicted from every cache level before each
//               call (not timed), as a model's weights arrive when their step comes round again
//               and as `lathe tune --weights cold` times them
//   --cold-output   another column: page-aligned, the output evicted before each call, as a
//               model's step writes into arena memory that earlier steps pushed out of the caches
//   --cold-all  another column: every argument evicted (inputs, parameters, output), as a step
//               of a model whose activations outgrow the caches finds its data
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "codegen/cpu_kernel.h"
#include "codegen/host.h"
#include "codegen/lower.h"
#include "db/database.h"
#include "ir/reference.h"
#include "ir/schedule.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "measure/measure_child.h"
#include "proto/trace_io.h"

namespace lathe::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Where glibc's malloc puts a large block (an mmap'd chunk after its 16-byte header), and so
// std::vector and numpy a large array: 16 bytes past a 64-byte line.
constexpr size_t kMallocOffset = 16;

using KernelFn = int (*)(void* const*, int);

double MedianTime(KernelFn fn, Placed& p, double seconds) {
  std::vector<double> t =
      Repeat([&] { (void)fn(p.ptrs.data(), static_cast<int>(p.ptrs.size())); }, seconds);
  return MedianOf(t);
}

// The median time of calls with the arguments `params` of `p` (element counts `sizes`) evicted
// from every cache level before each call; the eviction is not timed.
double ColdTime(KernelFn fn, Placed& p, const std::vector<size_t>& params,
                const std::vector<size_t>& sizes, double seconds) {
  auto evict = [&] {
    for (size_t i : params) measure::Evict(static_cast<const float*>(p.ptrs[i]), sizes[i]);
  };
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
    evict();
    const auto a = Clock::now();
    (void)fn(p.ptrs.data(), static_cast<int>(p.ptrs.size()));
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  return MedianOf(t);
}

int Main(int argc, char** argv) {
  std::string db_path;
  std::vector<std::string> specs, trace_files;
  int rounds = 5;
  double seconds = 0.3;
  // The evicted-argument columns asked for, in this order.
  enum class Evict { kWeights, kOutput, kAll };
  std::vector<Evict> cold;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--db") {
      db_path = value();
    } else if (a == "--workload") {
      specs.push_back(value());
    } else if (a == "--trace") {
      trace_files.push_back(value());
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--seconds") {
      seconds = std::atof(value().c_str());
    } else if (a == "--cold-weights") {
      cold.push_back(Evict::kWeights);
    } else if (a == "--cold-output") {
      cold.push_back(Evict::kOutput);
    } else if (a == "--cold-all") {
      cold.push_back(Evict::kAll);
    } else {
      std::fprintf(stderr,
                   "usage: bench_built_kernel (--db PATH [--workload SPEC ...] | --trace FILE "
                   "...) [--rounds N] [--seconds S] [--cold-weights] [--cold-output] "
                   "[--cold-all]\n");
      return 2;
    }
  }
  if (db_path.empty() == trace_files.empty()) {
    std::fprintf(stderr, "bench_built_kernel: give --db or --trace (not both)\n");
    return 2;
  }
  const std::string dc = codegen::HostDeviceClass();
  // What to time: a workload and its trace (JSON), with the record's latency where it is one.
  struct Job {
    std::string label, trace_json;
    std::optional<ir::Workload> workload;
    double record_us = 0;
  };
  std::vector<Job> jobs;
  for (const std::string& file : trace_files) {
    std::string json;
    absl::StatusOr<ir::Trace> trace = traceio::ReadTraceFile(file, &json);
    absl::StatusOr<ir::Workload> w = trace.ok() ? ir::MakeWorkload(trace->workload)
                                                : absl::StatusOr<ir::Workload>(trace.status());
    if (!w.ok()) {
      std::fprintf(stderr, "bench_built_kernel: %s\n", std::string(w.status().message()).c_str());
      return 2;
    }
    jobs.push_back({file, std::move(json), *std::move(w)});
  }
  std::unique_ptr<db::Database> database;
  if (!db_path.empty()) {
    db::OpenOptions oo;
    oo.create_if_missing = false;
    absl::StatusOr<std::unique_ptr<db::Database>> opened = db::Database::Open(db_path, oo);
    if (!opened.ok()) {
      std::fprintf(stderr, "bench_built_kernel: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    database = *std::move(opened);
  }
  if (database && specs.empty()) {
    std::set<std::string> seen;
    (void)database->ForEachRecord([&](const db::Record& r) {
      if (r.device_class == dc && r.error_class == db::ErrorClass::kOk &&
          seen.insert(r.workload).second) {
        specs.push_back(r.workload);
      }
      return absl::OkStatus();
    });
  }
  const std::string dir =
      std::filesystem::temp_directory_path() / ("lathe_built_kernel_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::printf("# built kernels against their records (%s, %d rounds x %.1f s per placement)\n\n",
              dc.c_str(), rounds, seconds);
  std::string cold_head, cold_rule;
  for (Evict e : cold) {
    cold_head += e == Evict::kWeights  ? " page-aligned, weights evicted us |"
                 : e == Evict::kOutput ? " page-aligned, output evicted us |"
                                       : " page-aligned, all evicted us |";
    cold_rule += "---|";
  }
  std::printf(
      "| workload | record us | built, 16 B past a line us | built, page-aligned us | "
      "16 B / record | page / record |%s\n|---|---|---|---|---|---|%s\n",
      cold_head.c_str(), cold_rule.c_str());
  int status = 0;
  for (const std::string& spec : specs) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    if (!w.ok()) {
      std::fprintf(stderr, "%s: %s\n", spec.c_str(), w.status().ToString().c_str());
      status = 2;
      continue;
    }
    absl::StatusOr<std::optional<db::Record>> best = database->Best(w->key, dc);
    if (!best.ok() || !best->has_value()) {
      std::fprintf(stderr, "%s: no ok record on %s\n", w->canonical.c_str(), dc.c_str());
      continue;
    }
    jobs.push_back({w->canonical, (*best)->trace_json, *std::move(w), (*best)->median_us});
  }
  for (Job& job : jobs) {
    const ir::Workload* w = &*job.workload;
    absl::StatusOr<ir::Trace> trace = traceio::TraceFromJson(job.trace_json);
    absl::StatusOr<ir::Schedule> sch =
        trace.ok() ? ir::ApplyTrace(*w, *trace) : absl::StatusOr<ir::Schedule>(trace.status());
    absl::StatusOr<ir::LoweredFunc> f =
        sch.ok() ? codegen::Lower(*sch, "kernel") : absl::StatusOr<ir::LoweredFunc>(sch.status());
    const std::string so = dir + "/" + w->key + "_" + std::to_string(&job - jobs.data()) + ".so";
    absl::Status built = f.ok() ? codegen::WriteSharedLibrary({*f}, so) : f.status();
    if (!built.ok()) {
      std::fprintf(stderr, "%s: %s\n", w->canonical.c_str(), built.ToString().c_str());
      status = 1;
      continue;
    }
    void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    KernelFn fn = h ? reinterpret_cast<KernelFn>(dlsym(h, "kernel")) : nullptr;
    if (fn == nullptr) {
      std::fprintf(stderr, "%s: cannot load %s: %s\n", w->canonical.c_str(), so.c_str(), dlerror());
      status = 1;
      continue;
    }
    std::vector<std::vector<float>> args = ir::AllocateArgs(*w);
    ir::FillRandomInputs(args, /*seed=*/7);
    Placed user(args, 64, kMallocOffset), page(args, 4096, codegen::kTimedBufferOffset);
    std::vector<size_t> sizes, all;
    for (const std::vector<float>& a : args) {
      all.push_back(sizes.size());
      sizes.push_back(a.size());
    }
    // Per column: the arguments evicted, and its rounds' medians.
    std::vector<std::vector<size_t>> evicted;
    for (Evict e : cold) {
      evicted.push_back(e == Evict::kWeights  ? measure::ParameterArgs(*w)
                        : e == Evict::kOutput ? std::vector<size_t>{args.size() - 1}
                                              : all);
    }
    std::vector<double> user_s, page_s;
    std::vector<std::vector<double>> cold_s(cold.size());
    for (int r = 0; r < rounds; ++r) {
      user_s.push_back(MedianTime(fn, user, seconds));
      page_s.push_back(MedianTime(fn, page, seconds));
      for (size_t k = 0; k < cold.size(); ++k) {
        cold_s[k].push_back(ColdTime(fn, page, evicted[k], sizes, seconds));
      }
    }
    const double rec = job.record_us;
    const double u = MedianOf(user_s) * 1e6, pg = MedianOf(page_s) * 1e6;
    std::string cold_col;
    for (const std::vector<double>& t : cold_s)
      cold_col += absl::StrFormat(" %.1f |", MedianOf(t) * 1e6);
    if (rec > 0) {
      std::printf("| %s | %.1f | %.1f | %.1f | %.3f | %.3f |%s\n", job.label.c_str(), rec, u, pg,
                  u / rec, pg / rec, cold_col.c_str());
    } else {
      std::printf("| %s | - | %.1f | %.1f | - | - |%s\n", job.label.c_str(), u, pg,
                  cold_col.c_str());
    }
    std::fflush(stdout);
    dlclose(h);
  }
  std::filesystem::remove_all(dir);
  std::printf("\ntarget: a built kernel on 16-byte-offset buffers within 5 %% of its record\n");
  return status;
}

}  // namespace
}  // namespace lathe::bench

int main(int argc, char** argv) { return lathe::bench::Main(argc, argv); }
