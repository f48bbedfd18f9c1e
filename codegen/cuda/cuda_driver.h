// \file
// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), so that every lathe
// binary starts on machines without an NVIDIA driver: CudaDriver::Get() then fails with
// FailedPrecondition. On top of it, small RAII wrappers (primary context, device memory,
// module, events) and CudaProgram, which loads a CUBIN/PTX with its launch plan and runs it.
//
// Errors from the driver become statuses carrying the driver's error name and string. An
// error that poisons the context (an illegal address, a trap, a misaligned access, a failed
// launch) is Aborted with IsStickyCudaError() true: the process must be replaced.
//
// Thread-safety: CudaDriver is a process-wide immutable table, safe from any thread. The RAII
// objects are not synchronized; use each from one thread at a time (the context is made
// current on the calling thread by every call that needs it).
#ifndef LATHE_CODEGEN_CUDA_CUDA_DRIVER_H_
#define LATHE_CODEGEN_CUDA_CUDA_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gpu_schedule.h"
#include "codegen/cuda/resources.h"

namespace lathe::codegen::cuda {

// What the worker registers and what limit checks need.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t total_memory = 0;
  GpuLimits limits;
  int64_t max_shared_optin = 0;  // per block, with opt-in
  int64_t l2_bytes = 0;
  int64_t clock_khz = 0;  // peak SM clock
  // Peak float32 throughput: SMs x 128 FP32 lanes x 2 flops (FMA) x clock. An upper bound
  // (sm_70 and sm_80 have 64 lanes per SM), above which a timing is a measurement error.
  double peak_gflops() const { return sm_count * 128.0 * 2.0 * clock_khz * 1e-6; }
  // "sm_90".
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
  // The device class that keys records: "<name> (sm_XX)".
  std::string device_class() const { return name + " (" + arch() + ")"; }
};

// True for an Aborted status from a context-poisoning driver error.
bool IsStickyCudaError(const absl::Status& s);

struct DriverApi;  // the dlsym'd entry points (cuda_driver.cc)

class CudaDriver {
 public:
  // Loads libcuda.so.1 and calls cuInit once per process. FailedPrecondition when the
  // library is absent or cuInit fails ("no CUDA driver ..."); the same error on every call.
  static absl::StatusOr<CudaDriver*> Get();

  absl::StatusOr<int> DeviceCount() const;
  // Name, compute capability and limits of device `ordinal`; OutOfRange for a bad ordinal.
  absl::StatusOr<DeviceInfo> Describe(int ordinal) const;
  // "13.0"-style version of the driver's CUDA API.
  std::string Version() const;

  const DriverApi& api() const { return *api_; }
  // Converts a driver result (CUresult) into a status naming `what`.
  absl::Status Check(int result, const std::string& what) const;

 private:
  // The table lives as long as the process (the driver is never unloaded).
  explicit CudaDriver(const DriverApi* api) : api_(api) {}
  const DriverApi* api_;
};

// The retained primary context of one device.
class CudaContext {
 public:
  static absl::StatusOr<std::unique_ptr<CudaContext>> Create(int ordinal);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  // Makes the context current on the calling thread.
  absl::Status MakeCurrent() const;
  absl::Status Synchronize() const;
  const CudaDriver& driver() const { return *driver_; }
  int ordinal() const { return ordinal_; }

 private:
  CudaContext(const CudaDriver* d, int ordinal, void* ctx)
      : driver_(d), ordinal_(ordinal), ctx_(ctx) {}
  const CudaDriver* driver_;
  int ordinal_;
  void* ctx_;
};

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  static absl::StatusOr<DeviceBuffer> Allocate(const CudaContext& ctx, int64_t bytes);
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();

  uint64_t ptr() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  absl::Status CopyFromHost(const void* src, int64_t bytes);
  absl::Status CopyToHost(void* dst, int64_t bytes) const;
  // Fills with a 32-bit pattern (e.g. the bits of a float).
  absl::Status Fill32(uint32_t value);

 private:
  DeviceBuffer() = default;
  const CudaContext* ctx_ = nullptr;
  uint64_t ptr_ = 0;
  int64_t bytes_ = 0;
};

