#include "ir/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/check.h"
#include "ir/ops.h"

namespace lathe::ir {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Workload Make(const std::string& spec) {
  absl::StatusOr<Workload> w = MakeWorkload(spec);
  EXPECT_TRUE(w.ok()) << spec << ": " << w.status();
  return w.ok() ? *std::move(w) : Workload{};
}

// Runs the reference with the given inputs and returns the output.
std::vector<float> RunReference(const std::string& spec, std::vector<std::vector<float>> inputs) {
  Workload w = Make(spec);
  std::vector<std::vector<float>> args = AllocateArgs(w);
  EXPECT_EQ(inputs.size() + 1, args.size()) << spec;
  for (size_t i = 0; i < inputs.size() && i < args.size(); ++i) args[i] = inputs[i];
  absl::Status s = ComputeReference(w, args);
  EXPECT_TRUE(s.ok()) << s;
  return args.back();
}

std::vector<float> Iota(int n, float start = 1) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(ReferenceTest, Matmul) {
  // [[1,2,3],[4,5,6]] x [[1,2],[3,4],[5,6]]
  EXPECT_THAT(RunReference("matmul:m=2,n=2,k=3", {Iota(6), Iota(6)}), ElementsAre(22, 28, 49, 64));
  EXPECT_THAT(RunReference("matmul:m=2,n=2,k=3,epilogue=bias", {Iota(6), Iota(6), {-30, 1}}),
              ElementsAre(-8, 29, 19, 65));
  EXPECT_THAT(RunReference("matmul:m=2,n=2,k=3,epilogue=relu", {Iota(6), Iota(6, -3)}),
              ElementsAre(0, 4, 0, 4));
  EXPECT_THAT(RunReference("matmul:m=2,n=2,k=3,epilogue=bias_relu", {Iota(6), Iota(6), {-30, -60}}),
              ElementsAre(0, 0, 19, 4));
}

// B in column panels gives the product of the row-major B it was packed from.
TEST(ReferenceTest, PanelMatmulEqualsTheRowMajorOne) {
  const int64_t m = 3, n = 12, k = 5, p = 4;
  std::vector<float> a = Iota(m * k, -7), b = Iota(k * n, -20), packed(k * n), bias = Iota(n);
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t j = 0; j < n; ++j) packed[((j / p) * k + r) * p + j % p] = b[r * n + j];
  }
  EXPECT_THAT(
      RunReference("matmul:m=3,n=12,k=5,bpanel=4,epilogue=bias_relu", {a, packed, bias}),
      ElementsAreArray(RunReference("matmul:m=3,n=12,k=5,epilogue=bias_relu", {a, b, bias})));
}

TEST(ReferenceTest, BatchMatmul) {
  // Batch 1 is batch 0 with A doubled.
  std::vector<float> a = Iota(6);
  for (int i = 0; i < 6; ++i) a.push_back(2 * a[i]);
  std::vector<float> b = Iota(6);
  b.insert(b.end(), b.begin(), b.end());
  EXPECT_THAT(RunReference("batch_matmul:b=2,m=2,n=2,k=3", {a, b}),
              ElementsAre(22, 28, 49, 64, 44, 56, 98, 128));
  EXPECT_THAT(RunReference("batch_matmul:b=2,m=2,n=2,k=3,epilogue=bias", {a, b, {1, -1}}),
              ElementsAre(23, 27, 50, 63, 45, 55, 99, 127));
}

// Random values in [-1, 1), the same for the same seed.
std::vector<float> Random(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
  return v;
}

