// \file
// One-call builds for `lathe build --target cuda:sm_XX --emit cuda|ptx` and for workers:
// schedule -> lowered function -> CUDA C (with its launch plan) -> PTX or CUBIN.
#ifndef LATHE_CODEGEN_CUDA_CUDA_BUILD_H_
#define LATHE_CODEGEN_CUDA_CUDA_BUILD_H_

#include <string>

#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "ir/schedule.h"

namespace lathe::codegen::cuda {

// Lowers `sch` and generates CUDA C whose kernels are named `<name>_k<i>`. Fails with the
// lowering's or the generator's status.
absl::StatusOr<CudaSource> BuildCudaSource(const ir::Schedule& sch, const std::string& name);

// The CUDA C source text as `lathe build --emit cuda` writes it: the launch plan as a comment
// header, then the source.
absl::StatusOr<std::string> BuildCudaText(const ir::Schedule& sch, const std::string& name);

// PTX for `arch` ("sm_80"), with the launch plan as a comment header.
absl::StatusOr<std::string> BuildPtx(const ir::Schedule& sch, const std::string& name,
                                     const std::string& arch);

// The architecture of a `cuda:sm_XX` target ("sm_80"); InvalidArgument for other targets
// (`cuda`, `cuda:N` name devices, which need a driver to resolve).
absl::StatusOr<std::string> ArchOfTarget(const std::string& target);

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_CUDA_BUILD_H_
