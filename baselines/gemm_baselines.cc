// \file
// OpenBLAS and oneDNN sgemm baselines (baselines/gemm_baselines.h).
#include "baselines/gemm_baselines.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "dnnl.h"
#include "dnnl.hpp"

namespace lathe::baselines {
namespace {

struct Problem {
  Problem(int64_t m, int64_t n, int64_t k) : m(m), n(n), k(k), a(m * k), b(k * n), c(m * n) {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
  }
  int64_t m, n, k;
  std::vector<float> a, b, c;
};

// Relative error of sampled entries of C against a float64 reference, over max |reference|.
double SampledError(const Problem& p) {
  std::mt19937 rng(99);
  double max_ref = 0, max_err = 0;
  for (int s = 0; s < 256; ++s) {
    const int64_t i = rng() % p.m, j = rng() % p.n;
    double ref = 0;
    for (int64_t l = 0; l < p.k; ++l) ref += double(p.a[i * p.k + l]) * p.b[l * p.n + j];
    max_ref = std::max(max_ref, std::abs(ref));
    max_err = std::max(max_err, std::abs(ref - p.c[i * p.n + j]));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

absl::StatusOr<GemmResult> Measure(const std::string& library, Problem& p, int threads,
                                   double min_seconds, const std::function<void()>& call) {
  std::fill(p.c.begin(), p.c.end(), 0.0f);
  std::vector<double> times = TimeRepeats(call, min_seconds);
  GemmResult result;
  result.library = library;
  result.m = p.m;
  result.n = p.n;
  result.k = p.k;
  result.threads = threads;
  result.repeats = static_cast<int>(times.size());
  result.median_s = Median(times);
  result.gflops = 2.0 * p.m * p.n * p.k / result.median_s / 1e9;
  result.max_rel_error = SampledError(p);
  if (!(result.max_rel_error <= 1e-3)) {
    return absl::InternalError(absl::StrCat(library, " sgemm ", p.m, "x", p.n, "x", p.k,
                                            " is wrong: relative error ", result.max_rel_error));
  }
  return result;
}

}  // namespace

std::vector<double> TimeRepeats(const std::function<void()>& fn, double min_seconds) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up
  std::vector<double> times;
  const Clock::time_point start = Clock::now();
  while (times.size() < 3 ||
         std::chrono::duration<double>(Clock::now() - start).count() < min_seconds) {
    const Clock::time_point t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return times;
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

absl::StatusOr<GemmResult> OpenBlasSgemm(int64_t m, int64_t n, int64_t k, int threads,
                                         double min_seconds) {
  openblas_set_num_threads(threads);
  Problem p(m, n, k);
  return Measure("openblas", p, threads, min_seconds, [&p] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p.m, p.n, p.k, 1.0f, p.a.data(), p.k,
                p.b.data(), p.n, 0.0f, p.c.data(), p.n);
  });
}

absl::StatusOr<GemmResult> OnednnSgemm(int64_t m, int64_t n, int64_t k, int threads,
                                       double min_seconds) {
  omp_set_num_threads(threads);
  Problem p(m, n, k);
  dnnl_status_t status = dnnl_success;
  auto result = Measure("onednn-sgemm", p, threads, min_seconds, [&p, &status] {
    const dnnl_status_t s = dnnl_sgemm('N', 'N', p.m, p.n, p.k, 1.0f, p.a.data(), p.k, p.b.data(),
                                       p.n, 0.0f, p.c.data(), p.n);
    if (s != dnnl_success) status = s;
  });
  if (status != dnnl_success) {
    return absl::InternalError(absl::StrCat("dnnl_sgemm failed with status ", int(status)));
  }
  return result;
}

absl::StatusOr<GemmResult> OnednnMatmul(int64_t m, int64_t n, int64_t k, int threads,
                                        double min_seconds) {
  omp_set_num_threads(threads);
  Problem p(m, n, k);
  using tag = dnnl::memory::format_tag;
  using dt = dnnl::memory::data_type;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  dnnl::memory::desc a_md({m, k}, dt::f32, tag::ab), b_md({k, n}, dt::f32, tag::ab),
      c_md({m, n}, dt::f32, tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
  dnnl::matmul matmul(pd);
  dnnl::memory a_mem(a_md, engine, p.a.data()), b_mem(b_md, engine, p.b.data()),
      c_mem(c_md, engine, p.c.data());
  return Measure("onednn-matmul", p, threads, min_seconds, [&] {
    matmul.execute(stream,
                   {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    stream.wait();
  });
}

}  // namespace lathe::baselines
