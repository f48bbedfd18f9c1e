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
//                 nchw{x}c (blocked; TVM's NCHWc): X[n,c/x,h,w,x], W[k/y,c/x,r,s,x,y] ->
//                 Y[n,k/y,oh,ow,y] with y = kblock (default x); "pad"(n, c, h, w, cv);
//                 "conv2d"(n, k, y, x, kv; reduce rc, ry, rx, rv): rc the input channel blocks,
//                 rv the channels within one. Depthwise (groups = c = k, y = x):
//                 W[k/y,r,s,y], reduce ry, rx only. Grouped (x divides c/g, y k/g):
//                 W[k/y,(c/g)/x,r,s,x,y], output block k reading input block
//                 (k / ((k/g)/y)) * ((c/g)/x) + rc. The epilogue's bias/scale read channel
//                 k*y + kv; a residual is blocked like Y.
//   pool2d        X[n,c,h,w] -> Y[n,c,oh,ow] (nhwc: X[n,h,w,c] -> Y[n,oh,ow,c];
//                 nchw{x}c: X[n,c/x,h,w,x] -> Y[n,c/x,oh,ow,x], "Y"(n, c, y, x, cv))
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
//   conv2d_transpose X[n,c,h,w], W[c,k/g,r,s] -> Y[n,k,oh,ow]
//                 "conv2d_transpose"(n, k, y, x; reduce rc, ry, rx): a gather of the
//                 scatter, the contributions selected where the stride divides the offset.
//   ewise         A (and B, broadcast; "binary" combines them) -> Y: one stage "Y".
//   transpose, slice, concat, resize: one injective stage "Y" over the output.
//   reduce        one reduction "Y" over the kept shape (reduced extents 1).
//
// Every op with an `epilogue` key (ir/epilogue.h) reads the epilogue's tensors (bias,
// scale, res) after its main inputs, in the order the steps name them.
// Epilogue stages are tagged "elementwise", reductions "reduction", padding "pad".
#ifndef LATHE_IR_OPS_H_
#define LATHE_IR_OPS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/epilogue.h"
#include "ir/tensor.h"
#include "ir/workload.h"

namespace lathe::ir {

// matmul (batch == 0) and batch_matmul (batch >= 1). A is [m,k] ([k,m] when transpose_a),
// B is [k,n] ([n,k] when transpose_b); in a batch_matmul, bcast names the operand that has no
// batch dimension (it is shared by every batch).
enum class Bcast : uint8_t { kNone, kA, kB };
struct MatmulParams {
  int64_t batch = 0;
  int64_t m = 1, n = 1, k = 1;
  bool transpose_a = false, transpose_b = false;
  Bcast bcast = Bcast::kNone;
  // B packed in column panels of `bpanel` columns, [n/bpanel][k][bpanel] (0: row-major [k][n]):
  // the layout a model compiler gives constant weights once, so that a tile's columns are
  // contiguous for every k. The output keeps its row-major memory, as [m][n/bpanel][bpanel].
  int64_t bpanel = 0;
  EpilogueExpr epilogue;
};

// The channel block of a layout: 0 for "nchw" and "nhwc", x for "nchw{x}c"; InvalidArgument
// naming the layout for anything else.
absl::StatusOr<int64_t> LayoutBlock(const std::string& layout);

// Strides and dilations per axis; pads per side (ONNX order: top, left, bottom, right).
struct Window2d {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  bool has_pad() const { return pad_t || pad_l || pad_b || pad_r; }
};

struct Conv2dParams : Window2d {
  int64_t n = 1, c = 1, h = 1, w = 1, k = 1, r = 1, s = 1;
  int64_t groups = 1;
  bool nhwc = false;
  // Blocked layout nchw{cblock}c (0: not blocked); output channels in blocks of kblock.
  int64_t cblock = 0, kblock = 0;
  // layout=nchw with a kblock: X plain NCHW, computed as one block of all c channels
  // (cblock = c), Y blocked nchw{kblock}c. A first layer reading a model's plain input
  // (3 channels) writes the blocked layout without a conversion pass over the input.
  bool plain_input = false;
  bool blocked() const { return cblock > 0; }
  bool depthwise() const { return groups > 1 && groups == c && groups == k; }
  // The input-channel block of blocked weights [k/kblock, (c/groups)/wblock, r, s, wblock,
  // kblock]: cblock, or a group's channels where one block of the input holds several whole
  // groups (a grouped convolution reading channels blocked around it in wider blocks).
  int64_t wblock() const {
    const int64_t cpg = c / groups;
    return groups > 1 && !depthwise() && cblock > cpg && cblock % cpg == 0 ? cpg : cblock;
  }
  EpilogueExpr epilogue;

