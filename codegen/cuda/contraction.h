// \file
// Contractions as GEMM kernels: a reduction stage whose body is a sum of products of two
// operands, one indexed by a set of the output's axes (the GEMM's rows, M) and the other by
// another set (its columns, N), the reduce axes flattened into K, the axes both read being a
// batch (the grid's z). A matmul is one (rows i, columns j), and so is a convolution computed
// as an implicit GEMM: in NCHW the weights are indexed by the output channels and the
// (padded, strided) input by the pixels n*oh*ow, the reduction runs over channels x window.
// Paddings inlined into the reduction are gathered with it; an elementwise output stage that
// reads the reduction at its own indices (bias, activation) is applied in the epilogue.
//
// A stage marked by Schedule::Tensorize with one of the templates below is generated as one
// kernel of that shape: block tiles of BM x BN outputs, the k-tiles of both operands (the
// gathered input tile of a convolution) staged in shared memory by all threads of the block,
// stored k-major (an optional 6th parameter 1: pipelined, the next k-tile loaded into
// registers while this one is computed), then
// - "contraction_fma": every thread a TM x TN register tile of fp32 FMAs (params
//   {BM, BN, BK, TM, TN}; BM/TM * BN/TN threads);
// - "contraction_mma_tf32": every warp a (BM/WM) x (BN/WN) tile of m16n8k8 TF32 tensor-core
//   MMAs (mma.sync, fp32 accumulation; the operands rounded to TF32 as they are staged:
//   cvt.rna.tf32.f32) (params {BM, BN, BK, WM, WN}; 32*WM*WN threads; BK a multiple of 8,
//   BM/WM of 16, BN/WN of 8).
// The generated text calls lathe_mma_m16n8k8_tf32 / lathe_cvt_tf32, defined in it as inline
// PTX for NVRTC (sm_80 and later) and by the GPU emulator's platform (gpuemu/platform.h) for
// the emulator.
//
// The pipelined templates (params {BM, BN, BK, x, y, STAGES}, STAGES in [2, 8]) copy both
// operands' k-tiles global -> shared with cp.async (sm_80 and later) into a ring of STAGES
// buffers in dynamic shared memory, STAGES - 1 k-tiles in flight while one is computed, one
// barrier per k-tile. An operand must be a read of an argument, or one guarded by an inlined
// padding (zero-filled where the guard fails); it is copied 16 bytes at a time where 4
// consecutive elements along its fast dimension are contiguous and aligned (a GEMM's rows,
// a convolution's weights), else 4 bytes at a time (a gathered convolution input).
// - "contraction_mma_tf32_async": warps of m16n8k8 TF32 MMAs as above (BK a multiple of 8),
//   fragments read from padded tiles without bank conflicts, rounded with cvt.rna.tf32 as
//   they are read, double-buffered in registers across the k-steps of a tile;
// - "contraction_fma_async": TM x TN fp32 register tiles read as float4s (BM, BN, BK, TM
//   and TN multiples of 4).
// An optional 7th parameter SPLITS > 1 splits K (few outputs of a long reduction: a grid of
// batches x SPLITS in z, each split's partial sums in a temporary of the plan, then a second
// kernel `<name>_k1` sums the splits in a fixed order and applies the epilogue).
#ifndef LATHE_CODEGEN_CUDA_CONTRACTION_H_
#define LATHE_CODEGEN_CUDA_CONTRACTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "ir/schedule.h"

namespace lathe::codegen::cuda {

inline constexpr char kContractionFma[] = "contraction_fma";
inline constexpr char kContractionMmaTf32[] = "contraction_mma_tf32";
inline constexpr char kContractionFmaAsync[] = "contraction_fma_async";
inline constexpr char kContractionMmaTf32Async[] = "contraction_mma_tf32_async";

// The GEMM view of a contraction stage.
struct ContractionShape {
  std::string stage;     // the reduction
  std::string epilogue;  // the elementwise output stage applied to it, or empty
  // Spatial axes of the reduction (positions) in each role, outermost first.
  std::vector<int> rows, cols, batch;
  int64_t m = 1, n = 1, k = 1, batches = 1;
  // The operand read by the rows (A) and the columns (B); their product is the body.
  ir::Expr a, b;
};

// The GEMM view of `stage` in `sch` (paddings inlined or not: a root padding stage is refused),
// or InvalidArgument saying why the stage is no contraction: not a sum of a product, an operand
// read by both the rows and the columns of another (a depthwise convolution's channels are a
// batch axis, leaving no rows), no row or no column axis, other stages than an elementwise
// output after it.
absl::StatusOr<ContractionShape> MatchContraction(const ir::Schedule& sch,
                                                  const std::string& stage);

// True for a template name of this file.
bool IsContractionTemplate(const std::string& name);

// True for the TF32 tensor-core templates (contraction_mma_tf32, contraction_mma_tf32_async).
bool IsTf32ContractionTemplate(const std::string& name);

// Whether the pipelined templates can copy both operands of `c` (a stage of `sch`) with
// cp.async; InvalidArgument naming the operand that is no (guarded) read of an argument.
absl::Status CheckAsyncOperands(const ir::Schedule& sch, const ContractionShape& c);

// Checks `params` of template `name` (see above); InvalidArgument naming the violated rule.
absl::Status CheckContractionParams(const std::string& name, const std::vector<int64_t>& params);

// The kernel of a schedule with a tensorized contraction stage, as GenerateCuda would name and
// plan it: the kernel `<name>_k0`, the workload's arguments in order.
absl::StatusOr<CudaSource> GenerateContraction(const ir::Schedule& sch, const std::string& name);

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_CONTRACTION_H_