// winograd_in, a batch_matmul by WinogradWeights and winograd_out compute the blocked 3x3
// convolution (m = 2 and 4, asymmetric pads, a residual epilogue), to float rounding.
TEST(ReferenceTest, WinogradEqualsTheDirectConvolution) {
  struct Case {
    int64_t m, n, c, k, h, w, x;
    std::string pad;
  };
  for (const Case& cs : {Case{4, 1, 8, 16, 8, 8, 8, "1"}, Case{2, 2, 4, 8, 5, 7, 4, "1x0x0x1"},
                         Case{4, 1, 16, 8, 9, 8, 8, "0x1x1x1"}}) {
    const std::string conv =
        absl::StrCat("conv2d:n=", cs.n, ",c=", cs.c, ",h=", cs.h, ",w=", cs.w, ",k=", cs.k,
                     ",r=3,s=3,pad=", cs.pad, ",layout=nchw", cs.x, "c,epilogue=bias_res_relu");
    Workload cw = Make(conv);
    absl::StatusOr<Conv2dParams> p = GetConv2dParams(cw.spec);
    ASSERT_TRUE(p.ok()) << p.status();
    const int64_t oh = p->oh(), ow = p->ow(), t = cs.m + 2;
    const int64_t tiles = cs.n * (oh / cs.m) * (ow / cs.m);
    const std::vector<float> x = Random(cs.n * cs.c * cs.h * cs.w, 1);
    const std::vector<float> wt = Random(cs.k * cs.c * 9, 2);  // blocked [K/x][C/x][3][3][x][x]
    const std::vector<float> bias = Random(cs.k, 3);
    const std::vector<float> res = Random(cs.n * cs.k * oh * ow, 4);
    const std::vector<float> want = RunReference(conv, {x, wt, bias, res});
    const int64_t b = cs.x;
    const std::vector<float> u = WinogradWeights(
        [&](int64_t oc, int64_t ic, int64_t ry, int64_t rx) {
          return wt[(((((oc / b) * (cs.c / b) + ic / b) * 3 + ry) * 3 + rx) * b + ic % b) * b +
                    oc % b];
        },
        cs.k, cs.c, cs.m, 8);
    const std::string layout = absl::StrCat("nchw", cs.x, "c");
    const std::vector<float> v =
        RunReference(absl::StrCat("winograd_in:n=", cs.n, ",c=", cs.c, ",h=", cs.h, ",w=", cs.w,
                                  ",m=", cs.m, ",pad=", cs.pad, ",layout=", layout),
                     {x});
    const std::vector<float> mm = RunReference(
        absl::StrCat("batch_matmul:b=", t * t, ",m=", tiles, ",n=", cs.k, ",k=", cs.c, ",bpanel=8"),
        {v, u});
    const std::vector<float> got =
        RunReference(absl::StrCat("winograd_out:n=", cs.n, ",k=", cs.k, ",oh=", oh, ",ow=", ow,
                                  ",m=", cs.m, ",layout=", layout, ",epilogue=bias_res_relu"),
                     {mm, bias, res});
    ASSERT_EQ(got.size(), want.size()) << conv;
    float max_err = 0;
    for (size_t i = 0; i < got.size(); ++i)
      max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    EXPECT_LT(max_err, 2e-5f) << conv;
    // Not trivially equal: the epilogue's relu leaves most outputs nonzero.
    EXPECT_GT(std::count_if(want.begin(), want.end(), [](float f) { return f > 0; }),
              static_cast<std::ptrdiff_t>(want.size() / 4))
        << conv;
  }
}

TEST(ReferenceTest, Conv2dBasic) {
  // X = 1..9 (3x3), W = identity-like 2x2 [[1,0],[0,1]].
  EXPECT_THAT(RunReference("conv2d:n=1,c=1,h=3,w=3,k=1,r=2,s=2", {Iota(9), {1, 0, 0, 1}}),
              ElementsAre(6, 8, 12, 14));
}

TEST(ReferenceTest, Conv2dStridePad) {
  // 2x2 ones kernel, pad 1, stride 2 on 1..9: oh = (3 + 2 - 1 - 1) / 2 + 1 = 2.
  EXPECT_THAT(
      RunReference("conv2d:n=1,c=1,h=3,w=3,k=1,r=2,s=2,pad=1,stride=2", {Iota(9), {1, 1, 1, 1}}),
      ElementsAre(1, 5, 11, 28));
  // 3x3 ones, pad 1, stride 2: each output sums the in-bounds part of its window.
  EXPECT_THAT(RunReference("conv2d:n=1,c=1,h=3,w=3,k=1,r=3,s=3,pad=1,stride=2",
                           {Iota(9), std::vector<float>(9, 1)}),
              ElementsAre(12, 16, 24, 28));
}

