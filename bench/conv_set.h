// \file
// The convolutions lathe's benchmarks measure against oneDNN: the kinds real models bring
// (ResNet's 3x3s at 56/28/14/7, 1x1s with and without an epilogue, the 7x7 stride-2 stem,
// MobileNet's depthwise 3x3 and 5x5 at stride 1 and 2, a strided, dilated, batch-2 conv whose
// output channels and columns fill no vector, RegNet's grouped 3x3 of 16 channels a group).
#ifndef LATHE_BENCH_CONV_SET_H_
#define LATHE_BENCH_CONV_SET_H_

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "ir/workload.h"

namespace lathe::bench {

struct ConvCase {
  const char* name;
  const char* spec;
};

inline const std::vector<ConvCase>& ConvSet() {
  static const std::vector<ConvCase> s = {
      {"conv64", "conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1"},
      {"conv128", "conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1"},
      {"conv256", "conv2d:n=1,c=256,h=14,w=14,k=256,r=3,s=3,pad=1"},
      {"conv512", "conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1"},
      {"conv1x1", "conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1"},
      {"conv1x1_br", "conv2d:n=1,c=64,h=56,w=56,k=256,r=1,s=1,epilogue=bias_relu"},
      {"stem", "conv2d:n=1,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3"},
      {"dwconv", "conv2d:n=1,c=32,h=112,w=112,k=32,r=3,s=3,pad=1,groups=32"},
      {"dw3s2", "conv2d:n=1,c=96,h=112,w=112,k=96,r=3,s=3,stride=2,pad=1,groups=96"},
      {"dw5", "conv2d:n=1,c=240,h=28,w=28,k=240,r=5,s=5,pad=2,groups=240"},
      {"dw5s2", "conv2d:n=1,c=144,h=56,w=56,k=144,r=5,s=5,stride=2,pad=2,groups=144"},
      {"dilated", "conv2d:n=2,c=32,h=31,w=31,k=40,r=5,s=3,stride=2,pad=1,dilation=2"},
      {"grouped", "conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=10,epilogue=bias_relu"},
  };
  return s;
}

// The convolution of `spec` in the blocked layout a model compiler would keep between
// convolutions on a machine of `lanes` float32 lanes: input channels in blocks of the lanes
// (all of them when fewer, the largest power of two that divides them otherwise), output
// channels likewise (kblock); depthwise ones with one block for both. `spec` itself when it is
// not a plain NCHW conv2d.
inline std::string BlockedConvSpec(const std::string& spec, int lanes) {
  absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
  if (!w.ok() || w->spec.op != "conv2d") return spec;
  absl::StatusOr<ir::Conv2dParams> p = ir::GetConv2dParams(w->spec);
  if (!p.ok() || p->blocked() || p->nhwc) return spec;
  auto block = [&](int64_t channels) -> int64_t {
    if (channels % lanes == 0) return lanes;
    if (channels < lanes) return channels;
    int64_t b = lanes;
    while (b > 1 && channels % b != 0) b /= 2;
    return b;
  };
  int64_t x = block(p->c), y = block(p->k);
  if (p->depthwise()) {
    y = x;
  } else if (p->groups > 1) {  // blocks within the groups (ir/op_shapes.cc)
    x = std::gcd(x, p->c / p->groups);
    y = std::gcd(y, p->k / p->groups);
  }
  std::string out = absl::StrCat(spec, ",layout=nchw", x, "c");
  if (y != x) absl::StrAppend(&out, ",kblock=", y);
  return ir::MakeWorkload(out).ok() ? out : spec;
}

}  // namespace lathe::bench

#endif  // LATHE_BENCH_CONV_SET_H_
