#include "codegen/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <map>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace lathe::codegen::cuda {

// The few driver types and entry points lathe uses, declared here so that nothing links
// libcuda (the ABI of these is stable across driver versions).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT: the driver's type
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;

struct DriverApi {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuCtxSynchronize)() = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree)(CUdeviceptr) = nullptr;
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  // Graphs (optional: null when the driver lacks them).
  CUresult (*cuStreamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*cuStreamDestroy)(CUstream) = nullptr;
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, void**) = nullptr;
  CUresult (*cuGraphInstantiate)(void**, void*, unsigned long long) = nullptr;  // NOLINT
  CUresult (*cuGraphLaunch)(void*, CUstream) = nullptr;
  CUresult (*cuGraphExecDestroy)(void*) = nullptr;
  CUresult (*cuGraphDestroy)(void*) = nullptr;
};

namespace {

constexpr CUresult kSuccess = 0;
constexpr char kStickyPayload[] = "lathe.cuda/sticky";

// Attribute numbers of CUdevice_attribute.
enum Attr : int {
  kMaxThreadsPerBlock = 1,
  kMaxBlockX = 2,
  kMaxBlockY = 3,
  kMaxBlockZ = 4,
  kMaxGridX = 5,
  kMaxGridY = 6,
  kMaxGridZ = 7,
  kMaxSharedPerBlock = 8,
  kClockRate = 13,
  kSmCount = 16,
  kL2CacheSize = 38,
  kCcMajor = 75,
  kCcMinor = 76,
  kMaxSharedOptin = 97,
};

// Context-poisoning results: illegal address, launch timeout, assert, hardware stack error,
// illegal instruction, misaligned address, invalid address space, invalid pc, launch failed.
bool IsSticky(CUresult r) {
  return r == 700 || r == 702 || r == 710 || r == 714 || r == 715 || r == 716 || r == 717 ||
         r == 718 || r == 719;
}

template <typename F>
bool Sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

absl::StatusOr<std::unique_ptr<DriverApi>> LoadApi() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    return absl::FailedPreconditionError(
        "no CUDA driver (libcuda.so.1 not found): this machine has no NVIDIA GPU driver");
  }
  auto api = std::make_unique<DriverApi>();
  api->lib = lib;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto* fn) {
    if (!missing && !Sym(lib, name, fn)) missing = name;
  };
  need("cuInit", &api->cuInit);
  need("cuDriverGetVersion", &api->cuDriverGetVersion);
  need("cuGetErrorName", &api->cuGetErrorName);
  need("cuGetErrorString", &api->cuGetErrorString);
  need("cuDeviceGetCount", &api->cuDeviceGetCount);
  need("cuDeviceGet", &api->cuDeviceGet);
  need("cuDeviceGetName", &api->cuDeviceGetName);
  need("cuDeviceGetAttribute", &api->cuDeviceGetAttribute);
  need("cuDeviceTotalMem_v2", &api->cuDeviceTotalMem);
  need("cuDevicePrimaryCtxRetain", &api->cuDevicePrimaryCtxRetain);
  need("cuDevicePrimaryCtxRelease_v2", &api->cuDevicePrimaryCtxRelease);
  need("cuCtxSetCurrent", &api->cuCtxSetCurrent);
  need("cuCtxSynchronize", &api->cuCtxSynchronize);
  need("cuModuleLoadData", &api->cuModuleLoadData);
  need("cuModuleUnload", &api->cuModuleUnload);
  need("cuModuleGetFunction", &api->cuModuleGetFunction);
  need("cuFuncGetAttribute", &api->cuFuncGetAttribute);
  need("cuFuncSetAttribute", &api->cuFuncSetAttribute);
  need("cuMemAlloc_v2", &api->cuMemAlloc);
  need("cuMemFree_v2", &api->cuMemFree);
  need("cuMemcpyHtoD_v2", &api->cuMemcpyHtoD);
  need("cuMemcpyDtoH_v2", &api->cuMemcpyDtoH);
  need("cuMemsetD32_v2", &api->cuMemsetD32);
  need("cuLaunchKernel", &api->cuLaunchKernel);
  need("cuEventCreate", &api->cuEventCreate);
  need("cuEventDestroy_v2", &api->cuEventDestroy);
  need("cuEventRecord", &api->cuEventRecord);
  need("cuEventSynchronize", &api->cuEventSynchronize);
  if (!Sym(lib, "cuEventElapsedTime_v2", &api->cuEventElapsedTime)) {
    need("cuEventElapsedTime", &api->cuEventElapsedTime);
  }
  // Optional: CudaGraph says so when one is missing.
  Sym(lib, "cuStreamCreate", &api->cuStreamCreate);
  Sym(lib, "cuStreamDestroy_v2", &api->cuStreamDestroy);
  Sym(lib, "cuStreamBeginCapture_v2", &api->cuStreamBeginCapture);
  Sym(lib, "cuStreamEndCapture", &api->cuStreamEndCapture);
  Sym(lib, "cuGraphInstantiateWithFlags", &api->cuGraphInstantiate);
  Sym(lib, "cuGraphLaunch", &api->cuGraphLaunch);
  Sym(lib, "cuGraphExecDestroy", &api->cuGraphExecDestroy);
  Sym(lib, "cuGraphDestroy", &api->cuGraphDestroy);
  if (missing) {
    dlclose(lib);
    return absl::FailedPreconditionError(absl::StrCat("the CUDA driver (libcuda.so.1) lacks '",
                                                      missing, "': the driver is too old"));
  }
  CUresult r = api->cuInit(0);
  if (r != kSuccess) {
    const char* s = "unknown error";
    api->cuGetErrorString(r, &s);
    dlclose(lib);
    return absl::FailedPreconditionError(
        absl::StrCat("no usable CUDA device: cuInit failed (", r, ": ", s, ")"));
  }
  return api;
}

}  // namespace

