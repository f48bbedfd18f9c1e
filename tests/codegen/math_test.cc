// exp and tanh as the LLVM backend emits them (inline polynomials, codegen/llvm_codegen.cc),
// and the sigmoid's 1 / (1 + exp(-x)), in vector lanes and in scalars, against the C library
// in double precision over the whole float range that matters, the edges (underflow, overflow,
// infinities, NaN) included.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "codegen/cpu_kernel.h"
#include "ir/expr.h"
#include "ir/stmt.h"

namespace lathe {
namespace {

// out[i] = fn(in[i]) over n elements (a multiple of `lanes`), `lanes` at a time; `fn` builds
// the expression of a loaded value x and the lanes.
std::vector<float> Apply(const std::function<ir::Expr(ir::Expr, int)>& fn,
                         const std::vector<float>& in, int lanes) {
  const int64_t n = static_cast<int64_t>(in.size());
  ir::Buffer a = ir::MakeBuffer("A", ir::Type::F32(), {n});
  ir::Buffer b = ir::MakeBuffer("B", ir::Type::F32(), {n});
  ir::Expr i = ir::MakeVar("i");
  ir::Expr at = lanes == 1 ? i : ir::Ramp(ir::Mul(i, ir::IntImm(lanes)), ir::IntImm(1), lanes);
  ir::LoweredFunc f;
  f.name = "math";
  f.args = {a, b};
  f.body = ir::For(i, ir::IntImm(0), ir::IntImm(n / lanes), ir::ForKind::kSerial,
                   ir::Store(b, at, fn(ir::Load(a, at), lanes)));
  auto k = codegen::JitCompile(f);
  EXPECT_TRUE(k.ok()) << k.status();
  std::vector<float> out(in.size(), -1.f);
  if (!k.ok()) return out;
  std::vector<float> x = in;
  void* args[] = {x.data(), out.data()};
  EXPECT_EQ((*k)->Run(args, 2), 0);
  return out;
}

std::vector<float> Apply(const std::string& fn, const std::vector<float>& in, int lanes) {
  return Apply([&](ir::Expr x, int) { return ir::Call(fn, {x}); }, in, lanes);
}

// A float constant in `lanes` lanes.
ir::Expr Constant(double v, int lanes) {
  return lanes == 1 ? ir::FloatImm(v) : ir::Broadcast(ir::FloatImm(v), lanes);
}

// The sigmoid as the epilogues spell it (ir/epilogue.cc).
ir::Expr Sigmoid(ir::Expr x, int lanes) {
  return ir::Div(Constant(1, lanes),
                 ir::Add(Constant(1, lanes), ir::Call("exp", {ir::Sub(Constant(0, lanes), x)})));
}

std::vector<float> Inputs(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(lo + (hi - lo) * static_cast<float>(i) / (n - 1));
  return v;
}

class MathTest : public ::testing::TestWithParam<int> {};

TEST_P(MathTest, ExpIsWithinFourUlp) {
  const std::vector<float> in = Inputs(-86.f, 88.5f, 4096);
  const std::vector<float> out = Apply("exp", in, GetParam());
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = std::exp(static_cast<double>(in[i]));
    ASSERT_NEAR(out[i], want, want * 4 * std::numeric_limits<float>::epsilon()) << "x=" << in[i];
  }
}

TEST_P(MathTest, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> in = {-inf,
                           -1000.f,
                           -88.f,
                           0.f,
                           -0.f,
                           89.f,
                           1000.f,
                           inf,
                           nan,
                           1e-30f,
                           -1e-30f,
                           1.f,
                           88.72283172607422f,
                           -87.f,
                           0.5f,
                           -0.5f};
  const std::vector<float> out = Apply("exp", in, GetParam());
  EXPECT_EQ(out[0], 0.f);
  EXPECT_EQ(out[1], 0.f);
  EXPECT_LT(out[2], 1e-37f);
  EXPECT_EQ(out[3], 1.f);
  EXPECT_EQ(out[4], 1.f);
  EXPECT_EQ(out[5], inf);
  EXPECT_EQ(out[6], inf);
  EXPECT_EQ(out[7], inf);
  EXPECT_TRUE(std::isnan(out[8]));
  EXPECT_EQ(out[9], 1.f);
  EXPECT_EQ(out[10], 1.f);
  EXPECT_NEAR(out[11], std::exp(1.0), 3e-7);
  EXPECT_TRUE(std::isfinite(out[12])) << out[12];
  EXPECT_NEAR(out[12], std::exp(88.72283172607422), 1e32);
}

TEST_P(MathTest, TanhIsWithinTwoMillionthsAbsoluteAndFourUlpNearZero) {
  std::vector<float> in = Inputs(-12.f, 12.f, 4096);
  for (float x : Inputs(-0.2f, 0.2f, 512)) in.push_back(x);
  for (float x : {1e-30f, -1e-30f, 0.f, -0.f, 1e-4f, -1e-4f, 0.12499f, 0.12501f, 30.f, -30.f}) {
    in.push_back(x);
  }
  while (in.size() % 16 != 0) in.push_back(0.f);
  const std::vector<float> out = Apply("tanh", in, GetParam());
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = std::tanh(static_cast<double>(in[i]));
    const double tol = std::fabs(in[i]) < 0.125
                           ? std::fabs(want) * 4 * std::numeric_limits<float>::epsilon()
                           : 2e-7;
    ASSERT_NEAR(out[i], want, tol) << "x=" << in[i];
  }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges =
      Apply("tanh", {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.f}, 1);
  EXPECT_EQ(edges[0], 1.f);
  EXPECT_EQ(edges[1], -1.f);
  EXPECT_TRUE(std::isnan(edges[2]));
}

// The sigmoid (and swish's) 1 / (1 + exp(-x)): within 4 ulp of the result, 0 and 1 at the
// ends, NaN kept.
TEST_P(MathTest, SigmoidIsWithinFourUlp) {
  std::vector<float> in = Inputs(-90.f, 30.f, 4096);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {-inf, -1000.f, -88.8f, 0.f, 1000.f, inf, nan, 1e-30f}) in.push_back(x);
  while (in.size() % 16 != 0) in.push_back(0.f);
  const std::vector<float> out = Apply(Sigmoid, in, GetParam());
  for (size_t i = 0; i < in.size(); ++i) {
    const double x = in[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(out[i]));
      continue;
    }
    const double want = 1 / (1 + std::exp(-x));
    // Below ~-87 the exp flushes to its overflow: the sigmoid's tiny result is 0 or denormal.
    const double tol = x < -87 ? 1e-37 : want * 4 * std::numeric_limits<float>::epsilon();
    ASSERT_NEAR(out[i], want, tol) << "x=" << x;
  }
}

INSTANTIATE_TEST_SUITE_P(Lanes, MathTest, ::testing::Values(1, 8, 16),
                         [](const auto& info) { return "x" + std::to_string(info.param); });

}  // namespace
}  // namespace lathe