  // Output extents by the CONTRACT.md formula; may be <= 0 for impossible shapes.
  int64_t oh() const { return (h + pad_t + pad_b - dilation_h * (r - 1) - 1) / stride_h + 1; }
  int64_t ow() const { return (w + pad_l + pad_r - dilation_w * (s - 1) - 1) / stride_w + 1; }
};

// A separable convolution (sepconv2d): a depthwise convolution (groups = c = k, the window,
// stride, padding and dilation of the spec, epilogue dw_epilogue) whose output only a 1x1
// convolution to k channels reads (epilogue `epilogue`), in a blocked layout nchw{x}c (the
// 1x1's output in blocks of kblock, default x). One op so that a schedule can compute the
// depthwise part per row tile of the 1x1 and keep it in the cache: in a model the
// intermediate map otherwise goes to memory and back (PP-OCR det's 16 channels at 320x320:
// 6.5 MB each way). Arguments: X[n,c/x,h,w,x], DW[c/x,r,s,x], the dw epilogue's tensors
// (dw_bias, dw_scale, dw_shift: [c]), W[k/y,c/x,1,1,x,y], the epilogue's tensors,
// Y[n,k/y,oh,ow,y]. Stages: "pad" (when padded), "dwconv" (the depthwise reduction), "dw"
// (its epilogue, present even when empty), then the 1x1's "conv2d" and "Y" as conv2d's.
// The keys a sepconv2d spec shares with its depthwise part's conv2d spec.
inline constexpr const char* kSepConvDepthwiseKeys[] = {"n", "c",      "h",   "w",        "r",
                                                        "s", "stride", "pad", "dilation", "layout"};
struct SepConv2dParams {
  Conv2dParams dw;  // the depthwise part: k = c = groups, kblock = cblock
  Conv2dParams pw;  // the 1x1 part: c = dw.k, h x w = dw's output, stride 1, no padding
};

// The transposed convolution (ONNX ConvTranspose): X[n,c,h,w], W[c,k/groups,r,s] ->
// Y[n,k,oh,ow]; input pixel (y, x) scatters into output (y*stride - pad + ry*dilation, ...).
struct ConvTransposeParams : Window2d {
  int64_t n = 1, c = 1, h = 1, w = 1, k = 1, r = 1, s = 1;
  int64_t groups = 1;
  int64_t output_padding_h = 0, output_padding_w = 0;
  EpilogueExpr epilogue;

  int64_t oh() const {
    return (h - 1) * stride_h - pad_t - pad_b + dilation_h * (r - 1) + output_padding_h + 1;
  }
  int64_t ow() const {
    return (w - 1) * stride_w - pad_l - pad_r + dilation_w * (s - 1) + output_padding_w + 1;
  }
};

struct Pool2dParams : Window2d {
  int64_t n = 1, c = 1, h = 1, w = 1, r = 1, s = 1;
  bool max = true;  // false: average
  bool nhwc = false;
  int64_t block = 0;  // blocked layout nchw{block}c (0: not blocked)
  // avg: divide by the window size (true) or by the in-bounds elements only (false).
  bool count_include_pad = true;

