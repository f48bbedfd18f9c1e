// \file
// The rule-picked candidates of the CPU search space (SearchSpace::Heuristic: what a tuning
// run measures first, and what a model compiler builds for a workload never tuned) for the
// convolution set (bench/conv_set.h), built, checked against the reference and timed next to
// oneDNN's convolution in the same run. `--isa` describes another vector ISA to the space (its
// lanes and registers; the host compiles what it describes), so the AVX2 and AVX-512 rules are
// both checked on one machine.
//
// Usage: bench_rules [--only NAME,...] [--isa host|avx2|avx512] [--max N] [--seconds S]
//                    [--rounds R] [--blocked]
//   --threads  threads of both lathe's kernels and oneDNN (default 2; 1 is less disturbed on
//              a busy machine when comparing rules)
//   --blocked  the convolutions in the blocked layout nchw{lanes}c (where the block divides
//              both channel counts), as a model compiler keeps activations between them
//   --max      rule-picked candidates per workload (default 8)
//   --rounds   alternations of the candidates (default 3): each figure is the fastest of its
//              rounds' medians, the least disturbed on a busy machine
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baselines/conv_baselines.h"
#include "bench/bench_util.h"
#include "bench/conv_set.h"
#include "codegen/cpu_kernel.h"
#include "ir/trace.h"
#include "ir/workload.h"
#include "tuner/space.h"

namespace lathe::bench {
namespace {

int Main(int argc, char** argv) {
  std::set<std::string> only;
  std::string isa = "host";
  int max = 8, rounds = 3;
  bool blocked = false;
  int threads = 2;
  double seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--only") {
      for (absl::string_view s : absl::StrSplit(value(), ',')) only.insert(std::string(s));
    } else if (a == "--isa") {
      isa = value();
    } else if (a == "--max") {
      max = std::max(1, std::atoi(value().c_str()));
    } else if (a == "--seconds") {
      seconds = std::atof(value().c_str());
    } else if (a == "--threads") {
      threads = std::max(1, std::atoi(value().c_str()));
      // Read by lathe's runtime when its pool starts (the first kernel run).
      setenv("LATHE_NUM_THREADS", std::to_string(threads).c_str(), 1);
    } else if (a == "--blocked") {
      blocked = true;
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(value().c_str()));
    } else {
      std::fprintf(stderr,
                   "usage: bench_rules [--only NAME,...] [--isa host|avx2|avx512] [--max N] "
                   "[--seconds S] [--rounds R] [--blocked] [--threads N]\n");
      return 2;
    }
  }
  tuner::CpuTarget target = tuner::HostCpuTarget();
  if (isa == "avx2") {
    target.vector_lanes = 8;
    target.vector_registers = 16;
  } else if (isa == "avx512") {
    target.vector_lanes = 16;
    target.vector_registers = 32;
  } else if (isa != "host") {
    std::fprintf(stderr, "--isa %s (expected host, avx2 or avx512)\n", isa.c_str());
    return 2;
  }
  std::printf("# rule-picked candidates vs oneDNN (%d lanes, %d vector registers, %d cores%s)\n\n",
              target.vector_lanes, target.vector_registers, target.cores,
              blocked ? ", lathe in the blocked layout" : "");
  // The libraries first, in a clean process (bench_tune: oneDNN's OpenMP convolutions measured
  // far slower after the tuner's threads had run).
  std::map<std::string, double> library_s;
  for (const ConvCase& c : ConvSet()) {
    if (!only.empty() && !only.count(c.name)) continue;
    absl::StatusOr<baselines::ConvResult> lib = baselines::OnednnConv(c.spec, threads, seconds);
    library_s[c.name] = lib.ok() ? lib->median_s : 0;
    if (!lib.ok())
      std::fprintf(stderr, "%s: oneDNN: %s\n", c.name, lib.status().ToString().c_str());
  }
  std::printf(
      "| workload | oneDNN us | best rule us | ratio | first rule us | ratio | rules "
      "(us, in the space's order) |\n|---|---|---|---|---|---|---|\n");
  std::vector<double> first_ratios, best_ratios;
  for (const ConvCase& c : ConvSet()) {
    if (!only.empty() && !only.count(c.name)) continue;
    const std::string spec = blocked ? BlockedConvSpec(c.spec, target.vector_lanes) : c.spec;
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    absl::StatusOr<std::unique_ptr<tuner::SearchSpace>> space =
        w.ok() ? tuner::SearchSpace::Create(*w, target)
               : absl::StatusOr<std::unique_ptr<tuner::SearchSpace>>(w.status());
    if (!space.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name, space.status().ToString().c_str());
      continue;
    }
    std::vector<tuner::Candidate> rules = (*space)->Heuristic(max);
    std::vector<double> best(rules.size(), 0);
    std::vector<std::string> errors(rules.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t k = 0; k < rules.size(); ++k) {
        if (!errors[k].empty()) continue;
        KernelTiming t = TimeSchedule(*rules[k].schedule, seconds);
        if (!t.correct) {
          errors[k] = t.error.empty() ? "wrong answer" : t.error;
          continue;
        }
        if (best[k] == 0 || t.median_s < best[k]) best[k] = t.median_s;
      }
    }
    const double lib = library_s[c.name];
    double top = 0;
    std::string all;
    for (size_t k = 0; k < rules.size(); ++k) {
      if (!errors[k].empty()) {
        all += " ERROR";
        std::fprintf(stderr, "%s rule %zu: %s\n", c.name, k, errors[k].c_str());
        continue;
      }
      all += " " + std::to_string(static_cast<int>(best[k] * 1e6 + 0.5));
      if (top == 0 || best[k] < top) top = best[k];
    }
    const double first = rules.empty() ? 0 : best[0];
    std::printf("| %s | %.0f | %.0f | %.2f | %.0f | %.2f |%s |\n", c.name, lib * 1e6, top * 1e6,
                top > 0 ? lib / top : 0, first * 1e6, first > 0 ? lib / first : 0, all.c_str());
    std::fflush(stdout);
    if (lib > 0 && top > 0) best_ratios.push_back(lib / top);
    if (lib > 0 && first > 0) first_ratios.push_back(lib / first);
  }
  auto geomean = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += std::log(x);
    return v.empty() ? 0 : std::exp(s / v.size());
  };
  std::printf(
      "\nratio = oneDNN latency / lathe latency (> 1: lathe faster); geometric mean: best "
      "rule %.2f, first rule %.2f\n",
      geomean(best_ratios), geomean(first_ratios));
  return 0;
}

}  // namespace
}  // namespace lathe::bench

int main(int argc, char** argv) { return lathe::bench::Main(argc, argv); }
