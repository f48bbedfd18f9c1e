// \file
// Library baseline for float32 2-D convolution: oneDNN's direct convolution forward with the
// layouts oneDNN prefers (memory descriptors with format_tag::any, so typically nChw8c /
// OIhw8i8o blocked layouts on AVX2), bias and fused relu when the workload's epilogue asks.
// Inputs are reordered into the blocked layouts once, outside the timed loop, as a framework
// that keeps its tensors blocked would; the output is reordered back to NCHW once and checked
// against lathe's naive reference (ir/reference.h).
#ifndef LATHE_BASELINES_CONV_BASELINES_H_
#define LATHE_BASELINES_CONV_BASELINES_H_

#include <string>

#include "absl/status/statusor.h"

namespace lathe::baselines {

struct ConvResult {
  std::string library;     // "onednn-conv"
  std::string impl;        // oneDNN's implementation name, e.g. "jit:avx2"
  std::string src_layout;  // the layouts oneDNN chose, e.g. "aBcd8b"
  std::string runtime;     // oneDNN version and CPU threading runtime, e.g. "2.6.3 omp"
  int threads = 0;
  double median_s = 0;  // median over the timed repeats
  double gflops = 0;    // workload flops (ir::Workload::flops, epilogue included) / median_s
  int repeats = 0;
  double rel_error = 0;  // max |out - reference| / max |reference|, NCHW layout
};

// Times oneDNN's convolution forward (inference) of a conv2d workload spec (e.g.
// "conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1") on `threads` threads, one warm-up call and
// repeats for at least `min_seconds`; the median is the figure. InvalidArgument for a spec
// that is not a conv2d or is malformed; Unimplemented for the nhwc layout; Internal when
// oneDNN fails or its output differs from the reference beyond the float32 tolerance.
absl::StatusOr<ConvResult> OnednnConv(const std::string& spec, int threads = 2,
                                      double min_seconds = 0.5);

}  // namespace lathe::baselines

#endif  // LATHE_BASELINES_CONV_BASELINES_H_
