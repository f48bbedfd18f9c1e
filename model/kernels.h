// \file
// The kernels of the compiler before they become workload specs: an op, its spec keys, an
// epilogue and the values bound to its arguments. Internal to model/ (compile.cc,
// lower_nodes.cc, fuse.cc).
#ifndef LATHE_MODEL_KERNELS_H_
#define LATHE_MODEL_KERNELS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/epilogue.h"
#include "ir/op_registry.h"
#include "model/compile.h"
#include "model/graph.h"

namespace lathe::model {

struct KernelDesc {
  std::string op;                                   // workload op: conv2d, matmul, ewise, ...
  std::map<std::string, std::string> params;        // spec keys other than epilogue
  ir::EpilogueExpr epilogue;                        // for ops with an epilogue key
  std::vector<std::string> inputs;                  // main inputs, in workload order
  std::map<ir::StepKind, std::string> step_inputs;  // bias / scale / res values
  std::string output;
  std::vector<std::string> nodes;

  bool has_epilogue() const { return ir::OpTakesKey(op, "epilogue"); }
  // The output axis that bias and scale index.
  int channel_axis(const Graph& g) const;
  // "op:k=v,...,epilogue=..." (not yet canonical).
  std::string SpecText() const;
};

// What lowering produces: kernels in order, and values that alias others' storage.
struct Lowered {
  std::vector<KernelDesc> kernels;
  std::map<std::string, Alias> aliases;
};

// Graph-level rewrites before lowering: BatchNormalization into the preceding Conv, a
// decomposed layer norm (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div[, Mul, Add]) into
// LayerNormalization.
absl::Status FoldBatchNorms(Graph& g);
absl::Status RecognizeLayerNorms(Graph& g);

// Lowers every node to kernels or aliases.
absl::StatusOr<Lowered> LowerNodes(Graph& g);

// x * f(x) activations and epilogue fusion, to a fixed point.
void FuseKernels(Graph& g, Lowered& l);

// How many kernels read each value, graph outputs counting twice (never fused away).
std::map<std::string, int> ReaderCounts(const Graph& g, const Lowered& l);

// Folds the linear steps that open `steps` (bias, scale, shift, mul, div, add, neg) into k's
// constant weights and one bias step, and makes the rest k's epilogue; `tensors` names the
// value of each tensor step (empty for the others). False, with k unchanged, when k's weights
// cannot take a per-channel factor or the rest would repeat a tensor step.
bool FoldLinearSteps(Graph& g, KernelDesc& k, const std::vector<ir::EpilogueStep>& steps,
                     const std::vector<std::string>& tensors);
// The value of each step of k's epilogue ("" for steps without a tensor).
std::vector<std::string> StepTensors(const KernelDesc& k);
// After fusion: opening linear steps folded into the weights (FoldLinearSteps), and the
// constant mul/div/add that close an epilogue after its last nonlinear step turned into
// per-channel scale/shift tensors, so that kernels of one shape share one workload.
void ParameterizeConstants(Graph& g, Lowered& l);

// Keeps activations in the blocked layout nchw{b}c between convolutions (model/layout.cc):
// b from the vector's float lanes (16 on AVX-512, 8 on AVX2) where it divides the channels;
// convolution weights packed; conversions (transpose kernels, or views where the layouts
// share memory) where a kernel needs the plain form. lanes <= 1: nothing changes.
void BlockLayouts(Graph& g, Lowered& l, int64_t lanes, int64_t datapath_lanes);

// An elementwise copy of `in` (logical shape `shape`) into `out`; `nodes` name it in the
// profile (model/concat.cc).
KernelDesc CopyKernel(const std::vector<int64_t>& shape, const std::string& in,
                      const std::string& out, std::vector<std::string> nodes);

// A transpose kernel of `in` (logical shape `shape`) by `perm` into `out`, with extent-1
// dimensions dropped and dimensions that stay neighbours merged, so that equal data movements
// share one task; `why` names it in the profile.
KernelDesc TransposeKernel(std::vector<int64_t> shape, std::vector<int64_t> perm,
                           const std::string& in, const std::string& out, const std::string& why);

// Transposed convolutions whose windows do not overlap (stride == kernel, no padding, one
// group) as a 1x1 convolution to k*r*s channels and a depth-to-space transpose
// (model/deconv.cc): a dense product the layout pass blocks, instead of a gather per tap.
void ConvTransposesAsConvs(Graph& g, Lowered& l);

// Constant row-major weights B [k][n] of matmul kernels packed once into column panels
// [n/p][k][p] (model/pack.cc; the workload key bpanel=p), p = `panel` or, where that does not
// divide n, half of it; where neither does (and more than one row shares the weights), padded
// with zero columns to whole panels of `panel`, the kernel's output padded alike and followed
// by a slice of its n columns. Kernels sharing a weight share its packed copy. panel <= 1:
// nothing.
void PackMatmulWeights(Graph& g, Lowered& l, int64_t panel);

// Dense 3x3 stride-1 convolutions in the blocked layout as Winograd F(4x4 or 2x2, 3x3)
// (model/winograd.cc): winograd_in, a batch_matmul by the weights transformed and packed in
// column panels of `panel` (halved until they divide the output channels), winograd_out with
// the convolution's epilogue. Applied where both channel counts are at least
// kWinogradMinChannels, the output is a whole number of tiles, and the transformed weights
// take at most kWinogradMaxWeightBytes.
constexpr int64_t kWinogradMinChannels = 32;
constexpr int64_t kWinogradMaxWeightBytes = 8 << 20;
void WinogradConvs(Graph& g, Lowered& l, int64_t panel);

// The dims of one "AxBxC" spec value of a kernel (shape, begin, size, ...); empty when it does
// not parse (model/concat.cc).
std::vector<int64_t> ParseDims(const std::string& text);

// Concats whose inputs are contiguous slabs of their output (nothing but extent-1 dims outside
// the concat axis: axis 1 at batch 1, plain or blocked) vanish: each input, when a single
// kernel writes it and nothing else owns its storage, becomes a view of its slab of the
// output, so its producer writes it in place (model/concat.cc; PP-OCR det's FPN concat of
// four 160x160 maps: a 0.4-1.0 ms copy); the other inputs are copied into their slabs.
void ConcatsInPlace(Graph& g, Lowered& l);

// Blocked depthwise convolutions whose output only a 1x1 convolution (stride 1, no padding, the
// same layout) reads, as one sepconv2d kernel (model/separable.cc): a schedule computes the
// depthwise part per row tile of the 1x1 and keeps it in the cache, where the two kernels
// write the intermediate map to memory and read it back. Only where the depthwise output has
// at least `min_rows` rows: the fused kernel runs its row tiles in parallel (the depthwise
// part serves every channel block of the 1x1), and a map of a few rows leaves cores idle.
void FuseSeparableConvs(Graph& g, Lowered& l, int64_t min_rows);

}  // namespace lathe::model

#endif  // LATHE_MODEL_KERNELS_H_