TEST(ReferenceTest, Conv2dDilation) {
  // X = 0..24 (5x5); a 2x2 ones kernel dilated by 2 reads x[y,x] + x[y,x+2] + x[y+2,x] +
  // x[y+2,x+2] = 4*x[y,x] + 24; oh = ow = 3.
  std::vector<float> out =
      RunReference("conv2d:n=1,c=1,h=5,w=5,k=1,r=2,s=2,dilation=2", {Iota(25, 0), {1, 1, 1, 1}});
  std::vector<float> want;
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 3; ++x) want.push_back(4 * (y * 5 + x) + 24);
  }
  EXPECT_THAT(out, ElementsAreArray(want));
}

TEST(ReferenceTest, Conv2dGroups) {
  // c=2, k=4, groups=2 with 1x1 kernels: channels 0,1 read input channel 0, channels 2,3
  // input channel 1. X channel 0 = {1, 2}, channel 1 = {10, 20} (h=1, w=2).
  EXPECT_THAT(RunReference("conv2d:n=1,c=2,h=1,w=2,k=4,r=1,s=1,groups=2,epilogue=bias",
                           {{1, 2, 10, 20}, {1, 2, 3, -1}, {0, 0, 0, 100}}),
              ElementsAre(1, 2, 2, 4, 30, 60, 90, 80));
  // Depthwise (groups = c = k), nhwc: Y[.., k] = X[.., k] * W[0, 0, 0, k].
  EXPECT_THAT(RunReference("conv2d:n=1,c=3,h=1,w=1,k=3,r=1,s=1,groups=3,layout=nhwc",
                           {{1, 2, 3}, {4, 5, 6}}),
              ElementsAre(4, 10, 18));
}

TEST(ReferenceTest, Conv2dLayoutsAgree) {
  const int n = 2, c = 4, h = 7, w = 6, k = 6, r = 3, s = 2, g = 2;
  const std::string params = "n=2,c=4,h=7,w=6,k=6,r=3,s=2,stride=2,pad=1,dilation=2,groups=2";
  Workload nchw = Make("conv2d:" + params + ",epilogue=bias_relu");
  Workload nhwc = Make("conv2d:" + params + ",epilogue=bias_relu,layout=nhwc");
  std::vector<std::vector<float>> a = AllocateArgs(nchw), b = AllocateArgs(nhwc);
  FillRandomInputs(a, 7);
  const int oh = 3, ow = 3, cpg = c / g;
  ASSERT_EQ(a[3].size(), size_t{n * k * oh * ow});
  for (int in = 0; in < n; ++in) {
    for (int ic = 0; ic < c; ++ic) {
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w; ++x) {
          b[0][((in * h + y) * w + x) * c + ic] = a[0][((in * c + ic) * h + y) * w + x];
        }
      }
    }
  }
  for (int oc = 0; oc < k; ++oc) {
    for (int rc = 0; rc < cpg; ++rc) {
      for (int y = 0; y < r; ++y) {
        for (int x = 0; x < s; ++x) {
          b[1][((y * s + x) * cpg + rc) * k + oc] = a[1][((oc * cpg + rc) * r + y) * s + x];
        }
      }
    }
  }
  b[2] = a[2];
  ASSERT_TRUE(ComputeReference(nchw, a).ok());
  ASSERT_TRUE(ComputeReference(nhwc, b).ok());
  for (int in = 0; in < n; ++in) {
    for (int oc = 0; oc < k; ++oc) {
      for (int y = 0; y < oh; ++y) {
        for (int x = 0; x < ow; ++x) {
          EXPECT_FLOAT_EQ(b[3][((in * oh + y) * ow + x) * k + oc],
                          a[3][((in * k + oc) * oh + y) * ow + x]);
        }
      }
    }
  }
}

TEST(ReferenceTest, MaxPoolIgnoresPadding) {
  // All inputs negative: a zero-padded max would wrongly return 0 at the borders.
  EXPECT_THAT(RunReference("pool2d:n=1,c=1,h=2,w=2,r=2,s=2,pad=1", {{-1, -2, -3, -4}}),
              ElementsAre(-1, -1, -2, -1, -1, -2, -3, -3, -4));
  EXPECT_THAT(RunReference("pool2d:n=1,c=1,h=4,w=4,r=2,s=2,stride=2", {Iota(16)}),
              ElementsAre(6, 8, 14, 16));
}

