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

// A test-name-safe form of a spec.
inline std::string OpTestName(const std::string& spec) {
  std::string out;
  for (char c : spec) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace lathe::testing

#endif  // LATHE_TESTS_CODEGEN_OP_SPECS_H_
