// bench_cuda: lathe's CUDA kernels against cuBLAS (SGEMM) and cuDNN (convolution), measured
// in the same run on GPU 0: SGEMM 4096^3 fp32 and a ResNet 3x3 convolution, each with
// lathe's default GPU schedule, the GPU search space's rule-picked candidate, and the best of
// a short search of the GPU search space (tuner/gpu_space.h). Times are medians of CUDA-event
// timings with the L2 flushed before every run; GFLOP/s count 2*m*n*k (resp. the convolution's
// multiply-adds x 2).
//
// cuBLAS and cuDNN are loaded with dlopen (like the driver), so the binary builds and starts
// anywhere; without a GPU it prints "skipped: no GPU (...)" and exits 0. Both libraries run
// pure fp32 (no TF32): cuBLAS's default math mode, cuDNN's FMA math type.
//
// Then the TF32 GEMM and convolution (the same --gemm and --conv shapes): cuBLAS in
// CUBLAS_TF32_TENSOR_OP_MATH and cuDNN in CUDNN_DEFAULT_MATH (TF32 allowed) against lathe's
// GPU space with TF32 allowed (`--gpu-math tf32`: the mma.sync m16n8k8 templates of
// codegen/cuda/contraction.h first, the cp.async-pipelined one before the register-staged
// one), outputs compared with ir/check.h at the TF32 tolerance. --no-tf32 skips them. Each
// rule-picked row names its kernel template and tile.
//
// Usage: bench_cuda [--trials N] [--gemm SPEC] [--conv SPEC] [--min-ms MS] [--no-tf32]
// The search runs candidates in this process: a candidate that faults would end the run
// (the tuner measures in a sandboxed child; this is a benchmark).
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/nvrtc.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "tuner/gpu_space.h"

namespace {

using namespace lathe;  // NOLINT: a benchmark's main
namespace cuda = lathe::codegen::cuda;

struct Options {
  int trials = 48;
  std::string gemm = "matmul:m=4096,n=4096,k=4096";
  std::string conv = "conv2d:n=8,c=128,h=28,w=28,k=128,r=3,s=3,pad=1";
  double min_ms = 200;
  bool tf32 = true;
};

// ir/check.h's tolerance for TF32 results (as gpuemu::kTf32Tolerance: TF32 keeps 10 mantissa
// bits).
constexpr double kTf32Tolerance = 5e-3;

// --- cuBLAS and cuDNN through dlopen ---

void* OpenFirst(std::initializer_list<const char*> names) {
  for (const char* n : names) {
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  return nullptr;
}

template <typename F>
bool Sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

struct Cublas {
  void* handle = nullptr;
  int (*create)(void**) = nullptr;
  int (*destroy)(void*) = nullptr;
  int (*sgemm)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int,
               const float*, float*, int) = nullptr;
  int (*set_math)(void*, int) = nullptr;

  // Empty on success, else why not. `tf32`: the handle in CUBLAS_TF32_TENSOR_OP_MATH (3).
  std::string Load(bool tf32 = false) {
    void* lib = OpenFirst({"libcublas.so.13", "libcublas.so.12", "libcublas.so"});
    if (!lib) return "libcublas not found";
    if (!Sym(lib, "cublasCreate_v2", &create) || !Sym(lib, "cublasDestroy_v2", &destroy) ||
        !Sym(lib, "cublasSgemm_v2", &sgemm) || !Sym(lib, "cublasSetMathMode", &set_math)) {
      return "libcublas lacks cublasSgemm_v2 or cublasSetMathMode";
    }
    if (int rc = create(&handle); rc != 0)
      return "cublasCreate failed (" + std::to_string(rc) + ")";
    if (tf32) {
      if (int rc = set_math(handle, 3); rc != 0)
        return "cublasSetMathMode(TF32) failed (" + std::to_string(rc) + ")";
    }
    return "";
  }
};

struct Cudnn {
  void* handle = nullptr;
  void *x = nullptr, *w = nullptr, *y = nullptr, *conv = nullptr;
  int (*create)(void**) = nullptr;
  int (*create_tensor)(void**) = nullptr;
  int (*set_tensor)(void*, int, int, int, int, int, int) = nullptr;
  int (*create_filter)(void**) = nullptr;
  int (*set_filter)(void*, int, int, int, int, int, int) = nullptr;
  int (*create_conv)(void**) = nullptr;
  int (*set_conv)(void*, int, int, int, int, int, int, int, int) = nullptr;
  int (*set_math)(void*, int) = nullptr;
  int (*workspace)(void*, void*, void*, void*, void*, int, size_t*) = nullptr;
  int (*forward)(void*, const void*, void*, const void*, void*, const void*, void*, int, void*,
                 size_t, const void*, void*, void*) = nullptr;