// A sequence of launches captured once as a CUDA graph and relaunched as one (fewer launch
// overheads for a model's many small kernels). The launches go to a stream of its own that
// synchronizes with the default stream (copies before and after stay ordered). Unavailable
// (FailedPrecondition) with a driver lacking the graph API. Not yet run on a GPU.
class CudaGraph {
 public:
  // Calls `launches(stream)`, which must only launch kernels on `stream`, under stream
  // capture, and instantiates the graph. Fails with the driver's error (the capture ended).
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Capture(
      const CudaContext& ctx, const std::function<absl::Status(void* stream)>& launches);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  // Launches the graph without waiting.
  absl::Status Launch();

 private:
  explicit CudaGraph(const CudaContext& ctx) : ctx_(ctx) {}
  const CudaContext& ctx_;
  void* stream_ = nullptr;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};

// Times work on the default stream between Start() and Stop() with two CUDA events, for
// work that other libraries launch (cuBLAS, cuDNN) as for lathe's own kernels.
class EventTimer {
 public:
  static absl::StatusOr<std::unique_ptr<EventTimer>> Create(const CudaContext& ctx);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  absl::Status Start();
  // Records the stop event, waits for it and returns the milliseconds since Start().
  absl::StatusOr<double> Stop();

 private:
  explicit EventTimer(const CudaContext& ctx) : ctx_(ctx) {}
  const CudaContext& ctx_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

// A loaded CUBIN (or PTX, JIT-compiled by the driver) with its launch plan and the
// temporaries the plan needs, ready to run.
class CudaProgram {
 public:
  // Loads `image` into `ctx`, resolves every kernel of `plan`, checks the plan against the
  // device's limits and allocates its temporaries.
  static absl::StatusOr<std::unique_ptr<CudaProgram>> Load(const CudaContext& ctx,
                                                           const std::string& image,
                                                           LaunchPlan plan);
  ~CudaProgram();
  CudaProgram(const CudaProgram&) = delete;
  CudaProgram& operator=(const CudaProgram&) = delete;

  // Launches every kernel in order with `args` (device pointers of the plan's arguments, in
  // order) without waiting, on `stream` (a CUstream; null: the default stream).
  // InvalidArgument when the count is wrong.
  absl::Status Launch(const std::vector<uint64_t>& args, void* stream = nullptr);
  // Launches and waits; a kernel fault is reported here (sticky errors as Aborted).
  absl::Status Run(const std::vector<uint64_t>& args);
  // Times `repeats` runs after one warm-up with CUDA events; milliseconds per run. With
  // `flush`, the buffer is overwritten before each run (outside the timed interval): one
  // larger than the L2 cache evicts the arguments, so every run starts cold.
  absl::StatusOr<std::vector<double>> Time(const std::vector<uint64_t>& args, int repeats,
                                           DeviceBuffer* flush = nullptr);
  // One timed run without warm-up (flushing first, as Time does); milliseconds.
  absl::StatusOr<double> TimeOnce(const std::vector<uint64_t>& args, DeviceBuffer* flush = nullptr);

  // What the driver says each kernel of the plan uses (registers, static shared memory, local
  // memory per thread as `stack_frame`; spills and barriers are not known to it): the same
  // figures ptxas reports, for NVRTC builds whose log carries no ptxas report.
  absl::StatusOr<std::vector<KernelResources>> Resources() const;

  const LaunchPlan& plan() const { return plan_; }

 private:
  CudaProgram(const CudaContext& ctx, LaunchPlan plan) : ctx_(ctx), plan_(std::move(plan)) {}
  const CudaContext& ctx_;
  LaunchPlan plan_;
  void* module_ = nullptr;
  std::vector<void*> functions_;
  std::vector<DeviceBuffer> temps_;
};

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_CUDA_DRIVER_H_
