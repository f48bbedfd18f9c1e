// \file
// bench_baselines: sgemm GFLOP/s of OpenBLAS and oneDNN at 512^3 and 1024^3 (or the sizes on
// the command line, as m,n,k triples), the figures lathe's tuned kernels are compared with.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "baselines/gemm_baselines.h"

int main(int argc, char** argv) {
  struct Size {
    long m, n, k;
  };
  std::vector<Size> sizes = {{512, 512, 512}, {1024, 1024, 1024}};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) {
      Size s{};
      if (std::sscanf(argv[i], "%ld,%ld,%ld", &s.m, &s.n, &s.k) != 3) {
        std::fprintf(stderr, "bad size '%s': expected m,n,k\n", argv[i]);
        return 2;
      }
      sizes.push_back(s);
    }
  }
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  std::printf("%-14s %6s %6s %6s %4s %10s %9s %8s %9s\n", "library", "m", "n", "k", "thr",
              "median_us", "GFLOP/s", "repeats", "rel_err");
  // One library at a time over all sizes: OpenBLAS's and OpenMP's idle threads spin for a
  // while after each call and would steal the cores from the other library.
  using Fn =
      absl::StatusOr<lathe::baselines::GemmResult> (*)(int64_t, int64_t, int64_t, int, double);
  const Fn libraries[] = {lathe::baselines::OpenBlasSgemm, lathe::baselines::OnednnSgemm,
                          lathe::baselines::OnednnMatmul};
  int failures = 0;
  for (Fn fn : libraries) {
    for (const Size& s : sizes) {
      auto r = fn(s.m, s.n, s.k, threads, 0.5);
      if (!r.ok()) {
        std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
        ++failures;
        continue;
      }
      std::printf("%-14s %6ld %6ld %6ld %4d %10.1f %9.1f %8d %9.2e\n", r->library.c_str(), s.m, s.n,
                  s.k, r->threads, r->median_s * 1e6, r->gflops, r->repeats, r->max_rel_error);
      std::fflush(stdout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  return failures == 0 ? 0 : 1;
}