  std::string Load() {
    void* lib = OpenFirst({"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"});
    if (!lib) return "libcudnn not found";
    bool ok = Sym(lib, "cudnnCreate", &create) &&
              Sym(lib, "cudnnCreateTensorDescriptor", &create_tensor) &&
              Sym(lib, "cudnnSetTensor4dDescriptor", &set_tensor) &&
              Sym(lib, "cudnnCreateFilterDescriptor", &create_filter) &&
              Sym(lib, "cudnnSetFilter4dDescriptor", &set_filter) &&
              Sym(lib, "cudnnCreateConvolutionDescriptor", &create_conv) &&
              Sym(lib, "cudnnSetConvolution2dDescriptor", &set_conv) &&
              Sym(lib, "cudnnSetConvolutionMathType", &set_math) &&
              Sym(lib, "cudnnGetConvolutionForwardWorkspaceSize", &workspace) &&
              Sym(lib, "cudnnConvolutionForward", &forward);
    if (!ok) return "libcudnn lacks the legacy convolution API";
    if (int rc = create(&handle); rc != 0) return "cudnnCreate failed (" + std::to_string(rc) + ")";
    return "";
  }
};

// --- timing ---

struct Timing {
  double median_ms = 0;
  int repeats = 0;
};

// Warm-up, then runs with the L2 flushed before each until `min_ms` and 5 runs; the median.
absl::StatusOr<Timing> TimeIt(const cuda::CudaContext& ctx, cuda::DeviceBuffer& flush,
                              double min_ms, const std::function<absl::Status()>& run) {
  if (auto st = run(); !st.ok()) return st;
  if (auto st = ctx.Synchronize(); !st.ok()) return st;
  auto timer = cuda::EventTimer::Create(ctx);
  if (!timer.ok()) return timer.status();
  std::vector<double> ms;
  double total = 0;
  uint32_t pattern = 0;
  while (ms.size() < 5 || total < min_ms) {
    if (auto st = flush.Fill32(++pattern); !st.ok()) return st;
    if (auto st = (*timer)->Start(); !st.ok()) return st;
    if (auto st = run(); !st.ok()) return st;
    auto t = (*timer)->Stop();
    if (!t.ok()) return t.status();
    ms.push_back(*t);
    total += *t;
    if (ms.size() >= 10000) break;
  }
  std::sort(ms.begin(), ms.end());
  return Timing{ms[ms.size() / 2], static_cast<int>(ms.size())};
}

// --- one workload ---

struct Buffers {
  std::vector<std::vector<float>> host;  // inputs, then the output
  std::vector<cuda::DeviceBuffer> dev;
  std::vector<uint64_t> ptrs;
};

absl::StatusOr<Buffers> Upload(const cuda::CudaContext& ctx, const ir::Workload& w) {
  Buffers b;
  b.host = ir::AllocateArgs(w);
  ir::FillRandomInputs(b.host, 20261121);
  for (const auto& a : b.host) {
    auto d = cuda::DeviceBuffer::Allocate(ctx, static_cast<int64_t>(a.size() * 4));
    if (!d.ok()) return d.status();
    if (auto st = d->CopyFromHost(a.data(), static_cast<int64_t>(a.size() * 4)); !st.ok()) {
      return st;
    }
    b.ptrs.push_back(d->ptr());
    b.dev.push_back(std::move(*d));
  }
  return b;
}

absl::StatusOr<std::vector<float>> Download(const Buffers& b) {
  std::vector<float> out(b.host.back().size());
  if (auto st = b.dev.back().CopyToHost(out.data(), static_cast<int64_t>(out.size() * 4));
      !st.ok()) {
    return st;
  }
  return out;
}

// Builds, loads, runs once and checks `sch` against `ref` (when given).
absl::StatusOr<std::unique_ptr<cuda::CudaProgram>> Prepare(
    const cuda::CudaContext& ctx, const cuda::DeviceInfo& info, const ir::Schedule& sch, Buffers& b,
    const std::vector<float>* ref, double tolerance = ir::kDefaultTolerance) {
  auto src = cuda::BuildCudaSource(sch, "bench");
  if (!src.ok()) return src.status();
  auto cubin = cuda::CompileToCubin(src->source, info.arch());
  if (!cubin.ok()) return cubin.status();
  auto prog = cuda::CudaProgram::Load(ctx, *cubin, src->plan);
  if (!prog.ok()) return prog.status();
  if (auto st = b.dev.back().Fill32(0x7fc00000u); !st.ok()) return st;
  if (auto st = (*prog)->Run(b.ptrs); !st.ok()) return st;
  if (ref) {
    auto out = Download(b);
    if (!out.ok()) return out.status();
    if (auto st = ir::CheckOutput(*out, *ref, sch.workload().output()->shape, tolerance);
        !st.ok()) {
      return st;
    }
  }
  return prog;
}

std::map<std::string, int64_t> SpecKeys(const std::string& spec) {
  std::map<std::string, int64_t> out;
  std::string body = spec.substr(spec.find(':') + 1);
  for (absl::string_view kv : absl::StrSplit(body, ',')) {
    std::vector<std::string> p = absl::StrSplit(kv, '=');
    int64_t v;
    if (p.size() == 2 && absl::SimpleAtoi(p[1], &v)) out[p[0]] = v;
  }
  return out;
}

void PrintRow(const char* name, double flops, double ms, double base_ms, int repeats) {
  double gflops = flops / (ms * 1e-3) * 1e-9;
  if (base_ms > 0) {
    std::printf("  %-28s %10.3f ms %10.1f GFLOP/s  %6.3fx  (%d runs)\n", name, ms, gflops,
                base_ms / ms, repeats);
  } else {
    std::printf("  %-28s %10.3f ms %10.1f GFLOP/s     n/a  (%d runs)\n", name, ms, gflops, repeats);
  }
}

// The baseline library call for `w`, or an empty function with `why` set.
std::function<absl::Status()> Baseline(const ir::Workload& w, const std::string& spec, Buffers& b,
                                       const cuda::CudaContext& ctx,
                                       std::vector<std::unique_ptr<cuda::DeviceBuffer>>& keep,
                                       std::string* name, std::string* why, bool tf32) {
  auto keys = SpecKeys(spec);
  if (spec.rfind("matmul:", 0) == 0) {
    static Cublas fp32_blas, tf32_blas;
    static std::string fp32_err = fp32_blas.Load(false), tf32_err = tf32_blas.Load(true);
    Cublas& blas = tf32 ? tf32_blas : fp32_blas;
    const std::string& err = tf32 ? tf32_err : fp32_err;
    *name = tf32 ? "cuBLAS sgemm (TF32)" : "cuBLAS sgemm";
    if (!err.empty()) {
      *why = err;
      return nullptr;
    }
    if (b.ptrs.size() != 3) {
      *why = "cuBLAS baseline only for matmul without epilogue";
      return nullptr;
    }
    int m = static_cast<int>(keys["m"]), n = static_cast<int>(keys["n"]),
        k = static_cast<int>(keys["k"]);
    auto* A = reinterpret_cast<const float*>(b.ptrs[0]);
    auto* B = reinterpret_cast<const float*>(b.ptrs[1]);
    auto* C = reinterpret_cast<float*>(b.ptrs[2]);
    // Row-major C = A*B is column-major C^T = B^T * A^T.
    return [=]() -> absl::Status {
      static const float one = 1.0f, zero = 0.0f;
      int rc = blas.sgemm(blas.handle, 0, 0, n, m, k, &one, B, n, A, k, &zero, C, n);
      if (rc != 0) return absl::InternalError("cublasSgemm failed (" + std::to_string(rc) + ")");
      return absl::OkStatus();
    };
  }
  if (spec.rfind("conv2d:", 0) == 0) {
    // Two handles: fp32 math (CUDNN_FMA_MATH) and, with `tf32`, CUDNN_DEFAULT_MATH (TF32
    // tensor cores allowed for fp32 data on sm_80 and later).
    static Cudnn fp32_dnn, tf32_dnn;
    static std::string fp32_err = fp32_dnn.Load(), tf32_err = tf32_dnn.Load();
    Cudnn& dnn = tf32 ? tf32_dnn : fp32_dnn;
    const std::string& err = tf32 ? tf32_err : fp32_err;
    *name = tf32 ? "cuDNN conv (TF32, best algo)" : "cuDNN conv (best algo)";
    if (!err.empty()) {
      *why = err;
      return nullptr;
    }
    if (b.ptrs.size() != 3 || keys.count("groups") || spec.find("nhwc") != std::string::npos) {
      *why = "cuDNN baseline only for nchw, groups=1, no epilogue";
      return nullptr;
    }
    int64_t n = keys["n"], c = keys["c"], h = keys["h"], wd = keys["w"], k = keys["k"],
            r = keys["r"], s = keys["s"];
    int64_t stride = keys.count("stride") ? keys["stride"] : 1;
    int64_t pad = keys.count("pad") ? keys["pad"] : 0;
    int64_t dil = keys.count("dilation") ? keys["dilation"] : 1;
    const std::vector<int64_t>& oshape = w.output()->shape;
    bool ok = dnn.create_tensor(&dnn.x) == 0 && dnn.create_tensor(&dnn.y) == 0 &&
              dnn.create_filter(&dnn.w) == 0 && dnn.create_conv(&dnn.conv) == 0 &&
              dnn.set_tensor(dnn.x, 0, 0, n, c, h, wd) == 0 &&
              dnn.set_tensor(dnn.y, 0, 0, oshape[0], oshape[1], oshape[2], oshape[3]) == 0 &&
              dnn.set_filter(dnn.w, 0, 0, k, c, r, s) == 0 &&
              dnn.set_conv(dnn.conv, pad, pad, stride, stride, dil, dil, 1, 0) == 0 &&
              dnn.set_math(dnn.conv, tf32 ? 0 /*CUDNN_DEFAULT_MATH*/ : 3 /*CUDNN_FMA_MATH*/) == 0;
    if (!ok) {
      *why = "cuDNN descriptors refused the shape";
      return nullptr;
    }
    // The fastest of the forward algorithms that accept the shape.
    auto timer = cuda::EventTimer::Create(ctx);
    int best = -1;
    double best_ms = 1e30;
    size_t best_ws = 0;
    static const float one = 1.0f, zero = 0.0f;
    for (int algo = 0; algo < 8 && timer.ok(); ++algo) {
      size_t ws = 0;
      if (dnn.workspace(dnn.handle, dnn.x, dnn.w, dnn.conv, dnn.y, algo, &ws) != 0) continue;
      auto buf = cuda::DeviceBuffer::Allocate(ctx, static_cast<int64_t>(std::max<size_t>(ws, 4)));
      if (!buf.ok()) continue;
      auto fwd = [&] {
        return dnn.forward(dnn.handle, &one, dnn.x, reinterpret_cast<void*>(b.ptrs[0]), dnn.w,
                           reinterpret_cast<void*>(b.ptrs[1]), dnn.conv, algo,
                           reinterpret_cast<void*>(buf->ptr()), ws, &zero, dnn.y,
                           reinterpret_cast<void*>(b.ptrs[2]));
      };
      if (fwd() != 0 || !ctx.Synchronize().ok()) continue;
      if (!(*timer)->Start().ok()) continue;
      for (int i = 0; i < 3; ++i) fwd();
      auto t = (*timer)->Stop();
      if (t.ok() && *t < best_ms) {
        best_ms = *t;
        best = algo;
        best_ws = ws;
      }
    }
    if (best < 0) {
      *why = "no cuDNN forward algorithm accepted the shape";
      return nullptr;
    }
    auto ws = cuda::DeviceBuffer::Allocate(ctx, static_cast<int64_t>(std::max<size_t>(best_ws, 4)));
    if (!ws.ok()) {
      *why = std::string(ws.status().message());
      return nullptr;
    }
    keep.push_back(std::make_unique<cuda::DeviceBuffer>(std::move(*ws)));
    uint64_t wsp = keep.back()->ptr();
    *name = (tf32 ? "cuDNN conv (TF32, algo " : "cuDNN conv (algo ") + std::to_string(best) + ")";
    std::vector<uint64_t> p = b.ptrs;
    return [=]() -> absl::Status {
      int rc =
          dnn.forward(dnn.handle, &one, dnn.x, reinterpret_cast<void*>(p[0]), dnn.w,
                      reinterpret_cast<void*>(p[1]), dnn.conv, best, reinterpret_cast<void*>(wsp),
                      best_ws, &zero, dnn.y, reinterpret_cast<void*>(p[2]));
      if (rc != 0) return absl::InternalError("cudnnConvolutionForward failed");
      return absl::OkStatus();
    };
  }
  *name = tf32 ? "library (TF32)" : "library";
  *why = "no baseline for this op";
  return nullptr;
}

int RunCase(const Options& o, const std::string& spec, const cuda::CudaContext& ctx,
            const cuda::DeviceInfo& info, cuda::DeviceBuffer& flush, bool tf32 = false) {
  const double tol = tf32 ? kTf32Tolerance : ir::kDefaultTolerance;
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) {
    std::fprintf(stderr, "bad workload %s: %s\n", spec.c_str(), w.status().ToString().c_str());
    return 1;
  }
  std::printf("%s%s (%.2f GFLOP)\n", w->canonical.c_str(), tf32 ? ", TF32 allowed" : "",
              w->flops * 1e-9);
  auto b = Upload(ctx, *w);
  if (!b.ok()) {
    std::fprintf(stderr, "upload: %s\n", b.status().ToString().c_str());
    return 1;
  }
  std::vector<std::unique_ptr<cuda::DeviceBuffer>> keep;
  std::string base_name, why;
  auto base = Baseline(*w, spec, *b, ctx, keep, &base_name, &why, tf32);
  double base_ms = 0;
  std::vector<float> ref;
  if (base) {
    auto t = TimeIt(ctx, flush, o.min_ms, base);
    if (!t.ok()) {
      std::fprintf(stderr, "%s: %s\n", base_name.c_str(), t.status().ToString().c_str());
      return 1;
    }
    base_ms = t->median_ms;
    PrintRow(base_name.c_str(), w->flops, t->median_ms, 0, t->repeats);
    auto out = Download(*b);
    if (out.ok()) ref = std::move(*out);
  } else {
    std::printf("  %-28s n/a: %s\n", base_name.c_str(), why.c_str());
  }

