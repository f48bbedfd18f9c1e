// \file
// NVRTC: CUDA C source to PTX (for a virtual architecture compute_XX) or CUBIN (machine code
// for a real architecture sm_XX, which validates register allocation and resource limits
// without shelling out to ptxas). Without NVRTC at build time every function fails with
// Unimplemented.
//
// Thread-safety: NVRTC programs are independent; these functions may run concurrently.
#ifndef LATHE_CODEGEN_CUDA_NVRTC_H_
#define LATHE_CODEGEN_CUDA_NVRTC_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lathe::codegen::cuda {

// True when this build links NVRTC.
bool HaveNvrtc();

// The compute capability digits of "sm_80", "sm_90a", "compute_86" or "80" ("80", "90a").
// InvalidArgument for anything else.
absl::StatusOr<std::string> ParseArch(const std::string& arch);

// Compiles `source` to PTX for the virtual architecture of `arch` ("sm_80" -> compute_80).
// A compile error is InvalidArgument carrying NVRTC's log.
absl::StatusOr<std::string> CompileToPtx(const std::string& source, const std::string& arch);

// Compiles `source` to a CUBIN for the real architecture `arch` ("sm_80"): the bytes
// cuModuleLoadData accepts. A compile error is InvalidArgument carrying NVRTC's log.
absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch);

// The same, with ptxas's verbose report (what each kernel uses: registers, spills, shared
// memory) in `ptxas_report`.
absl::StatusOr<std::string> CompileToCubin(const std::string& source, const std::string& arch,
                                           std::string* ptxas_report);

// The NVRTC version as "major.minor", or "none".
std::string NvrtcVersion();

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_NVRTC_H_