bool IsStickyCudaError(const absl::Status& s) {
  return absl::IsAborted(s) && s.GetPayload(kStickyPayload).has_value();
}

absl::StatusOr<CudaDriver*> CudaDriver::Get() {
  static absl::StatusOr<CudaDriver*>* driver = [] {
    auto api = LoadApi();
    if (!api.ok()) return new absl::StatusOr<CudaDriver*>(api.status());
    return new absl::StatusOr<CudaDriver*>(new CudaDriver(api->release()));
  }();
  return *driver;
}

absl::Status CudaDriver::Check(int result, const std::string& what) const {
  if (result == kSuccess) return absl::OkStatus();
  const char* name = "CUDA_ERROR_UNKNOWN";
  const char* text = "unknown error";
  api_->cuGetErrorName(result, &name);
  api_->cuGetErrorString(result, &text);
  std::string msg = absl::StrCat(what, ": ", name, " (", text, ")");
  if (IsSticky(result)) {
    absl::Status s = absl::AbortedError(
        msg + "; the CUDA context is unusable, the measuring process must be replaced");
    s.SetPayload(kStickyPayload, absl::Cord(name));
    return s;
  }
  if (result == 2) return absl::ResourceExhaustedError(msg);  // out of memory
  return absl::InternalError(msg);
}

absl::StatusOr<int> CudaDriver::DeviceCount() const {
  int n = 0;
  if (auto st = Check(api_->cuDeviceGetCount(&n), "cuDeviceGetCount"); !st.ok()) return st;
  return n;
}

std::string CudaDriver::Version() const {
  int v = 0;
  if (api_->cuDriverGetVersion(&v) != kSuccess) return "unknown";
  return absl::StrCat(v / 1000, ".", (v % 1000) / 10);
}