  // lathe, default schedule: checked against the library's output (when there is one).
  auto def = cuda::DefaultGpuSchedule(*w);
  if (!def.ok()) return 1;
  auto prog = Prepare(ctx, info, *def, *b, ref.empty() ? nullptr : &ref, tol);
  if (!prog.ok()) {
    std::fprintf(stderr, "lathe default: %s\n", prog.status().ToString().c_str());
    return 1;
  }
  if (ref.empty()) {
    auto out = Download(*b);
    if (out.ok()) ref = std::move(*out);
  }
  auto launch = [&](cuda::CudaProgram* p) { return [p, &b] { return p->Launch(b->ptrs); }; };
  auto dt = TimeIt(ctx, flush, o.min_ms, launch(prog->get()));
  if (!dt.ok()) return 1;
  PrintRow("lathe default schedule", w->flops, dt->median_ms, base_ms, dt->repeats);

  tuner::GpuTarget target;
  target.arch = info.arch();
  target.sm_count = info.sm_count;
  target.limits = info.limits;
  target.tf32 = tf32;
  auto space = tuner::CreateGpuSearchSpace(*w, target);
  if (!space.ok()) return 1;

  // lathe, rule-picked: the space's candidates shaped like a hand-written kernel, unmeasured;
  // the first is what an untuned build runs, the others (timed for a quarter as long) show
  // which shape the rule should put first.
  std::vector<tuner::Candidate> rules = (*space)->Heuristic(6);
  for (size_t r = 0; r < rules.size(); ++r) {
    // Which kernel template (and tile) the candidate is, where it is one.
    std::string what = rules[r].sketch == 0 ? "loop tiling" : "flat";
    for (const ir::Instruction& i : rules[r].trace.instructions) {
      if (i.kind != "tensorize") continue;
      std::string params;
      for (int64_t f : i.factors) params += (params.empty() ? "" : ",") + std::to_string(f);
      what = i.tag + " " + params;
    }
    const std::string named =
        (r == 0 ? std::string("lathe rule-picked") : "  rule-picked #" + std::to_string(r)) + " [" +
        what + "]";
    const char* label = named.c_str();
    auto rp = Prepare(ctx, info, *rules[r].schedule, *b, &ref, tol);
    auto rt = rp.ok() ? TimeIt(ctx, flush, r == 0 ? o.min_ms : o.min_ms / 4, launch(rp->get()))
                      : absl::StatusOr<Timing>(rp.status());
    if (rt.ok()) {
      PrintRow(label, w->flops, rt->median_ms, base_ms, rt->repeats);
    } else {
      std::printf("  %s: %s\n", label, rt.status().ToString().c_str());
    }
  }