  int64_t oh() const { return (h + pad_t + pad_b - r) / stride_h + 1; }
  int64_t ow() const { return (w + pad_l + pad_r - s) / stride_w + 1; }
};

// Softmax over the middle axis of X[m,n,inner] (inner == 1: the last axis of X[m,n]).
struct SoftmaxParams {
  int64_t m = 1, n = 1, inner = 1;
};

struct LayerNormParams {
  int64_t m = 1, n = 1;
  double eps = 1e-5;
};

enum class BinaryOp : uint8_t { kNone, kAdd, kSub, kMul, kDiv, kMax, kMin, kPow };
const char* BinaryOpName(BinaryOp op);

// An elementwise kernel: A (and B, broadcast against A by numpy rules, combined by `binary`),
// then the epilogue. bias/scale steps read their tensor at axis 1 (axis 0 for rank 1).
struct EwiseParams {
  std::vector<int64_t> a, b;  // b empty: unary
  // Per dimension of b (as many as b has): b's element i is repeated upsample[i] times along
  // it, a nearest-neighbour upsampling (ONNX Resize, nearest, integer scales) read in place:
  // b is read at index / upsample[i]. Empty: no upsampling.
  std::vector<int64_t> upsample;
  // b's shape as the operation sees it: b * upsample.
  std::vector<int64_t> b_upsampled() const;
  BinaryOp binary = BinaryOp::kNone;
  EpilogueExpr epilogue;
  std::vector<int64_t> out_shape() const;  // the broadcast of a and b
};

// Y = X transposed: Y's dimension i is X's dimension perm[i].
struct TransposeParams {
  std::vector<int64_t> shape, perm;
};

// Y[i] = X[begin + i * step] for i in [0, size) per dimension (steps positive).
struct SliceParams {
  std::vector<int64_t> shape, begin, size, step;
};

// Y = the inputs joined along `axis`.
struct ConcatParams {
  std::vector<std::vector<int64_t>> inputs;
  int64_t axis = 0;
  std::vector<int64_t> out_shape() const;
};

// ONNX Resize of the two spatial dimensions of X[n,c,h,w] to [n,c,oh,ow] (blocked layout
// nchw{block}c: X[n,c/block,h,w,block] -> Y[n,c/block,oh,ow,block]).
enum class ResizeCoord : uint8_t { kHalfPixel, kAsymmetric, kAlignCorners, kPytorchHalfPixel };
enum class NearestMode : uint8_t { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
struct ResizeParams {
  int64_t n = 1, c = 1, h = 1, w = 1, oh = 1, ow = 1;
  int64_t block = 0;    // blocked layout nchw{block}c (0: nchw)
  bool linear = false;  // else nearest
  ResizeCoord coord = ResizeCoord::kHalfPixel;
  NearestMode nearest = NearestMode::kRoundPreferFloor;
};

// Y = X reduced over `axes` (sorted, distinct); Y keeps X's rank with those extents 1.
enum class ReduceKind : uint8_t { kMean, kSum, kMax, kMin };
struct ReduceParams {
  std::vector<int64_t> shape, axes;
  ReduceKind kind = ReduceKind::kMean;
  std::vector<int64_t> out_shape() const;
};

// Winograd convolution F(m x m, 3 x 3), stride 1, in a blocked layout nchw{block}c, as three
// kernels (ir/ops_winograd.cc): winograd_in (X -> V: the input's tiles transformed), a
// batch_matmul of b = (m+2)^2 (V x the transformed weights of WinogradWeights -> M), and
// winograd_out (M -> Y: transformed back, then the epilogue). winograd_in: c, h, w are the
// input's channels and extents, the pads those of the convolution; winograd_out: c is the
// output channels (key k), h and w the output's extents (keys oh, ow).
struct WinogradParams : Window2d {
  bool output_side = false;  // winograd_out
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t m = 4;  // output tile: 2 or 4
  int64_t block = 0;
  EpilogueExpr epilogue;  // winograd_out