absl::StatusOr<DeviceInfo> CudaDriver::Describe(int ordinal) const {
  auto count = DeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal < 0 || ordinal >= *count) {
    return absl::OutOfRangeError(
        absl::StrCat("cuda device ", ordinal, " does not exist (", *count, " devices)"));
  }
  CUdevice dev;
  if (auto st = Check(api_->cuDeviceGet(&dev, ordinal), "cuDeviceGet"); !st.ok()) return st;
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {0};
  if (auto st = Check(api_->cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
      !st.ok()) {
    return st;
  }
  info.name = name;
  size_t mem = 0;
  if (auto st = Check(api_->cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem"); !st.ok()) return st;
  info.total_memory = static_cast<int64_t>(mem);
  std::map<int, int> a;
  for (int attr : {kMaxThreadsPerBlock, kMaxBlockX, kMaxBlockY, kMaxBlockZ, kMaxGridX, kMaxGridY,
                   kMaxGridZ, kMaxSharedPerBlock, kSmCount, kCcMajor, kCcMinor, kMaxSharedOptin,
                   kClockRate, kL2CacheSize}) {
    int v = 0;
    auto st = Check(api_->cuDeviceGetAttribute(&v, attr, dev),
                    absl::StrCat("cuDeviceGetAttribute(", attr, ")"));
    if (!st.ok()) return st;
    a[attr] = v;
  }
  info.cc_major = a[kCcMajor];
  info.cc_minor = a[kCcMinor];
  info.sm_count = a[kSmCount];
  info.max_shared_optin = a[kMaxSharedOptin];
  info.l2_bytes = a[kL2CacheSize];
  info.clock_khz = a[kClockRate];
  info.limits.max_threads_per_block = a[kMaxThreadsPerBlock];
  info.limits.max_block[0] = a[kMaxBlockX];
  info.limits.max_block[1] = a[kMaxBlockY];
  info.limits.max_block[2] = a[kMaxBlockZ];
  info.limits.max_grid[0] = a[kMaxGridX];
  info.limits.max_grid[1] = a[kMaxGridY];
  info.limits.max_grid[2] = a[kMaxGridZ];
  // Generated kernels use static shared memory, which is capped at the default limit.
  info.limits.max_shared_per_block = a[kMaxSharedPerBlock];
  info.limits.max_shared_optin = a[kMaxSharedOptin];
  return info;
}

// --- CudaContext ---

absl::StatusOr<std::unique_ptr<CudaContext>> CudaContext::Create(int ordinal) {
  auto d = CudaDriver::Get();
  if (!d.ok()) return d.status();
  auto count = (*d)->DeviceCount();
  if (!count.ok()) return count.status();
  if (ordinal < 0 || ordinal >= *count) {
    return absl::OutOfRangeError(
        absl::StrCat("cuda device ", ordinal, " does not exist (", *count, " devices)"));
  }
  const DriverApi& api = (*d)->api();
  CUdevice dev;
  if (auto st = (*d)->Check(api.cuDeviceGet(&dev, ordinal), "cuDeviceGet"); !st.ok()) return st;
  CUcontext ctx = nullptr;
  if (auto st = (*d)->Check(api.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      !st.ok()) {
    return st;
  }
  auto c = std::unique_ptr<CudaContext>(new CudaContext(*d, ordinal, ctx));
  if (auto st = c->MakeCurrent(); !st.ok()) return st;
  return c;
}

CudaContext::~CudaContext() {
  CUdevice dev;
  if (driver_->api().cuDeviceGet(&dev, ordinal_) == kSuccess) {
    driver_->api().cuDevicePrimaryCtxRelease(dev);
  }
}

absl::Status CudaContext::MakeCurrent() const {
  return driver_->Check(driver_->api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
}

absl::Status CudaContext::Synchronize() const {
  if (auto st = MakeCurrent(); !st.ok()) return st;
  return driver_->Check(driver_->api().cuCtxSynchronize(), "cuCtxSynchronize");
}

// --- DeviceBuffer ---

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(const CudaContext& ctx, int64_t bytes) {
  if (auto st = ctx.MakeCurrent(); !st.ok()) return st;
  DeviceBuffer b;
  b.ctx_ = &ctx;
  b.bytes_ = bytes;
  CUdeviceptr p = 0;
  auto st = ctx.driver().Check(
      ctx.driver().api().cuMemAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 4))),
      absl::StrCat("cuMemAlloc(", bytes, " bytes)"));
  if (!st.ok()) return st;
  b.ptr_ = p;
  return b;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    std::swap(ctx_, o.ctx_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ && ctx_ && ctx_->MakeCurrent().ok()) ctx_->driver().api().cuMemFree(ptr_);
}

absl::Status DeviceBuffer::CopyFromHost(const void* src, int64_t bytes) {
  if (bytes > bytes_) return absl::OutOfRangeError("copy larger than the device buffer");
  if (auto st = ctx_->MakeCurrent(); !st.ok()) return st;
  return ctx_->driver().Check(ctx_->driver().api().cuMemcpyHtoD(ptr_, src, bytes), "cuMemcpyHtoD");
}

absl::Status DeviceBuffer::CopyToHost(void* dst, int64_t bytes) const {
  if (bytes > bytes_) return absl::OutOfRangeError("copy larger than the device buffer");
  if (auto st = ctx_->MakeCurrent(); !st.ok()) return st;
  return ctx_->driver().Check(ctx_->driver().api().cuMemcpyDtoH(dst, ptr_, bytes), "cuMemcpyDtoH");
}

absl::Status DeviceBuffer::Fill32(uint32_t value) {
  if (auto st = ctx_->MakeCurrent(); !st.ok()) return st;
  return ctx_->driver().Check(ctx_->driver().api().cuMemsetD32(ptr_, value, bytes_ / 4),
                              "cuMemsetD32");
}

// --- CudaProgram ---

absl::StatusOr<std::unique_ptr<CudaProgram>> CudaProgram::Load(const CudaContext& ctx,
                                                               const std::string& image,
                                                               LaunchPlan plan) {
  const CudaDriver& d = ctx.driver();
  auto info = d.Describe(ctx.ordinal());
  if (!info.ok()) return info.status();
  if (auto st = CheckLaunchLimits(plan, info->limits); !st.ok()) return st;
  if (auto st = ctx.MakeCurrent(); !st.ok()) return st;
  auto p = std::unique_ptr<CudaProgram>(new CudaProgram(ctx, std::move(plan)));
  CUmodule m = nullptr;
  if (auto st = d.Check(d.api().cuModuleLoadData(&m, image.c_str()), "cuModuleLoadData");
      !st.ok()) {
    return st;
  }
  p->module_ = m;
  for (const KernelLaunch& k : p->plan_.kernels) {
    CUfunction fn = nullptr;
    auto st = d.Check(d.api().cuModuleGetFunction(&fn, m, k.name.c_str()),
                      "cuModuleGetFunction('" + k.name + "')");
    if (!st.ok()) return st;
    // Dynamic shared memory past the default 48 KiB is an opt-in per function
    // (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8).
    if (k.dynamic_shared_bytes > 48 * 1024) {
      constexpr int kMaxDynamicSharedSizeBytes = 8;
      st = d.Check(d.api().cuFuncSetAttribute(fn, kMaxDynamicSharedSizeBytes,
                                              static_cast<int>(k.dynamic_shared_bytes)),
                   "cuFuncSetAttribute('" + k.name + "', dynamic shared memory)");
      if (!st.ok()) return st;
    }
    p->functions_.push_back(fn);
  }
  for (const TempBuffer& t : p->plan_.temporaries) {
    auto b = DeviceBuffer::Allocate(ctx, t.bytes);
    if (!b.ok()) return b.status();
    p->temps_.push_back(std::move(*b));
  }
  return p;
}

absl::StatusOr<std::vector<KernelResources>> CudaProgram::Resources() const {
  // CUfunction_attribute values of cuda.h.
  constexpr int kSharedSizeBytes = 1, kLocalSizeBytes = 3, kNumRegs = 4;
  const CudaDriver& d = ctx_.driver();
  std::vector<KernelResources> out;
  for (size_t i = 0; i < plan_.kernels.size(); ++i) {
    KernelResources r;
    r.name = plan_.kernels[i].name;
    int regs = 0, shared = 0, local = 0;
    for (auto [attr, value] : {std::pair{kNumRegs, &regs}, std::pair{kSharedSizeBytes, &shared},
                               std::pair{kLocalSizeBytes, &local}}) {
      if (auto st = d.Check(d.api().cuFuncGetAttribute(value, attr, functions_[i]),
                            "cuFuncGetAttribute('" + r.name + "')");
          !st.ok()) {
        return st;
      }
    }
    r.registers = regs;
    r.shared_bytes = shared;
    r.stack_frame = local;
    out.push_back(std::move(r));
  }
  return out;
}

CudaProgram::~CudaProgram() {
  temps_.clear();
  if (module_ && ctx_.MakeCurrent().ok()) ctx_.driver().api().cuModuleUnload(module_);
}

absl::Status CudaProgram::Launch(const std::vector<uint64_t>& args, void* stream) {
  if (args.size() != plan_.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("cuda program '", plan_.name, "' takes ",
                                                   plan_.args.size(), " arguments, got ",
                                                   args.size()));
  }
  if (auto st = ctx_.MakeCurrent(); !st.ok()) return st;
  std::map<std::string, uint64_t> by_name;
  for (size_t i = 0; i < args.size(); ++i) by_name[plan_.args[i]] = args[i];
  for (size_t i = 0; i < temps_.size(); ++i) by_name[plan_.temporaries[i].name] = temps_[i].ptr();
  const CudaDriver& d = ctx_.driver();
  for (size_t i = 0; i < plan_.kernels.size(); ++i) {
    const KernelLaunch& k = plan_.kernels[i];
    std::vector<CUdeviceptr> ptrs;
    for (const std::string& a : k.args) ptrs.push_back(by_name.at(a));
    std::vector<void*> params;
    for (CUdeviceptr& p : ptrs) params.push_back(&p);
    auto st = d.Check(
        d.api().cuLaunchKernel(
            functions_[i], static_cast<unsigned>(k.grid[0]), static_cast<unsigned>(k.grid[1]),
            static_cast<unsigned>(k.grid[2]), static_cast<unsigned>(k.block[0]),
            static_cast<unsigned>(k.block[1]), static_cast<unsigned>(k.block[2]),
            static_cast<unsigned>(k.dynamic_shared_bytes), stream, params.data(), nullptr),
        "cuLaunchKernel('" + k.name + "')");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status CudaProgram::Run(const std::vector<uint64_t>& args) {
  if (auto st = Launch(args); !st.ok()) return st;
  return ctx_.Synchronize();
}

// --- CudaGraph ---

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Capture(
    const CudaContext& ctx, const std::function<absl::Status(void* stream)>& launches) {
  const CudaDriver& d = ctx.driver();
  const DriverApi& a = d.api();
  if (!a.cuStreamCreate || !a.cuStreamDestroy || !a.cuStreamBeginCapture || !a.cuStreamEndCapture ||
      !a.cuGraphInstantiate || !a.cuGraphLaunch || !a.cuGraphExecDestroy || !a.cuGraphDestroy) {
    return absl::FailedPreconditionError("this CUDA driver has no graph API");
  }
  if (auto st = ctx.MakeCurrent(); !st.ok()) return st;
  auto g = std::unique_ptr<CudaGraph>(new CudaGraph(ctx));
  // Flags 0: a blocking stream, ordered with the legacy default stream.
  if (auto st = d.Check(a.cuStreamCreate(&g->stream_, 0), "cuStreamCreate"); !st.ok()) return st;
  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL (1): other threads' CUDA calls stay legal.
  if (auto st = d.Check(a.cuStreamBeginCapture(g->stream_, 1), "cuStreamBeginCapture"); !st.ok()) {
    return st;
  }
  absl::Status launched = launches(g->stream_);
  absl::Status ended = d.Check(a.cuStreamEndCapture(g->stream_, &g->graph_), "cuStreamEndCapture");
  if (!launched.ok()) return launched;
  if (!ended.ok()) return ended;
  if (auto st = d.Check(a.cuGraphInstantiate(&g->exec_, g->graph_, 0), "cuGraphInstantiate");
      !st.ok()) {
    return st;
  }
  return g;
}

CudaGraph::~CudaGraph() {
  if (ctx_.MakeCurrent().ok()) {
    const DriverApi& a = ctx_.driver().api();
    if (exec_) a.cuGraphExecDestroy(exec_);
    if (graph_) a.cuGraphDestroy(graph_);
    if (stream_) a.cuStreamDestroy(stream_);
  }
}

absl::Status CudaGraph::Launch() {
  if (auto st = ctx_.MakeCurrent(); !st.ok()) return st;
  const CudaDriver& d = ctx_.driver();
  return d.Check(d.api().cuGraphLaunch(exec_, stream_), "cuGraphLaunch");
}

// --- EventTimer ---

absl::StatusOr<std::unique_ptr<EventTimer>> EventTimer::Create(const CudaContext& ctx) {
  if (auto st = ctx.MakeCurrent(); !st.ok()) return st;
  const CudaDriver& d = ctx.driver();
  auto t = std::unique_ptr<EventTimer>(new EventTimer(ctx));
  CUevent start = nullptr, stop = nullptr;
  if (auto st = d.Check(d.api().cuEventCreate(&start, 0), "cuEventCreate"); !st.ok()) return st;
  t->start_ = start;
  if (auto st = d.Check(d.api().cuEventCreate(&stop, 0), "cuEventCreate"); !st.ok()) return st;
  t->stop_ = stop;
  return t;
}

EventTimer::~EventTimer() {
  const CudaDriver& d = ctx_.driver();
  if (start_) d.api().cuEventDestroy(start_);
  if (stop_) d.api().cuEventDestroy(stop_);
}

absl::Status EventTimer::Start() {
  if (auto st = ctx_.MakeCurrent(); !st.ok()) return st;
  const CudaDriver& d = ctx_.driver();
  return d.Check(d.api().cuEventRecord(start_, nullptr), "cuEventRecord");
}

absl::StatusOr<double> EventTimer::Stop() {
  const CudaDriver& d = ctx_.driver();
  if (auto st = d.Check(d.api().cuEventRecord(stop_, nullptr), "cuEventRecord"); !st.ok()) {
    return st;
  }
  if (auto st = d.Check(d.api().cuEventSynchronize(stop_), "cuEventSynchronize"); !st.ok()) {
    return st;
  }
  float t = 0;
  if (auto st = d.Check(d.api().cuEventElapsedTime(&t, start_, stop_), "cuEventElapsedTime");
      !st.ok()) {
    return st;
  }
  return static_cast<double>(t);
}

absl::StatusOr<double> CudaProgram::TimeOnce(const std::vector<uint64_t>& args,
                                             DeviceBuffer* flush) {
  auto timer = EventTimer::Create(ctx_);
  if (!timer.ok()) return timer.status();
  if (flush) {
    // A new pattern each time, so that no layer can skip the write.
    static uint32_t pattern = 0;
    if (auto st = flush->Fill32(++pattern); !st.ok()) return st;
  }
  if (auto st = (*timer)->Start(); !st.ok()) return st;
  if (auto st = Launch(args); !st.ok()) return st;
  return (*timer)->Stop();
}

absl::StatusOr<std::vector<double>> CudaProgram::Time(const std::vector<uint64_t>& args,
                                                      int repeats, DeviceBuffer* flush) {
  if (auto st = Run(args); !st.ok()) return st;  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    auto t = TimeOnce(args, flush);
    if (!t.ok()) return t.status();
    ms.push_back(*t);
  }
  return ms;
}

}  // namespace lathe::codegen::cuda
