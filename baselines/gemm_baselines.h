// \file
// Library baselines for float32 GEMM (C[m,n] = A[m,k] * B[k,n], row-major, as the matmul
// workload in CONTRACT.md): OpenBLAS (cblas_sgemm, pthreads build) and oneDNN (dnnl_sgemm and
// the matmul primitive). Benchmarks print lathe's kernels next to these figures.
#ifndef LATHE_BASELINES_GEMM_BASELINES_H_
#define LATHE_BASELINES_GEMM_BASELINES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lathe::baselines {

struct GemmResult {
  std::string library;  // "openblas", "onednn-sgemm", "onednn-matmul"
  int64_t m = 0, n = 0, k = 0;
  int threads = 0;
  double median_s = 0;  // median over the timed repeats
  double gflops = 0;    // 2*m*n*k / median_s / 1e9
  int repeats = 0;
  double max_rel_error = 0;  // against a float64 reference on sampled entries
};

// Calls `fn` once to warm up, then repeatedly, timing each call, until at least `min_seconds`
// have been spent (and at least 3 calls); returns every repeat's seconds.
std::vector<double> TimeRepeats(const std::function<void()>& fn, double min_seconds = 0.5);
double Median(std::vector<double> values);

// Each runs C = A*B on `threads` threads with random inputs; an error when the library fails
// or its result is wrong (relative error against max |reference| above 1e-3).
absl::StatusOr<GemmResult> OpenBlasSgemm(int64_t m, int64_t n, int64_t k, int threads = 2,
                                         double min_seconds = 0.5);
absl::StatusOr<GemmResult> OnednnSgemm(int64_t m, int64_t n, int64_t k, int threads = 2,
                                       double min_seconds = 0.5);
absl::StatusOr<GemmResult> OnednnMatmul(int64_t m, int64_t n, int64_t k, int threads = 2,
                                        double min_seconds = 0.5);

}  // namespace lathe::baselines

#endif  // LATHE_BASELINES_GEMM_BASELINES_H_
