// \file
// CUDA C generation from a lowered program. The function body's top-level sequence (under the
// root allocations of global intermediates) is split into kernels, one per loop nest bound to
// blockIdx/threadIdx; the launch plan says how to run them: grid and block extents, arguments
// by buffer name, and the global temporaries the host allocates.
//
// The program is printed as Lower()'s GPU recipe leaves it (codegen/gpu_passes.h: 4-lane
// accesses and doubled shared tiles are made there). Mapping: a loop bound to blockIdx.* or
// threadIdx.* becomes that index (guarded when a threadIdx loop is shorter than the block, as
// for cooperative fetches); vthread, unrolled and vectorized loops become `#pragma unroll`
// loops; a serial loop of one iteration binds its variable; a 4-lane store or load at a unit
// Ramp is a float4 access (the recipe made them only where aligned), a 4-lane store at other
// indices of a float4 load stores its lanes one by one; a "shared" allocation becomes a
// `__shared__` array declared at kernel top, its producers fenced by `__syncthreads()` (for a
// pipelined loop: after its first fill and at the end of each iteration); "local" (and inner
// "global") allocations become per-thread arrays. Integer division and modulo are floor
// operations (helpers unless the operands are provably non-negative).
#ifndef LATHE_CODEGEN_CUDA_CUDA_CODEGEN_H_
#define LATHE_CODEGEN_CUDA_CUDA_CODEGEN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/stmt.h"

namespace lathe::codegen::cuda {

// CUDA C of a float constant (NaN and the infinities included).
std::string CudaFloatLiteral(double v);

// CUDA C of the nodes whose text depends only on their operands' text (`sub` prints an
// operand): + - *, comparisons, && || !, float min/max, select (?: evaluates only the chosen side,
// as Select requires) and calls of the compute language's math functions. nullopt for any other
// node, and for a call with no CUDA function. Shared by the lowered-program emitter and the kernel
// templates (contraction.cc), which differ in variables, memory accesses and index types.
std::optional<std::string> CudaOperatorText(const ir::Expr& e,
                                            const std::function<std::string(const ir::Expr&)>& sub);

// One kernel launch of a plan.
struct KernelLaunch {
  std::string name;              // the extern "C" symbol
  int64_t grid[3] = {1, 1, 1};   // blockIdx.{x,y,z} extents
  int64_t block[3] = {1, 1, 1};  // threadIdx.{x,y,z} extents
  int64_t shared_bytes = 0;      // static shared memory per block
  // Dynamic shared memory per block (the kernel templates' pipelines; extern __shared__),
  // passed at launch; over 48 KiB the program opts in per function.
  int64_t dynamic_shared_bytes = 0;
  std::vector<std::string> args;  // buffer names: function arguments or temporaries
  int64_t threads_per_block() const { return block[0] * block[1] * block[2]; }
};

// A global intermediate the host allocates before the kernels run.
struct TempBuffer {
  std::string name;
  int64_t bytes = 0;
};

// How to run one lowered function on a GPU: the kernels in order, on one stream.
struct LaunchPlan {
  std::string name;               // the lowered function
  std::vector<std::string> args;  // its arguments (the workload's tensors), in order
  std::vector<TempBuffer> temporaries;
  std::vector<KernelLaunch> kernels;
};

// A readable, stable listing of the plan (for tests and `lathe build` logs).
std::string ToText(const LaunchPlan& plan);

// Generated code. `source` = `prelude` + `kernels`; the prelude (helpers, constants) is the
// same for every function, so the kernels of several functions with distinct names may be
// compiled in one NVRTC program after a single prelude.
struct CudaSource {
  std::string prelude;
  std::string kernels;
  std::string source;
  LaunchPlan plan;
};

// The helpers every generated module starts with.
const std::string& CudaPrelude();

// Generates CUDA C for `f`. Fails with InvalidArgument (naming the loop, buffer or kernel)
// when the program cannot run on a GPU: a top-level nest bound to no GPU index, loops bound to
// one blockIdx tag with different extents, a tag bound inside a loop of the same tag, a shared
// buffer filled inside a threadIdx loop or under thread-dependent control flow, a root
// intermediate outside global memory, non-constant loop extents; Unimplemented for vector IR
// other than the 4-lane accesses above.
absl::StatusOr<CudaSource> GenerateCuda(const ir::LoweredFunc& f);

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_CUDA_CODEGEN_H_
