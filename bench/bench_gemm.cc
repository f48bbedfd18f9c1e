// A schedule trace (by default the hand-written GEMM one) against the best library, measured
// in the same run: OpenBLAS and oneDNN sgemm for matmuls, oneDNN's blocked direct convolution
// for conv2d traces; plus the JIT compile time of the trace (the bound on every worker's
// measurement rate).
//
//   bench_gemm [--trace FILE] [--min-seconds S] [--compiles N] [--no-partition]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "baselines/conv_baselines.h"
#include "baselines/gemm_baselines.h"
#include "bench/bench_util.h"
#include "codegen/host.h"
#include "fmt/format.h"
#include "ir/ops.h"
#include "proto/trace_io.h"

using namespace lathe;  // NOLINT

namespace {

int Usage() {
  std::fprintf(stderr,
               "usage: bench_gemm [--trace FILE] [--min-seconds S] [--compiles N] "
               "[--no-partition]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string trace_file = LATHE_SOURCE_DIR "/examples/traces/matmul-1024.json";
  double min_seconds = 1.0;
  int compiles = 10;
  codegen::LowerOptions lower;  // Lower()'s CPU recipe; --no-partition drops loop versioning
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-partition") {
      lower.partition = false;
      continue;
    }
    if (i + 1 >= argc) return Usage();
    if (a == "--trace") {
      trace_file = argv[++i];
    } else if (a == "--min-seconds") {
      min_seconds = std::atof(argv[++i]);
    } else if (a == "--compiles") {
      compiles = std::atoi(argv[++i]);
    } else {
      return Usage();
    }
  }
  auto trace = traceio::ReadTraceFile(trace_file);
  if (!trace.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  auto w = ir::MakeWorkload(trace->workload);
  if (!w.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", std::string(w.status().message()).c_str());
    return 1;
  }
  auto sch = ir::ApplyTrace(*w, *trace);
  if (!sch.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", std::string(sch.status().message()).c_str());
    return 1;
  }
  const bool is_conv = w->spec.op == "conv2d";
  auto mp = ir::GetMatmulParams(w->spec);
  if (!is_conv && (!mp.ok() || w->spec.op != "matmul")) {
    std::fprintf(stderr, "bench_gemm: %s is neither a matmul nor a conv2d\n", w->canonical.c_str());
    return 1;
  }
  fmt::print("device: {}\nworkload: {}\ntrace: {}\n\n", codegen::HostDeviceClass(), w->canonical,
             trace_file);

  // JIT compile time of the candidate: lower + LLVM O3 + ORC, median of `compiles` runs.
  std::vector<double> compile_ms;
  for (int i = 0; i < compiles; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto f = codegen::Lower(*sch, "kernel", lower);
    auto kern = codegen::JitCompile(*f);
    compile_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!kern.ok()) {
      std::fprintf(stderr, "bench_gemm: %s\n", std::string(kern.status().message()).c_str());
      return 1;
    }
  }

  bench::KernelTiming tuned = bench::TimeSchedule(*sch, min_seconds, lower);
  // The libraries measured in this run, or why one could not be.
  struct Lib {
    std::string name;
    absl::Status status;
    double median_s = 0, gflops = 0;
  };
  std::vector<Lib> libs;
  auto add = [&](std::string name, const auto& r) {
    libs.push_back(r.ok() ? Lib{std::move(name), absl::OkStatus(), r->median_s, r->gflops}
                          : Lib{std::move(name), r.status()});
  };
  if (is_conv) {
    auto conv = baselines::OnednnConv(w->canonical, 2, min_seconds);
    add(conv.ok() ? "onednn conv " + conv->impl : "onednn conv", conv);
  } else {
    add("openblas sgemm", baselines::OpenBlasSgemm(mp->m, mp->n, mp->k, 2, min_seconds));
    add("onednn sgemm", baselines::OnednnSgemm(mp->m, mp->n, mp->k, 2, min_seconds));
  }
  double best_lib = 0;
  for (const Lib& l : libs) best_lib = std::max(best_lib, l.gflops);

  fmt::print("{:<28} {:>12} {:>10} {:>10}\n", "kernel", "median_us", "GFLOP/s", "vs best");
  auto row = [&](const std::string& name, double s, double g) {
    fmt::print("{:<28} {:>12.1f} {:>10.1f} {:>9.2f}x\n", name, s * 1e6, g,
               best_lib > 0 ? g / best_lib : 0.0);
  };
  if (!tuned.correct) {
    std::fprintf(stderr, "bench_gemm: the trace's kernel is wrong: %s\n", tuned.error.c_str());
    return 1;
  }
  row("lathe (trace)", tuned.median_s, tuned.gflops);
  for (const Lib& l : libs) {
    if (l.status.ok()) {
      row(l.name, l.median_s, l.gflops);
    } else {
      fmt::print("{}: {}\n", l.name, l.status.ToString());
    }
  }
  fmt::print("\nJIT compile of the trace (lower + O3 + ORC): median {:.1f} ms over {} runs\n",
             bench::MedianOf(compile_ms), compiles);
  return 0;
}
