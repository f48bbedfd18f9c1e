#include "measure/measure_child.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <thread>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "codegen/cpu_kernel.h"
#include "codegen/host.h"
#include "codegen/lower.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"
#include "ir/target.h"
#include "ir/trace.h"
#include "measure/measure_emulated.h"
#include "measure/measurer.h"
#include "proto/trace_io.h"

#ifdef LATHE_HAVE_CUDA_BACKEND
#include "codegen/cuda/cuda_build.h"
#include "codegen/cuda/cuda_driver.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/cuda/resources.h"
#endif

namespace lathe::measure {

namespace {

using Clock = std::chrono::steady_clock;

// A copy of a buffer placed where kernels are timed (codegen::kTimedBufferOffset past a 64-byte
// boundary, CONTRACT.md "Built kernels"): a kernel that loses its speed on such buffers is
// timed as slow as it will run for its users, so the record and the built kernel agree.
class UserBuffer {
 public:
  explicit UserBuffer(const std::vector<float>& from)
      : block_(static_cast<char*>(std::aligned_alloc(64, RoundUp(from.size() * 4 + 64))),
               std::free),
        size_(from.size()) {
    std::copy(from.begin(), from.end(), data());
  }
  float* data() { return reinterpret_cast<float*>(block_.get() + codegen::kTimedBufferOffset); }
  std::span<const float> view() { return {data(), size_}; }

 private:
  static size_t RoundUp(size_t n) { return (n + 63) / 64 * 64; }
  std::unique_ptr<char, void (*)(void*)> block_;
  size_t size_;
};

// Inputs and the reference output of one workload, computed once per child.
struct WorkloadData {
  ir::Workload workload;
  std::vector<std::vector<float>> args;  // inputs, then a scratch output
  std::vector<float> reference;
  std::vector<UserBuffer> cpu_args;  // copies of `args` where a user's buffers would start
  std::vector<size_t> parameters;    // indices of the arguments a model holds as constants
};

}  // namespace

std::vector<size_t> ParameterArgs(const ir::Workload& w) {
  // (sepconv2d's depthwise weights and epilogue tensors too: DW, dw_bias, ...)
  static const std::set<std::string> kParameters = {
      "W", "bias", "scale", "shift", "gamma", "beta", "DW", "dw_bias", "dw_scale", "dw_shift"};
  const bool packed_b = w.spec.params.count("bpanel") > 0;
  std::vector<size_t> out;
  for (size_t i = 1; i + 1 < w.args.size(); ++i) {
    const std::string& name = w.args[i]->name;
    if (kParameters.count(name) > 0 || (packed_b && name == "B")) out.push_back(i);
  }
  return out;
}

namespace {

absl::StatusOr<WorkloadData*> GetWorkload(const std::string& spec) {
  static std::map<std::string, std::unique_ptr<WorkloadData>> cache;
  auto it = cache.find(spec);
  if (it != cache.end()) return it->second.get();
  auto w = ir::MakeWorkload(spec);
  if (!w.ok()) return w.status();
  auto d = std::make_unique<WorkloadData>();
  d->workload = *w;
  d->args = ir::AllocateArgs(*w);
  ir::FillRandomInputs(d->args, /*seed=*/20261121);
  if (auto s = ir::ComputeReference(*w, d->args); !s.ok()) return s;
  d->reference = d->args.back();
  for (const std::vector<float>& a : d->args) d->cpu_args.emplace_back(a);
  d->parameters = ParameterArgs(*w);
  if (cache.size() > 8) cache.clear();
  return (cache[spec] = std::move(d)).get();
}

void FlushCaches() {
  static std::vector<char> junk;
  const auto& cpu = codegen::HostCpu();
  size_t bytes =
      static_cast<size_t>(std::max<int64_t>(cpu.l2_bytes * cpu.cores + cpu.l3_bytes, 8 << 20));
  if (junk.size() != bytes) junk.assign(bytes, 1);
  for (size_t i = 0; i < junk.size(); i += 64) junk[i] = static_cast<char>(junk[i] + 1);
}

double MaxClockGhz() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  double khz = 0;
  if (f >> khz && khz > 0) return khz / 1e6;
  std::ifstream c("/proc/cpuinfo");
  std::string line;
  double mhz = 0;
  while (std::getline(c, line)) {
    if (line.rfind("cpu MHz", 0) == 0) {
      mhz = std::max(mhz, std::atof(line.substr(line.find(':') + 1).c_str()));
    }
  }
  // Boost clocks run above the nominal figure; allow for them.
  return mhz > 0 ? mhz / 1e3 * 1.5 : 5.0;
}

// Set when the process must not measure again (a sticky CUDA error poisoned its context):
// the child answers the current request, then exits, and the parent starts a new one.
bool g_must_exit = false;

lathe::v1::MeasureResult MeasureCuda(const lathe::v1::MeasureRequest& req, WorkloadData& d,
                                     const ir::Trace& trace, int gpu_ordinal);

}  // namespace