TEST(ReferenceTest, AvgPoolCountsPaddingAsZeros) {
  EXPECT_THAT(RunReference("pool2d:n=1,c=1,h=2,w=2,r=2,s=2,pad=1,kind=avg", {{1, 2, 3, 4}}),
              ElementsAre(0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1));
  // nhwc with two channels: channel 1 is channel 0 times 10.
  EXPECT_THAT(RunReference("pool2d:n=1,c=2,h=2,w=2,r=2,s=2,kind=avg,layout=nhwc",
                           {{1, 10, 2, 20, 3, 30, 4, 40}}),
              ElementsAre(2.5, 25));
}

TEST(ReferenceTest, SoftmaxRowsSumToOne) {
  std::vector<float> out =
      RunReference("softmax:m=3,n=2", {{0, std::log(2.0f), 1000, 1000, -5, 5}});
  EXPECT_THAT(
      out, Pointwise(FloatNear(1e-6), std::vector<float>{1.0f / 3, 2.0f / 3, 0.5, 0.5,
                                                         std::exp(-10.0f) / (1 + std::exp(-10.0f)),
                                                         1 / (1 + std::exp(-10.0f))}));
  Workload w = Make("softmax:m=5,n=37");
  std::vector<std::vector<float>> args = AllocateArgs(w);
  FillRandomInputs(args, 3);
  ASSERT_TRUE(ComputeReference(w, args).ok());
  for (int i = 0; i < 5; ++i) {
    double sum = 0;
    for (int j = 0; j < 37; ++j) {
      EXPECT_GT(args[1][i * 37 + j], 0);
      sum += args[1][i * 37 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST(ReferenceTest, LayerNormNormalizes) {
  const int m = 4, n = 50;
  Workload w = Make("layer_norm:m=4,n=50");
  std::vector<std::vector<float>> args = AllocateArgs(w);
  FillRandomInputs(args, 11);
  std::fill(args[1].begin(), args[1].end(), 1.0f);  // gamma
  std::fill(args[2].begin(), args[2].end(), 0.0f);  // beta
  ASSERT_TRUE(ComputeReference(w, args).ok());
  const std::vector<float> z = args[3];
  for (int i = 0; i < m; ++i) {
    double mean = 0, var = 0;
    for (int j = 0; j < n; ++j) mean += z[i * n + j];
    mean /= n;
    for (int j = 0; j < n; ++j) var += (z[i * n + j] - mean) * (z[i * n + j] - mean);
    var /= n;
    EXPECT_NEAR(mean, 0, 1e-5);
    EXPECT_NEAR(var, 1, 1e-3);  // var / (var + eps) with var ~ 1/3
  }
  for (int j = 0; j < n; ++j) {
    args[1][j] = 2.0f;
    args[2][j] = static_cast<float>(j);
  }
  ASSERT_TRUE(ComputeReference(w, args).ok());
  for (int i = 0; i < m * n; ++i) EXPECT_NEAR(args[3][i], 2 * z[i] + i % n, 1e-5);
}

TEST(ReferenceTest, RejectsBadArguments) {
  Workload w = Make("matmul:m=2,n=2,k=2");
  std::vector<std::vector<float>> args = AllocateArgs(w);
  args.pop_back();
  EXPECT_THAT(ComputeReference(w, args).message(), HasSubstr("needs 3 arguments, got 2"));
  args = AllocateArgs(w);
  args[1].resize(3);
  EXPECT_THAT(ComputeReference(w, args).message(),
              HasSubstr("argument 1 (B) has 3 elements, expected 4"));
  std::vector<float*> ptrs = {args[0].data(), nullptr, args[2].data()};
  EXPECT_THAT(ComputeReference(w, std::span<float* const>(ptrs)).message(),
              HasSubstr("argument 1 (B) of the reference is null"));
}

TEST(CheckTest, AllocateAndFill) {
  Workload w = Make("matmul:m=3,n=5,k=4,epilogue=bias");
  std::vector<std::vector<float>> args = AllocateArgs(w);
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0].size(), 12u);
  EXPECT_EQ(args[1].size(), 20u);
  EXPECT_EQ(args[2].size(), 5u);
  EXPECT_EQ(args[3].size(), 15u);
  std::vector<std::vector<float>> again = args;
  FillRandomInputs(args, 42);
  FillRandomInputs(again, 42);
  EXPECT_EQ(args, again);
  for (size_t a = 0; a < 3; ++a) {
    for (float v : args[a]) {
      EXPECT_GE(v, -1.0f);
      EXPECT_LT(v, 1.0f);
    }
  }
  EXPECT_THAT(args[3], ::testing::Each(0.0f));  // the output is untouched
  FillRandomInputs(again, 43);
  EXPECT_NE(args[0], again[0]);
  // Pinned values: every worker must draw the same inputs.
  std::vector<std::vector<float>> one = {{0, 0}, {0}};
  FillRandomInputs(one, 0);
  EXPECT_EQ(one[0][0], 0.7666215896606445f);
  EXPECT_EQ(one[0][1], -0.13694405555725098f);
  EXPECT_EQ(one[1][0], 0.0f);
}

TEST(CheckTest, AcceptsSmallErrors) {
  std::vector<float> ref = {1, -2, 4, 0};
  std::vector<float> cand = {1.002f, -2, 4, 0.003f};  // 0.003 / 4 < 1e-3
  CompareResult r;
  EXPECT_TRUE(CheckOutput(cand, ref, {}, kDefaultTolerance, &r).ok());
  EXPECT_TRUE(r.ok);
  EXPECT_DOUBLE_EQ(r.max_abs_ref, 4);
  EXPECT_NEAR(r.max_abs_error, 0.003, 1e-7);
  EXPECT_EQ(r.worst_index, 3);
  EXPECT_EQ(r.num_bad, 0);
  EXPECT_EQ(r.first_bad_index, -1);
  // All-zero references compare exactly.
  std::vector<float> zeros(4, 0.0f);
  EXPECT_TRUE(CheckOutput(zeros, zeros).ok());
  EXPECT_FALSE(CheckOutput(std::vector<float>{0, 0, 1e-20f, 0}, zeros).ok());
}

TEST(CheckTest, FlagsLargeErrors) {
  std::vector<float> ref = {1, 2, 3, 4, 5, 6};
  std::vector<float> cand = {1, 2, 3, 4.01f, 5, 7};
  CompareResult r;
  absl::Status s = CheckOutput(cand, ref, {2, 3}, kDefaultTolerance, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("wrong answer: relative error 0.166667 > 0.001"));
  EXPECT_THAT(s.message(), HasSubstr("first bad element [1,0]: got 4.01, expected 4"));
  EXPECT_THAT(s.message(), HasSubstr("2 of 6 elements bad"));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.first_bad_index, 3);
  EXPECT_EQ(r.worst_index, 5);
  EXPECT_EQ(r.num_bad, 2);
  EXPECT_NEAR(r.rel_error, 1.0 / 6, 1e-6);
}

TEST(CheckTest, FlagsNanAndInf) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> ref = {1, 2, 3};
  CompareResult r;
  absl::Status s = CheckOutput(std::vector<float>{1, nan, 3}, ref, {}, kDefaultTolerance, &r);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("first bad element [1]: got nan"));
  EXPECT_THAT(s.message(), HasSubstr("1 nan or inf"));
  EXPECT_EQ(r.num_nonfinite, 1);
  EXPECT_FALSE(CheckOutput(std::vector<float>{1, 2, -inf}, ref).ok());
  // Even a huge tolerance does not excuse a NaN.
  EXPECT_FALSE(CheckOutput(std::vector<float>{nan, 2, 3}, ref, {}, 1e30).ok());
  // A non-finite reference is reported as such.
  EXPECT_THAT(CheckOutput(ref, std::vector<float>{1, inf, 3}).message(),
              HasSubstr("reference output is not finite"));
}

TEST(CheckTest, SizeMismatch) {
  EXPECT_EQ(CheckOutput(std::vector<float>{1, 2}, std::vector<float>{1, 2, 3}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckTest, FormatIndex) {
  EXPECT_EQ(FormatIndex(7, {2, 3, 4}), "[0,1,3]");
  EXPECT_EQ(FormatIndex(23, {2, 3, 4}), "[1,2,3]");
  EXPECT_EQ(FormatIndex(24, {2, 3, 4}), "[24]");
  EXPECT_EQ(FormatIndex(5, {}), "[5]");
}

}  // namespace
}  // namespace lathe::ir