  int64_t t() const { return m + 2; }
  // The output's extents (winograd_in: of the convolution it opens).
  int64_t oh() const { return output_side ? h : h + pad_t + pad_b - 2; }
  int64_t ow() const { return output_side ? w : w + pad_l + pad_r - 2; }
  int64_t tiles() const { return n * (oh() / m) * (ow() / m); }
};

// Typed parameters of a canonical spec (as returned by ParseWorkloadSpec). They fail with
// InvalidArgument when the spec is of another op or lacks a key; they do not re-validate
// shapes (ParseWorkloadSpec does).
absl::StatusOr<MatmulParams> GetMatmulParams(const WorkloadSpec& spec);  // both matmuls
absl::StatusOr<Conv2dParams> GetConv2dParams(const WorkloadSpec& spec);
// The two convolutions of a sepconv2d spec (each as GetConv2dParams reads a conv2d spec).
absl::StatusOr<SepConv2dParams> GetSepConv2dParams(const WorkloadSpec& spec);
absl::StatusOr<Pool2dParams> GetPool2dParams(const WorkloadSpec& spec);
absl::StatusOr<SoftmaxParams> GetSoftmaxParams(const WorkloadSpec& spec);
absl::StatusOr<LayerNormParams> GetLayerNormParams(const WorkloadSpec& spec);
absl::StatusOr<ConvTransposeParams> GetConvTransposeParams(const WorkloadSpec& spec);
absl::StatusOr<EwiseParams> GetEwiseParams(const WorkloadSpec& spec);
absl::StatusOr<TransposeParams> GetTransposeParams(const WorkloadSpec& spec);
absl::StatusOr<SliceParams> GetSliceParams(const WorkloadSpec& spec);
absl::StatusOr<ConcatParams> GetConcatParams(const WorkloadSpec& spec);
absl::StatusOr<ResizeParams> GetResizeParams(const WorkloadSpec& spec);
absl::StatusOr<ReduceParams> GetReduceParams(const WorkloadSpec& spec);
absl::StatusOr<WinogradParams> GetWinogradParams(const WorkloadSpec& spec);  // both sides

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
OpDefinition SepConv2dOp(const SepConv2dParams& p);
OpDefinition Pool2dOp(const Pool2dParams& p);
OpDefinition SoftmaxOp(const SoftmaxParams& p);
OpDefinition LayerNormOp(const LayerNormParams& p);
OpDefinition ConvTransposeOp(const ConvTransposeParams& p);
OpDefinition EwiseOp(const EwiseParams& p);
OpDefinition TransposeOp(const TransposeParams& p);
OpDefinition SliceOp(const SliceParams& p);
OpDefinition ConcatOp(const ConcatParams& p);
OpDefinition ResizeOp(const ResizeParams& p);
OpDefinition ReduceTensorOp(const ReduceParams& p);
//   winograd_in   X[n,c/x,h,w,x] -> V[t,t,n,th,tw,c/x,x] (t = m+2, th = oh/m): "pad" as for
//                 conv2d, "V"(e1, e2, n, ty, tx, c, cv); V's memory is the batch_matmul
//                 operand A[t*t][tiles][c].
//   winograd_out  M[t,t,n,th,tw,k/x,x] -> Y[n,k/x,th,m,tw,m,x] (the memory of
//                 [n,k/x,oh,ow,x]): "Y"(n, k, ty, vy, tx, vx, kv), or "winograd_out" and
//                 the epilogue stage "Y"; a residual is shaped like Y.
OpDefinition WinogradInOp(const WinogradParams& p);
OpDefinition WinogradOutOp(const WinogradParams& p);

// The B operand of a winograd convolution's batch_matmul: the weights w(k, c, ry, rx) of a
// 3x3 convolution transformed (G g G^T, in double) to [t*t][k/panel][c][panel] (the layout
// of bpanel=panel; panel 0: [t*t][c][k]).
std::vector<float> WinogradWeights(
    const std::function<double(int64_t, int64_t, int64_t, int64_t)>& w, int64_t k, int64_t c,
    int64_t m, int64_t panel);

// Dispatches on spec.op; InvalidArgument for an unknown op or missing keys.
absl::StatusOr<OpDefinition> BuildOp(const WorkloadSpec& spec);

}  // namespace lathe::ir

#endif  // LATHE_IR_OPS_H_