absl::StatusOr<ChildOptions> ParseChildArgs(const std::vector<std::string>& args) {
  ChildOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a != "--gpu" && a != "--emulate") {
      return absl::InvalidArgumentError(absl::StrCat("unknown argument '", a, "'"));
    }
    if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
    const std::string& v = args[++i];
    if (a == "--gpu") {
      if (!absl::SimpleAtoi(v, &o.gpu_ordinal) || o.gpu_ordinal < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--gpu ", v, ": not a GPU ordinal (0, 1, ...)"));
      }
    } else if (!absl::StartsWith(v, "sm_") || v.size() < 5) {
      return absl::InvalidArgumentError(
          absl::StrCat("--emulate ", v, ": not a GPU architecture (sm_80, sm_90, ...)"));
    } else {
      o.emulated_arch = v;
    }
  }
  return o;
}

std::vector<std::string> ChildArgs(const ChildOptions& options) {
  std::vector<std::string> a = {"--gpu", std::to_string(options.gpu_ordinal)};
  if (!options.emulated_arch.empty()) {
    a.push_back("--emulate");
    a.push_back(options.emulated_arch);
  }
  return a;
}

// The lines are written back first where dirty, as a model's weights are when their step comes
// round again.
void Evict(const float* p, size_t count) {
  if (count == 0) return;
#if defined(__x86_64__)
  const char* begin = reinterpret_cast<const char*>(p);
  const char* end = begin + count * sizeof(float);
  for (const char* line = begin; line < end; line += 64) _mm_clflush(line);
  _mm_clflush(end - 1);  // the last line when `begin` is not line-aligned
  _mm_mfence();
#else
  FlushCaches();
#endif
}

std::string TestFaultOf(const std::string& candidate_id) {
  const char* plan = std::getenv("LATHE_TEST_FAULTS");
  if (plan == nullptr || *plan == '\0') return "";
  std::ifstream in(plan);
  std::string id;
  std::string fault;
  while (in >> id >> fault) {
    if (id == candidate_id) return fault;
  }
  return "";
}

void SetTimings(const std::vector<double>& us, lathe::v1::MeasureResult* r) {
  for (double u : us) r->add_repeats_us(u);
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  double mean = 0, var = 0;
  for (double u : us) mean += u;
  mean /= us.size();
  for (double u : us) var += (u - mean) * (u - mean);
  var /= us.size();
  r->set_median_us(median);
  r->set_cv(mean > 0 ? std::sqrt(var) / mean : 0);
}

double HostPeakGflops() {
  const auto& cpu = codegen::HostCpu();
  double lanes = cpu.vector_bits / 32.0;
  return lanes * 2 /*FMA units*/ * 2 /*flops per FMA*/ * cpu.cores * MaxClockGhz();
}

