// \file
// Internal to the contraction templates (contraction.cc, contraction_async.cc): tensor-level
// expressions printed as CUDA C for a kernel template, and the index decomposition they share.
#ifndef LATHE_CODEGEN_CUDA_CONTRACTION_TEXT_H_
#define LATHE_CODEGEN_CUDA_CONTRACTION_TEXT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/contraction.h"
#include "ir/expr.h"
#include "ir/schedule.h"
#include "ir/workload.h"

namespace lathe::codegen::cuda::internal {

// Prints tensor-level expressions as CUDA C: variables by the names given, tensor reads as
// flat row-major accesses of the kernel parameters, `replace` (a read of the reduction in an
// epilogue) as the accumulator's value. The first failure is kept in status(); the text
// printed for a failed node is "0".
class Printer {
 public:
  Printer(const ir::Workload& w, std::map<const ir::ExprNode*, std::string> vars)
      : w_(w), vars_(std::move(vars)) {}
  void Replace(std::string tensor, std::string with) {
    replace_ = std::move(tensor);
    with_ = std::move(with);
  }
  absl::Status status() const { return status_; }

  std::string E(const ir::Expr& e);
  // The flat row-major index of a read of a placeholder (`e` a kTensorRead).
  std::string FlatIndex(const ir::Expr& e);
  // The kernel parameter of the workload's tensor `tensor` ("p<i>").
  std::string ParamName(const std::string& tensor) const;

 private:
  std::string Fail(const std::string& why);
  const ir::Workload& w_;
  std::map<const ir::ExprNode*, std::string> vars_;
  std::string replace_, with_;
  absl::Status status_;
};

// The C names of a contraction's variables: "s<a>" for the output's axes (and for the
// epilogue's, which index the same output), "r<r>" for the reduce axes in the order `korder`
// (outermost first), with their extents.
struct ContractionNames {
  std::map<const ir::ExprNode*, std::string> vars;
  std::vector<std::string> spatial, reduce;
  std::vector<int64_t> reduce_extents;
};
ContractionNames NameContraction(const ir::Schedule& sch, const ir::Tensor& t,
                                 const ContractionShape& c, const std::vector<size_t>& korder);

// The row-major flat index of the variables `names` over `shape` (C text).
std::string FlatIndexOf(const std::vector<std::string>& names, const std::vector<int64_t>& shape);

// The value stored for an output element whose sum is `acc`: the epilogue stage `epi` applied
// to it, or `acc` itself when there is none.
std::string EpilogueValue(Printer& pr, const ContractionShape& c, const ir::Stage* epi,
                          const std::string& acc);

// The elements of `v` at `axes`, in that order.
template <typename T>
std::vector<T> Pick(const std::vector<T>& v, const std::vector<int>& axes) {
  std::vector<T> out;
  for (int a : axes) out.push_back(v[a]);
  return out;
}

// Lines that set the variables `names` (extents `extents`, outermost first) from the flat
// index `flat` (row-major).
std::string Decompose(const std::string& indent, const std::string& flat,
                      const std::vector<std::string>& names, const std::vector<int64_t>& extents);

// The kernel of the pipelined templates (contraction_async.cc) for the tensorized stage `ts`
// of `sch`, its GEMM view `c` (parameters already checked).
absl::StatusOr<CudaSource> GenerateAsyncContraction(const ir::Schedule& sch, const ir::Stage& ts,
                                                    const ContractionShape& c,
                                                    const std::string& name);

// The tensor-core helpers (lathe_cvt_tf32, lathe_mma_m16n8k8_tf32) as inline PTX for NVRTC,
// once per translation unit; the emulator defines its own (gpuemu/platform.h).
extern const char kTensorCoreHelpers[];

// cp.async (lathe_cp_async16/4, lathe_cp_async_commit, lathe_cp_async_wait(n)) and
// LATHE_DYNAMIC_SHARED as inline PTX / extern __shared__ for NVRTC, once per translation unit.
extern const char kAsyncCopyHelpers[];

}  // namespace lathe::codegen::cuda::internal

#endif  // LATHE_CODEGEN_CUDA_CONTRACTION_TEXT_H_
