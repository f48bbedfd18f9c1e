// \file
// The model compiler's middle end: an imported graph becomes a list of lathe kernels, each a
// workload spec with the values it reads and writes, in execution order. Passes, in order:
// BatchNormalization folded into the preceding Conv, a decomposed layer norm recognised,
// nodes lowered to kernels (reshapes and identities become aliases of their input's storage),
// x * f(x) activations recognised (swish, hard-swish, GELU), and elementwise chains fused
// into the epilogue of the Conv / MatMul / elementwise kernel feeding them (bias, scale,
// constants, a residual add of another tensor).
//
// Layout, last: activations are plain row-major (NCHW) or, with CompileOptions::block_lanes,
// kept in the blocked layout nchw{b}c between convolutions (TVM's NCHWc): convolutions,
// pooling, elementwise kernels and channel concats run blocked, weights are packed at compile
// time, and transpose kernels convert where a kernel needs the plain form (matmuls, reshapes,
// softmax, resize, the model's inputs and outputs).
#ifndef LATHE_MODEL_COMPILE_H_
#define LATHE_MODEL_COMPILE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/graph.h"

namespace lathe::model {

enum class ActivationLayout { kNchw, kBlocked };

// One kernel of the program: a canonical workload spec and the values bound to its
// arguments in the workload's order (the output last).
struct KernelCall {
  std::string spec;
  std::vector<std::string> args;
  std::vector<std::string> nodes;  // the ONNX nodes it computes, for reports
};

// A value stored inside another one: `base`'s storage from element `offset` on.
struct Alias {
  std::string base;
  int64_t offset = 0;
};

struct Program {
  Graph graph;  // values (shapes, constants), inputs, outputs; nodes are consumed
  std::vector<KernelCall> kernels;
  std::map<std::string, Alias> aliases;  // value -> its storage (chains resolved)
  ActivationLayout layout = ActivationLayout::kNchw;
};

struct CompileOptions {
  bool fuse = true;  // epilogue fusion and activation patterns (off: one kernel per node)
  // Transposed convolutions whose windows do not overlap as a 1x1 convolution and a
  // depth-to-space transpose (ConvTransposesAsConvs); off: the direct conv2d_transpose.
  bool deconv_as_conv = true;
  // The float lanes of the target's vector (16 on AVX-512, 8 on AVX2): activations between
  // convolutions are kept in blocks of up to this many channels. 0: plain NCHW throughout.
  int64_t block_lanes = 0;
  // The lanes the target executes per vector operation (codegen::CpuInfo::datapath_bits / 32;
  // 0: block_lanes). Where it is the whole vector, blocks of part of a vector run at that part
  // of the peak and channels that fill no whole vectors take one block (BlockLayouts); where it
  // is half (Zen 4's AVX-512), a half-vector block runs at full rate.
  int64_t datapath_lanes = 0;
  // Constant matmul weights packed in column panels of this many columns (PackMatmulWeights;
  // two vectors: 16 on AVX2, 32 on AVX-512). 0: row-major.
  int64_t weight_panel = 0;
  // Blocked layout only: dense 3x3 stride-1 convolutions as Winograd F(m x m, 3 x 3)
  // (WinogradConvs: winograd_in, batch_matmul, winograd_out).
  bool winograd = false;
  // Concats whose inputs are contiguous slabs of the output: the producers write their slabs
  // in place and no copy runs (ConcatsInPlace).
  bool concat_in_place = true;
  // Blocked layout only: a depthwise convolution whose only reader is a 1x1 convolution, as
  // one sepconv2d kernel (FuseSeparableConvs), where the depthwise output has at least
  // `separable_min_rows` rows (8 per core: the fused kernel's parallel tasks are its rows).
  // Zen 4, 2 threads, untuned, fused against apart: PP-OCR det's maps of 20-320 rows 7.9 ms
  // against 8.1 (16 channels at 320x320 1.11 against 1.20), rec's 24-row maps 0.20 against
  // 0.22 and 0.18 against 0.19, but its 3-row maps of 480 channels 0.74 against 0.55 and the
  // 12-row ones of 240 0.62-0.66 against 0.59-0.60.
  bool fuse_separable = true;
  int64_t separable_min_rows = 16;
};

// Compiles an imported graph. Unsupported ops and attribute forms are InvalidArgument errors
// naming the node, its op and what is missing.
absl::StatusOr<Program> CompileGraph(Graph graph, const CompileOptions& options = {});

// The storage root of a value: itself unless it is an alias.
Alias StorageOf(const Program& p, const std::string& value);

}  // namespace lathe::model

#endif  // LATHE_MODEL_COMPILE_H_