  // lathe, tuned: a short random search (the rule-picked candidates first, then half samples,
  // half mutations of the best so far), each candidate checked, timed on 3 flushed runs.
  std::mt19937_64 rng(1);
  std::vector<std::pair<double, tuner::Candidate>> found;
  int failed = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.trials; ++i) {
    absl::StatusOr<tuner::Candidate> c =
        i < static_cast<int>(rules.size()) ? absl::StatusOr<tuner::Candidate>(rules[i])
        : (found.empty() || i < o.trials / 2)
            ? (*space)->Sample(rng)
            : (*space)->Mutate(found[std::min<size_t>(rng() % 4, found.size() - 1)].second, rng);
    if (!c.ok()) continue;
    auto p = Prepare(ctx, info, *c->schedule, *b, &ref, tol);
    if (!p.ok()) {
      if (cuda::IsStickyCudaError(p.status())) {
        std::fprintf(stderr, "candidate %d poisoned the context: %s\n", i,
                     p.status().ToString().c_str());
        return 1;
      }
      ++failed;
      continue;
    }
    std::vector<double> ms;
    for (int r = 0; r < 3; ++r) {
      auto t = (*p)->TimeOnce(b->ptrs, &flush);
      if (t.ok()) ms.push_back(*t);
    }
    if (ms.empty()) continue;
    std::sort(ms.begin(), ms.end());
    found.emplace_back(ms[ms.size() / 2], std::move(*c));
    std::sort(found.begin(), found.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  double search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (found.empty()) {
    std::printf("  lathe tuned: no valid candidate in %d trials (%d failed)\n", o.trials, failed);
    return 0;
  }
  auto best = Prepare(ctx, info, *found.front().second.schedule, *b, &ref, tol);
  if (!best.ok()) return 1;
  auto bt = TimeIt(ctx, flush, o.min_ms, launch(best->get()));
  if (!bt.ok()) return 1;
  char label[64];
  std::snprintf(label, sizeof(label), "lathe tuned (%d trials)", o.trials);
  PrintRow(label, w->flops, bt->median_ms, base_ms, bt->repeats);
  std::printf("  search: %.1f s, %d candidates failed to build or check\n", search_s, failed);
  std::printf("  best trace: %s\n", traceio::TraceToJson(found.front().second.trace).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--trials") {
      o.trials = std::atoi(next().c_str());
    } else if (a == "--gemm") {
      o.gemm = next();
    } else if (a == "--conv") {
      o.conv = next();
    } else if (a == "--min-ms") {
      o.min_ms = std::atof(next().c_str());
    } else if (a == "--no-tf32") {
      o.tf32 = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_cuda [--trials N] [--gemm SPEC] [--conv SPEC] "
                   "[--min-ms MS] [--no-tf32]\n");
      return 2;
    }
  }
  auto driver = cuda::CudaDriver::Get();
  if (!driver.ok()) {
    std::printf("skipped: no GPU (%s)\n", std::string(driver.status().message()).c_str());
    return 0;
  }
  auto count = (*driver)->DeviceCount();
  if (!count.ok() || *count == 0) {
    std::printf("skipped: no GPU (the driver reports no device)\n");
    return 0;
  }
  if (!cuda::HaveNvrtc()) {
    std::printf("skipped: this build has no NVRTC\n");
    return 0;
  }
  auto ctx = cuda::CudaContext::Create(0);
  auto info = (*driver)->Describe(0);
  if (!ctx.ok() || !info.ok()) {
    std::fprintf(stderr, "cuda:0: %s\n",
                 (!ctx.ok() ? ctx.status() : info.status()).ToString().c_str());
    return 1;
  }
  std::printf("device: %s, %d SMs, L2 %lld KiB, driver %s, NVRTC %s, peak ~%.0f GFLOP/s fp32\n",
              info->device_class().c_str(), info->sm_count,
              static_cast<long long>(info->l2_bytes / 1024), (*driver)->Version().c_str(),
              cuda::NvrtcVersion().c_str(), info->peak_gflops());
  auto flush = cuda::DeviceBuffer::Allocate(**ctx, std::max<int64_t>(2 * info->l2_bytes, 64 << 20));
  if (!flush.ok()) return 1;
  int rc = RunCase(o, o.gemm, **ctx, *info, *flush);
  rc |= RunCase(o, o.conv, **ctx, *info, *flush);
  // TF32 tensor cores need sm_80 or later.
  if (o.tf32 && info->cc_major >= 8) {
    rc |= RunCase(o, o.gemm, **ctx, *info, *flush, /*tf32=*/true);
    // Half the trials: the four cases within gpu-host-check.sh's bench budget.
    Options half = o;
    half.trials = o.trials / 2;
    rc |= RunCase(half, o.conv, **ctx, *info, *flush, /*tf32=*/true);
  } else if (o.tf32) {
    std::printf("TF32 GEMM and conv skipped: %s has no TF32 tensor cores\n", info->arch().c_str());
  }
  return rc;
}
