// \file
// Fused epilogues: the elementwise chain applied to each output element of a matmul, a
// convolution or an elementwise kernel, written in the `epilogue` key of a workload spec as
// steps joined by '_' and applied left to right to the value v:
//
//   tensor steps   bias   v + bias[channel]        scale  v * scale[channel]
//                  shift  v + shift[channel] (a second per-channel add, e.g. the shift of an
//                         affine after an activation: "bias_hswish_scale_shift")
//                  res    v + res[same index as the output] (e.g. a residual connection)
//                  resupFY:FX  v + resup[n, c, y / FY, x / FX, ...]: a residual at a coarser
//                         resolution, upsampled by nearest neighbour by integer factors on
//                         dimensions 2 and 3 (the H and W of NCHW or NCHW{b}c): a feature
//                         pyramid's top-down add. Elementwise kernels (ewise) of rank 4 or
//                         more only.
//   unary steps    relu sigmoid tanh exp log sqrt abs neg recip erf
//                  hswish (v * clip(v + 3, 0, 6) / 6)   swish (v * sigmoid(v))
//                  gelu   (v * (1 + erf(v / sqrt 2)) / 2)
//   with constants clipLO:HI  hsigALPHA:BETA (clip(alpha v + beta, 0, 1))  lreluALPHA
//                  mulC addC divC (v / C) rsubC (C - v) rdivC (C / v) powC maxC minC
//
// e.g. "bias_relu", "bias_clip0:6", "bias_hswish_res", "mul0.125". "none" is the empty chain.
// Constants are float32: the canonical form prints them with %.9g, so a spec keys the
// database the same however its numbers were spelled. Each tensor step may appear at most
// once; the workload's tensors hold them in the order the steps appear (after the main
// inputs, before the output).
#ifndef LATHE_IR_EPILOGUE_H_
#define LATHE_IR_EPILOGUE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ir/expr.h"

namespace lathe::ir {

enum class StepKind : uint8_t {
  kBias,
  kScale,
  kRes,
  kRelu,
  kSigmoid,
  kTanh,
  kExp,
  kLog,
  kSqrt,
  kAbs,
  kNeg,
  kRecip,
  kErf,
  kHardSwish,
  kSwish,
  kGelu,
  kClip,
  kHardSigmoid,
  kLeakyRelu,
  kMul,
  kAdd,
  kDiv,
  kRsub,
  kRdiv,
  kPow,
  kMax,
  kMin,
  kShift,
  kResUp,
};

struct EpilogueStep {
  StepKind kind = StepKind::kRelu;
  std::vector<float> args;  // the step's constants (clip: lo, hi; hsig: alpha, beta; ...)

  bool operator==(const EpilogueStep&) const = default;
};

// True for bias, scale, shift, res and resup: steps that read a tensor argument.
bool IsTensorStep(StepKind kind);
// The step's name in the spec ("bias", "clip", ...).
const char* StepName(StepKind kind);

struct EpilogueExpr {
  std::vector<EpilogueStep> steps;

  bool empty() const { return steps.empty(); }
  // The canonical text: "none" when empty.
  std::string ToString() const;
  // The tensor steps in order of appearance (the order of their workload arguments).
  std::vector<StepKind> TensorSteps() const;
  bool Has(StepKind kind) const;
  // Floating-point operations per output element (a guide for FLOP counts).
  double FlopsPerElement() const;
  // Appends a step (for builders such as the model compiler).
  EpilogueExpr& Then(StepKind kind, std::vector<float> args = {});

  bool operator==(const EpilogueExpr&) const = default;
};

// The shape of resup's tensor for an output of shape `out`: dimensions 2 and 3 divided by the
// step's factors (rounded up). `out` as it is where `e` has no resup step.
std::vector<int64_t> ResUpShape(const EpilogueExpr& e, const std::vector<int64_t>& out);
// The per-dimension factors by which resup's tensor is read (1s but on dimensions 2 and 3),
// for an output of rank `rank`; empty where `e` has no resup step.
std::vector<int64_t> ResUpFactors(const EpilogueExpr& e, size_t rank);

// Parses the text of an `epilogue` key. InvalidArgument naming the offending step for an
// unknown step, a malformed or missing constant, or a tensor step given twice.
absl::StatusOr<EpilogueExpr> ParseEpilogueExpr(absl::string_view text);

// The epilogue applied to `v` in the compute language; `read(kind)` returns the read of a
// tensor step's argument at the current element.
Expr ApplyEpilogue(const EpilogueExpr& e, Expr v, const std::function<Expr(StepKind)>& read);

// The same in double precision, for the reference implementations; `value(kind)` is the
// tensor step's argument at the current element.
double ApplyEpilogueRef(const EpilogueExpr& e, double v,
                        const std::function<double(StepKind)>& value);

// erf(x) in the compute language: a rational-exponential approximation (Abramowitz and
// Stegun 7.1.26, absolute error below 1.5e-7) built from exp, so that it vectorizes.
Expr ErfApprox(const Expr& x);

}  // namespace lathe::ir

#endif  // LATHE_IR_EPILOGUE_H_
