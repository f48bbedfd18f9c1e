#include "codegen/cuda/nvrtc.h"

#include <cctype>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef LATHE_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace lathe::codegen::cuda {

bool HaveNvrtc() {
#ifdef LATHE_HAVE_NVRTC
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::string> ParseArch(const std::string& arch) {
  std::string digits = arch;
  for (const char* prefix : {"sm_", "compute_"}) {
    if (digits.rfind(prefix, 0) == 0) digits = digits.substr(std::string(prefix).size());
  }
  // Two or three digits (sm_80, sm_100), then an optional feature suffix (sm_90a, sm_100f), as
  // ir::IsCudaArch accepts them.
  size_t n = 0;
  while (n < digits.size() && std::isdigit(static_cast<unsigned char>(digits[n]))) ++n;
  const bool ok =
      n >= 2 && n <= 3 &&
      (n == digits.size() || (n + 1 == digits.size() && (digits[n] == 'a' || digits[n] == 'f')));
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda architecture '", arch, "' is not of the form sm_XX (e.g. sm_80)"));
  }
  return digits;
}

#ifdef LATHE_HAVE_NVRTC
namespace {

// Owns one nvrtcProgram.
class Program {
 public:
  Program() = default;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() {
    if (prog_) nvrtcDestroyProgram(&prog_);
  }
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

absl::Status NvrtcError(const char* what, nvrtcResult r) {
  return absl::InternalError(absl::StrCat("nvrtc ", what, ": ", nvrtcGetErrorString(r)));
}

std::string Log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n <= 1) return "";
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(n - 1);
  return log;
}

// Compiles for `--gpu-architecture=<prefix><digits>` and returns PTX or CUBIN; with `log`,
// ptxas reports what each kernel uses there.
absl::StatusOr<std::string> Compile(const std::string& source, const std::string& arch, bool cubin,
                                    std::string* log = nullptr) {
  auto digits = ParseArch(arch);
  if (!digits.ok()) return digits.status();
  std::string target = absl::StrCat(cubin ? "sm_" : "compute_", *digits);
  std::string gpu = "--gpu-architecture=" + target;
  std::vector<const char*> opts = {gpu.c_str(), "-default-device", "--std=c++17",
                                   "--extra-device-vectorization"};
  if (log) opts.push_back("--ptxas-options=-v");
  Program prog;
  nvrtcResult r =
      nvrtcCreateProgram(prog.out(), source.c_str(), "lathe_kernel.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) return NvrtcError("create program", r);
  r = nvrtcCompileProgram(prog.get(), static_cast<int>(opts.size()), opts.data());
  if (r != NVRTC_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat("nvrtc compilation for ", target, " failed: ",
                                                   nvrtcGetErrorString(r), "\n", Log(prog.get())));
  }
  size_t n = 0;
  std::string out;
  if (cubin) {
    if ((r = nvrtcGetCUBINSize(prog.get(), &n)) != NVRTC_SUCCESS)
      return NvrtcError("cubin size", r);
    out.resize(n);
    if ((r = nvrtcGetCUBIN(prog.get(), out.data())) != NVRTC_SUCCESS) return NvrtcError("cubin", r);
    if (log) *log = Log(prog.get());
  } else {
    if ((r = nvrtcGetPTXSize(prog.get(), &n)) != NVRTC_SUCCESS) return NvrtcError("ptx size", r);
    out.resize(n);
    if ((r = nvrtcGetPTX(prog.get(), out.data())) != NVRTC_SUCCESS) return NvrtcError("ptx", r);
    if (!out.empty() && out.back() == '\0') out.pop_back();
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> CompileToPtx(const std::string& source, const std::string& arch) {
  return Compile(source, arch, /*cubin=*/false);
}

absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch) {
  return Compile(source, arch, /*cubin=*/true);
}

absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch,
                                           std::string* ptxas_report) {
  return Compile(source, arch, /*cubin=*/true, ptxas_report);
}

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return absl::StrCat(major, ".", minor);
}

#else  // !LATHE_HAVE_NVRTC

namespace {
absl::Status NoNvrtc() {
  return absl::UnimplementedError(
      "cuda compilation is unavailable: this build of lathe has no NVRTC (install the CUDA "
      "toolkit and reconfigure)");
}
}  // namespace

absl::StatusOr<std::string> CompileToPtx(const std::string&, const std::string&) {
  return NoNvrtc();
}
absl::StatusOr<std::string> CompileToCubin(const std::string&, const std::string&) {
  return NoNvrtc();
}
absl::StatusOr<std::string> CompileToCubin(const std::string&, const std::string&, std::string*) {
  return NoNvrtc();
}
std::string NvrtcVersion() { return "none"; }

#endif  // LATHE_HAVE_NVRTC

}  // namespace lathe::codegen::cuda
