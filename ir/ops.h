// \file
// The operator library: every CONTRACT.md operator written in the compute language of
// ir/tensor.h (placeholders, `Compute` stages, Sum/MaxReduce over reduce axes), plus the
// typed parameters of each operator, extracted from a canonical WorkloadSpec.
//
// Stage and axis names are part of the interface: schedules and traces refer to them.
//
//   matmul        A[m,k], B[k,n], (bias[n]) -> C[m,n]
//                 "matmul"(i, j; reduce k) = sum A[i,k]*B[k,j]
//                 epilogue none: the reduction itself is named "C"; otherwise "C"(i, j) is
//                 the elementwise epilogue over "matmul".
//   batch_matmul  A[b,m,k], B[b,k,n], (bias[n]) -> C[b,m,n]
//                 "batch_matmul"(b, i, j; reduce k), epilogue "C"(b, i, j) as for matmul.
//   conv2d        nchw: X[n,c,h,w], W[k,c/g,r,s] -> Y[n,k,oh,ow]
//                 "pad"(n, c, h, w) only when pad > 0 (tag "pad", zero outside X);
//                 "conv2d"(n, k, y, x; reduce rc, ry, rx);
//                 nhwc: X[n,h,w,c], W[r,s,c/g,k] -> Y[n,oh,ow,k]
//                 "pad"(n, h, w, c); "conv2d"(n, y, x, k; reduce ry, rx, rc).
//                 Epilogue stage "Y" as for matmul (or the reduction is "Y").
//   pool2d        X[n,c,h,w] -> Y[n,c,oh,ow] (nhwc: X[n,h,w,c] -> Y[n,oh,ow,c])
//                 "pad" only when pad > 0 (-inf outside X for max, 0 for avg);
//                 "Y"(n, c, y, x; reduce ry, rx) (nhwc: n, y, x, c).
//                 max: the maximum over the in-bounds elements of the window (the spec
//                 parser guarantees pad < r and pad < s, so every window has one).
//                 avg: the sum over the window divided by r*s, padding counted as zeros
//                 (count_include_pad = true, as in TVM and PyTorch's default).
//   softmax       X[m,n] -> Y[m,n]
//                 "row_max"(i; reduce k) = max X[i,k]
//                 "exp_sum"(i; reduce k) = sum exp(X[i,k] - row_max[i])
//                 "Y"(i, j) = exp(X[i,j] - row_max[i]) / exp_sum[i]
//   layer_norm    X[m,n], gamma[n], beta[n] -> Y[m,n]
//                 "mean"(i; reduce k) = sum X[i,k] / n
//                 "var"(i; reduce k) = sum (X[i,k] - mean[i])^2 / n
//                 "Y"(i, j) = (X[i,j] - mean[i]) / sqrt(var[i] + eps) * gamma[j] + beta[j]
//
// Epilogue stages are tagged "elementwise", reductions "reduction", padding "pad".
#ifndef LATHE_IR_OPS_H_
#define LATHE_IR_OPS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/tensor.h"
#include "ir/workload.h"

namespace lathe::ir {

// The fused elementwise stage after a matmul or convolution.
enum class Epilogue : uint8_t { kNone, kBias, kRelu, kBiasRelu };

// "none", "bias", "relu", "bias_relu".
const char* EpilogueName(Epilogue e);
// Parses an epilogue name; InvalidArgument for anything else.
absl::StatusOr<Epilogue> ParseEpilogue(std::string_view name);
inline bool EpilogueHasBias(Epilogue e) { return e == Epilogue::kBias || e == Epilogue::kBiasRelu; }
inline bool EpilogueHasRelu(Epilogue e) { return e == Epilogue::kRelu || e == Epilogue::kBiasRelu; }

// matmul (batch == 0) and batch_matmul (batch >= 1).
struct MatmulParams {
  int64_t batch = 0;
  int64_t m = 1, n = 1, k = 1;
  Epilogue epilogue = Epilogue::kNone;
};

struct Conv2dParams {
  int64_t n = 1, c = 1, h = 1, w = 1, k = 1, r = 1, s = 1;
  int64_t stride = 1, pad = 0, dilation = 1, groups = 1;
  bool nhwc = false;
  Epilogue epilogue = Epilogue::kNone;

  // Output extents by the CONTRACT.md formula; may be <= 0 for impossible shapes.
  int64_t oh() const { return (h + 2 * pad - dilation * (r - 1) - 1) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - dilation * (s - 1) - 1) / stride + 1; }
};

struct Pool2dParams {
  int64_t n = 1, c = 1, h = 1, w = 1, r = 1, s = 1;
  int64_t stride = 1, pad = 0;
  bool max = true;  // false: average
  bool nhwc = false;

  int64_t oh() const { return (h + 2 * pad - r) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - s) / stride + 1; }
};

struct SoftmaxParams {
  int64_t m = 1, n = 1;
};

struct LayerNormParams {
  int64_t m = 1, n = 1;
  double eps = 1e-5;
};

// Typed parameters of a canonical spec (as returned by ParseWorkloadSpec). They fail with
// InvalidArgument when the spec is of another op or lacks a key; they do not re-validate
// shapes (ParseWorkloadSpec does).
absl::StatusOr<MatmulParams> GetMatmulParams(const WorkloadSpec& spec);  // both matmuls
absl::StatusOr<Conv2dParams> GetConv2dParams(const WorkloadSpec& spec);
absl::StatusOr<Pool2dParams> GetPool2dParams(const WorkloadSpec& spec);
absl::StatusOr<SoftmaxParams> GetSoftmaxParams(const WorkloadSpec& spec);
absl::StatusOr<LayerNormParams> GetLayerNormParams(const WorkloadSpec& spec);

// An operator instantiated at concrete shapes.
struct OpDefinition {
  std::vector<Tensor> args;     // inputs in CONTRACT.md order, then the output
  std::vector<Tensor> tensors;  // every tensor, producers before consumers
  double flops = 0;             // a multiply-add counts 2; exp, sqrt, max count 1
};

// Builders. Parameters must be valid (positive extents, divisible groups, positive output
// extents); the spec parser guarantees it for specs.
OpDefinition MatmulOp(const MatmulParams& p);
OpDefinition Conv2dOp(const Conv2dParams& p);
OpDefinition Pool2dOp(const Pool2dParams& p);
OpDefinition SoftmaxOp(const SoftmaxParams& p);
OpDefinition LayerNormOp(const LayerNormParams& p);

// Dispatches on spec.op; InvalidArgument for an unknown op or missing keys.
absl::StatusOr<OpDefinition> BuildOp(const WorkloadSpec& spec);

}  // namespace lathe::ir

#endif  // LATHE_IR_OPS_H_
