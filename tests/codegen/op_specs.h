// The workloads the CPU and CUDA backend tests run every op on: odd shapes, epilogues,
// strides, dilation, groups and both layouts.
#ifndef LATHE_TESTS_CODEGEN_OP_SPECS_H_
#define LATHE_TESTS_CODEGEN_OP_SPECS_H_

#include <string>
#include <vector>

namespace lathe::testing {

inline const std::vector<std::string>& OpTestSpecs() {
  static const std::vector<std::string> kOps = {
      "matmul:m=17,n=31,k=13",
      "matmul:m=1,n=1,k=1",
      "matmul:m=64,n=48,k=40,epilogue=bias",
      "matmul:m=7,n=9,k=11,epilogue=relu",
      "matmul:m=33,n=20,k=9,epilogue=bias_relu",
      "batch_matmul:b=3,m=5,n=7,k=11",
      "batch_matmul:b=2,m=8,n=8,k=8,epilogue=bias_relu",
      "conv2d:n=1,c=3,h=9,w=9,k=4,r=3,s=3",
      "conv2d:n=2,c=4,h=11,w=7,k=6,r=3,s=3,pad=1",
      "conv2d:n=1,c=8,h=13,w=13,k=8,r=3,s=3,stride=2,pad=1,dilation=2",
      "conv2d:n=1,c=8,h=10,w=10,k=8,r=3,s=3,pad=1,groups=8",
      "conv2d:n=1,c=6,h=9,w=9,k=4,r=1,s=1,groups=2,epilogue=bias_relu",
      "conv2d:n=1,c=4,h=8,w=8,k=8,r=3,s=3,pad=1,layout=nhwc",
      "conv2d:n=2,c=6,h=7,w=9,k=6,r=3,s=2,stride=2,pad=1,groups=3,layout=nhwc,epilogue=bias",
      "pool2d:n=1,c=3,h=9,w=9,r=3,s=3,stride=2,pad=1",
      "pool2d:n=2,c=2,h=8,w=7,r=2,s=2,stride=2,kind=avg",
      "pool2d:n=1,c=4,h=6,w=6,r=3,s=3,stride=1,pad=1,layout=nhwc",
      "softmax:m=5,n=17",
      "softmax:m=1,n=1",
      "layer_norm:m=6,n=33",
      "layer_norm:m=3,n=8,eps=0.001"};
  return kOps;
}

// The forms the model compiler brings (tests/ir/ops_eval_test.cc checks their definitions):
// per-axis strides, asymmetric pads, expression epilogues, transposed matmuls and the
// elementwise and data-movement ops. The CPU backend runs them; the CUDA tests do not yet.
inline const std::vector<std::string>& ModelOpTestSpecs() {
  static const std::vector<std::string> kOps = {
      "conv2d:n=1,c=4,h=9,w=10,k=6,r=3,s=3,stride=2x1,pad=1,epilogue=bias_hswish",
      "conv2d:n=1,c=3,h=6,w=9,k=5,r=1,s=3,stride=1x2,pad=0x1x0x1,epilogue=bias_clip0:6_res",
      "conv2d:n=1,c=8,h=7,w=7,k=8,r=5,s=5,pad=2,groups=8,epilogue=bias_hsig0.2:0.5",
      "conv2d:n=1,c=8,h=5,w=5,k=16,r=1,s=1,epilogue=bias_gelu",
      "conv2d_transpose:n=1,c=6,h=4,w=5,k=3,r=2,s=2,stride=2,epilogue=bias_sigmoid",
      "conv2d_transpose:n=1,c=4,h=3,w=5,k=4,r=3,s=3,stride=2,pad=1,output_padding=1,groups=2",
      "matmul:m=9,n=17,k=12,transpose_b=1,epilogue=bias_res",
      "matmul:m=9,n=32,k=12,bpanel=16,epilogue=bias_gelu",
      "matmul:m=7,n=24,k=5,bpanel=8,epilogue=bias_res",
      "batch_matmul:b=3,m=5,n=6,k=7,transpose_b=1,epilogue=mul0.125",
      "batch_matmul:b=2,m=5,n=6,k=7,bcast=b",
      "pool2d:n=1,c=3,h=9,w=8,r=3,s=2,stride=3x2,pad=1x0x0x1,kind=avg,count_include_pad=0",
      "pool2d:n=1,c=5,h=6,w=7,r=6,s=7,kind=avg",
      "softmax:m=3,n=9,inner=4",
      "ewise:a=1x6x5x7,b=1x6x1x1,binary=mul",
      "ewise:a=2x3x17,epilogue=scale_bias_relu",
      "ewise:a=3x19,b=3x19,binary=add,epilogue=hswish",
      "ewise:a=1x2x10x12x8,b=1x2x5x6x8,binary=add,upsample=1x1x2x2x1",
      "ewise:a=1x2x10x12x8,b=1x2x1x1x8,binary=mul,epilogue=res_resup2:2",
      "conv2d:n=1,c=3,h=11,w=13,k=16,r=3,s=3,pad=1,stride=2,kblock=8,epilogue=bias_hswish",
      "transpose:shape=2x5x7,perm=0x2x1",
      "slice:shape=6x20,begin=1x3,size=2x8,step=2x2",
      "concat:axis=1,inputs=1x3x5x6+1x2x5x6",
      "resize:n=1,c=3,h=5,w=6,oh=10,ow=12,mode=nearest,coord=asymmetric,nearest=floor",
      "resize:n=1,c=2,h=5,w=6,oh=9,ow=11,mode=linear",
      "reduce:shape=3x4x18,axes=2,kind=mean",
      // Blocked layouts (nchw{x}c; kblock: the output channels' block).
      "conv2d:n=1,c=8,h=7,w=6,k=8,r=3,s=3,pad=1,layout=nchw4c",
      "conv2d:n=2,c=4,h=9,w=8,k=6,r=3,s=2,stride=2,pad=1,dilation=2x1,layout=nchw2c,kblock=3,"
      "epilogue=bias_relu_res",
      "conv2d:n=1,c=8,h=9,w=9,k=8,r=5,s=5,stride=2,pad=2,groups=8,layout=nchw4c,"
      "epilogue=bias_hswish",
      "conv2d:n=1,c=16,h=5,w=5,k=8,r=1,s=1,layout=nchw8c,kblock=4,epilogue=scale_bias",
      "pool2d:n=1,c=8,h=9,w=9,r=3,s=3,stride=2,pad=1,layout=nchw4c",
      "pool2d:n=2,c=6,h=6,w=5,r=2,s=2,stride=2,kind=avg,layout=nchw2c",
      "resize:n=1,c=8,h=5,w=6,oh=10,ow=12,mode=nearest,coord=asymmetric,nearest=floor,"
      "layout=nchw4c",
      "resize:n=1,c=6,h=4,w=5,oh=7,ow=9,mode=linear,layout=nchw2c",
      // Winograd convolutions (ir/ops_winograd.cc): both transforms, and the batch_matmul
      // between them with its weights in column panels.
      "winograd_in:n=1,c=8,h=9,w=5,m=4,pad=1x0x0x1,layout=nchw4c",
      "winograd_in:n=2,c=4,h=6,w=4,m=2,pad=1,layout=nchw4c",
      "winograd_out:n=1,k=8,oh=4,ow=8,m=4,layout=nchw4c,epilogue=bias_relu_res",
      "winograd_out:n=2,k=4,oh=6,ow=2,m=2,layout=nchw2c",
      "batch_matmul:b=4,m=5,n=24,k=7,bpanel=8,epilogue=bias",
      // A second per-channel add after the activation (the model compiler's affine).
      "conv2d:n=1,c=8,h=6,w=7,k=16,r=1,s=1,layout=nchw8c,epilogue=bias_hswish_scale_shift",
      "conv2d:n=1,c=5,h=6,w=7,k=3,r=3,s=3,pad=1,epilogue=bias_relu_scale_shift",
  };
  return kOps;
}

// A test-name-safe form of a spec.
inline std::string OpTestName(const std::string& spec) {
  std::string out;
  for (char c : spec) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_CODEGEN_OP_SPECS_H_