lathe::v1::MeasureResult MeasureInProcess(const lathe::v1::MeasureRequest& req,
                                          const ChildOptions& options) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  auto fail = [&](lathe::v1::ErrorClass c, std::string msg) {
    r.set_error_class(c);
    r.set_error_msg(std::move(msg));
    return r;
  };
  auto data = GetWorkload(req.workload());
  if (!data.ok()) {
    return fail(lathe::v1::INVALID_SCHEDULE, "workload: " + std::string(data.status().message()));
  }
  WorkloadData& d = **data;
  auto t0 = Clock::now();
  auto trace = traceio::RequestTrace(req);
  if (!trace.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(trace.status().message()));
  if (absl::StatusOr<ir::Target> target = ir::ParseTarget(trace->target);
      target.ok() && target->is_gpu()) {
    // The parent's choice: the GPU emulator for an architecture, or a GPU.
    if (!options.emulated_arch.empty()) {
      return MeasureEmulated(req, d.workload, d.args, d.reference, *trace, options.emulated_arch);
    }
    return MeasureCuda(req, d, *trace, options.gpu_ordinal);
  }
  auto sch = ir::ApplyTrace(d.workload, *trace);
  if (!sch.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(sch.status().message()));
  auto func = codegen::Lower(*sch, "candidate");
  if (!func.ok()) return fail(lathe::v1::INVALID_SCHEDULE, std::string(func.status().message()));
  auto kernel = codegen::JitCompile(*func);
  if (!kernel.ok()) {
    return fail(lathe::v1::COMPILE_ERROR, std::string(kernel.status().message()));
  }
  r.set_compile_ms(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());

  const std::string fault = TestFaultOf(req.candidate_id());
  if (fault == "crash") raise(SIGSEGV);
  if (fault == "hang") {
    for (;;) pause();
  }
  std::vector<void*> ptrs;
  for (UserBuffer& a : d.cpu_args) ptrs.push_back(a.data());
  int nargs = static_cast<int>(ptrs.size());
  float* out = d.cpu_args.back().data();
  std::fill(out, out + d.reference.size(), std::nanf(""));
  // The check doubles as the warm-up call.
  const auto warm_start = Clock::now();
  int rc = (*kernel)->Run(ptrs.data(), nargs);
  const double warm_us =
      std::chrono::duration<double, std::micro>(Clock::now() - warm_start).count();
  if (rc != 0) return fail(lathe::v1::RUNTIME_ERROR, absl::StrCat("kernel returned ", rc));
  if (fault == "wrong") out[d.reference.size() / 2] += 1.0f;
  absl::Status ok =
      ir::CheckOutput(d.cpu_args.back().view(), d.reference, d.workload.output()->shape);
  if (!ok.ok()) return fail(lathe::v1::WRONG_ANSWER, std::string(ok.message()));

  double min_ms = req.min_repeat_ms() > 0 ? req.min_repeat_ms() : 100.0;
  int max_repeats = req.max_repeats() > 0 ? req.max_repeats() : 1000;
  std::vector<double> us;
  // Far slower than the best so far: one call decides. The first call of a fresh kernel also
  // pays for its cold code, data pages and sleeping pool threads (a 3 us kernel's first call
  // has taken 2 ms here), so when that start-up cost could be what put it past the cutoff, a
  // second call is timed and is the one figure; a call further past it is the figure itself.
  constexpr double kColdStartUs = 10000;
  if (req.cutoff_us() > 0 && warm_us > req.cutoff_us() + kColdStartUs) {
    us.push_back(warm_us);
    max_repeats = 0;
  } else if (req.cutoff_us() > 0 && warm_us > req.cutoff_us()) {
    auto a = Clock::now();
    rc = (*kernel)->Run(ptrs.data(), nargs);
    double second_us = std::chrono::duration<double, std::micro>(Clock::now() - a).count();
    if (rc != 0) return fail(lathe::v1::RUNTIME_ERROR, absl::StrCat("kernel returned ", rc));
    us.push_back(second_us);
    if (second_us > req.cutoff_us()) max_repeats = 0;
  }
  auto start = Clock::now();
  while (static_cast<int>(us.size()) < max_repeats) {
    if (req.flush_cache()) FlushCaches();
    if (req.cold_weights()) {
      for (size_t i : d.parameters) Evict(d.cpu_args[i].data(), d.cpu_args[i].view().size());
    }
    auto a = Clock::now();
    rc = (*kernel)->Run(ptrs.data(), nargs);
    auto b = Clock::now();
    if (rc != 0) return fail(lathe::v1::RUNTIME_ERROR, absl::StrCat("kernel returned ", rc));
    us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
    double spent = std::chrono::duration<double, std::milli>(b - start).count();
    if (us.size() >= 3 && spent >= min_ms) break;
  }
  SetTimings(us, &r);
  double median = r.median_us();
  double gflops = d.workload.flops / (median * 1e-6) * 1e-9;
  r.set_gflops(gflops);
  double peak = HostPeakGflops();
  if (gflops > peak) {
    return fail(lathe::v1::RUNTIME_ERROR,
                absl::StrCat("measured ", gflops, " GFLOP/s exceeds the device peak of ", peak,
                             " GFLOP/s: measurement error"));
  }
  r.set_error_class(lathe::v1::OK);
  return r;
}

int RunMeasureChild(int in_fd, int out_fd, const ChildOptions& options) {
  for (;;) {
    auto frame = ReadFrame(in_fd, -1);
    if (!frame.ok()) return absl::IsUnavailable(frame.status()) ? 0 : 1;
    lathe::v1::MeasureRequest req;
    lathe::v1::MeasureResult res;
    if (!req.ParseFromString(*frame)) {
      res.set_error_class(lathe::v1::INVALID_SCHEDULE);
      res.set_error_msg("malformed measurement request");
    } else {
      res = MeasureInProcess(req, options);
    }
    if (!WriteFrame(out_fd, res.SerializeAsString()).ok()) return 1;
    if (g_must_exit) return 3;
  }
}

namespace {

#ifdef LATHE_HAVE_CUDA_BACKEND

namespace cuda = codegen::cuda;

// The GPU of this child: its context, description, the L2 flush buffer, and the device
// copies of one workload's arguments (inputs uploaded once; the last is the output).
struct GpuState {
  std::unique_ptr<cuda::CudaContext> ctx;
  cuda::DeviceInfo info;
  std::unique_ptr<cuda::DeviceBuffer> flush;
  std::string workload;
  std::vector<cuda::DeviceBuffer> args;
};

// The state, created on first use; a failure (no driver, no device) is returned every time.
absl::StatusOr<GpuState*> GetGpu(int ordinal) {
  static GpuState* state = nullptr;
  static absl::Status failure;
  if (state) return state;
  if (!failure.ok()) return failure;
  auto fail = [&](const absl::Status& st) {
    failure = absl::FailedPreconditionError(
        absl::StrCat("no GPU to measure on: cuda:", ordinal, ": ", st.message()));
    return failure;
  };
  if (!cuda::HaveNvrtc()) return fail(absl::UnimplementedError("this build has no NVRTC"));
  auto ctx = cuda::CudaContext::Create(ordinal);
  if (!ctx.ok()) return fail(ctx.status());
  auto info = (*ctx)->driver().Describe(ordinal);
  if (!info.ok()) return fail(info.status());
  auto s = std::make_unique<GpuState>();
  s->ctx = std::move(*ctx);
  s->info = *info;
  // Twice the L2 (at least 64 MiB): writing it leaves none of the arguments cached.
  int64_t bytes = std::max<int64_t>(2 * s->info.l2_bytes, 64 << 20);
  auto flush = cuda::DeviceBuffer::Allocate(*s->ctx, bytes);
  if (!flush.ok()) return fail(flush.status());
  s->flush = std::make_unique<cuda::DeviceBuffer>(std::move(*flush));
  state = s.release();
  return state;
}

// Uploads the workload's inputs (once per workload).
absl::Status PrepareArgs(GpuState& g, WorkloadData& d) {
  if (g.workload == d.workload.canonical && g.args.size() == d.args.size()) {
    return absl::OkStatus();
  }
  g.args.clear();
  g.workload.clear();
  for (const std::vector<float>& a : d.args) {
    int64_t bytes = static_cast<int64_t>(a.size() * sizeof(float));
    auto b = cuda::DeviceBuffer::Allocate(*g.ctx, bytes);
    if (!b.ok()) return b.status();
    if (auto st = b->CopyFromHost(a.data(), bytes); !st.ok()) return st;
    g.args.push_back(std::move(*b));
  }
  g.workload = d.workload.canonical;
  return absl::OkStatus();
}

lathe::v1::MeasureResult MeasureCuda(const lathe::v1::MeasureRequest& req, WorkloadData& d,
                                     const ir::Trace& trace, int gpu_ordinal) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  auto fail = [&](lathe::v1::ErrorClass c, absl::string_view msg) {
    r.set_error_class(c);
    r.set_error_msg(std::string(msg));
    return r;
  };
  // A driver error: sticky ones end this process once the result is written.
  auto runtime = [&](const absl::Status& st) {
    if (cuda::IsStickyCudaError(st)) g_must_exit = true;
    return fail(lathe::v1::RUNTIME_ERROR, st.message());
  };
  auto gpu = GetGpu(gpu_ordinal);
  if (!gpu.ok()) return fail(lathe::v1::NO_DEVICE, gpu.status().message());
  GpuState& g = **gpu;
  auto t0 = Clock::now();
  auto sch = ir::ApplyTrace(d.workload, trace);
  if (!sch.ok()) return fail(lathe::v1::INVALID_SCHEDULE, sch.status().message());
  auto src = cuda::BuildCudaSource(*sch, "candidate");
  if (!src.ok()) return fail(lathe::v1::INVALID_SCHEDULE, src.status().message());
  if (auto st = cuda::CheckLaunchLimits(src->plan, g.info.limits); !st.ok()) {
    return fail(lathe::v1::INVALID_SCHEDULE, st.message());
  }
  auto cubin = cuda::CompileToCubinWithResources(src->source, g.info.arch());
  if (!cubin.ok()) return fail(lathe::v1::COMPILE_ERROR, cubin.status().message());
  // Refused before it runs when ptxas's figures exceed what the device can launch. Some NVRTC
  // builds return no ptxas report at all (CUDA 13.0's toolkit NVRTC on an H100 host did, while
  // the same version from PyPI did not): then the driver's figures, read after loading, decide.
  auto sm = cuda::SmResourcesFor(g.info.arch());
  if (sm.ok()) sm->limits = g.info.limits;
  const bool ptxas_reported = !cubin->kernels.empty();
  if (sm.ok() && ptxas_reported) {
    if (auto st = cuda::CheckKernelResources(src->plan, cubin->kernels, *sm); !st.ok()) {
      return fail(lathe::v1::INVALID_SCHEDULE, st.message());
    }
  }
  auto prog = cuda::CudaProgram::Load(*g.ctx, cubin->cubin, src->plan);
  if (!prog.ok()) {
    if (absl::IsResourceExhausted(prog.status())) {
      return fail(lathe::v1::INVALID_SCHEDULE, prog.status().message());
    }
    return runtime(prog.status());
  }
  if (sm.ok() && !ptxas_reported) {
    auto used = (*prog)->Resources();
    if (!used.ok()) return runtime(used.status());
    if (auto st = cuda::CheckKernelResources(src->plan, *used, *sm); !st.ok()) {
      return fail(lathe::v1::INVALID_SCHEDULE, st.message());
    }
  }
  r.set_compile_ms(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  if (auto st = PrepareArgs(g, d); !st.ok()) return runtime(st);

  std::vector<uint64_t> ptrs;
  for (const cuda::DeviceBuffer& b : g.args) ptrs.push_back(b.ptr());
  const std::string fault = TestFaultOf(req.candidate_id());
  if (fault == "crash") raise(SIGSEGV);
  if (fault == "hang") {
    for (;;) pause();
  }
  // Test-only: the output pointer moved far outside any allocation, so the kernel's first
  // store is an illegal address (a sticky error, as a buggy candidate would cause).
  if (fault == "illegal_access") ptrs.back() += static_cast<uint64_t>(1) << 44;
  std::vector<float>& out = d.args.back();
  // NaN everywhere first, so that an element the kernel does not write fails the check.
  if (auto st = g.args.back().Fill32(0x7fc00000u); !st.ok()) return runtime(st);
  // The check doubles as the warm-up call.
  if (auto st = (*prog)->Run(ptrs); !st.ok()) return runtime(st);
  if (auto st = g.args.back().CopyToHost(out.data(), static_cast<int64_t>(out.size() * 4));
      !st.ok()) {
    return runtime(st);
  }
  if (fault == "wrong") out[out.size() / 2] += 1.0f;
  absl::Status ok = ir::CheckOutput(out, d.reference, d.workload.output()->shape);
  if (!ok.ok()) return fail(lathe::v1::WRONG_ANSWER, ok.message());

  double min_ms = req.min_repeat_ms() > 0 ? req.min_repeat_ms() : 50.0;
  int max_repeats = req.max_repeats() > 0 ? req.max_repeats() : 1000;
  std::vector<double> us;
  auto start = Clock::now();
  while (static_cast<int>(us.size()) < max_repeats) {
    auto ms = (*prog)->TimeOnce(ptrs, req.flush_cache() ? g.flush.get() : nullptr);
    if (!ms.ok()) return runtime(ms.status());
    us.push_back(*ms * 1e3);
    double spent = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (us.size() >= 3 && spent >= min_ms) break;
  }
  SetTimings(us, &r);
  double gflops = d.workload.flops / (r.median_us() * 1e-6) * 1e-9;
  r.set_gflops(gflops);
  double peak = g.info.peak_gflops();
  if (r.median_us() <= 0 || (peak > 0 && gflops > peak)) {
    return fail(lathe::v1::RUNTIME_ERROR,
                absl::StrCat("measured ", gflops, " GFLOP/s exceeds the device peak of ", peak,
                             " GFLOP/s: measurement error"));
  }
  r.set_error_class(lathe::v1::OK);
  return r;
}

#else  // !LATHE_HAVE_CUDA_BACKEND

lathe::v1::MeasureResult MeasureCuda(const lathe::v1::MeasureRequest& req, WorkloadData&,
                                     const ir::Trace&, int gpu_ordinal) {
  lathe::v1::MeasureResult r;
  r.set_candidate_id(req.candidate_id());
  r.set_error_class(lathe::v1::NO_DEVICE);
  r.set_error_msg(absl::StrCat("no GPU to measure on: cuda:", gpu_ordinal,
                               ": this lathe-measure was built without the CUDA backend"));
  return r;
}

#endif  // LATHE_HAVE_CUDA_BACKEND

}  // namespace

}  // namespace lathe::measure
