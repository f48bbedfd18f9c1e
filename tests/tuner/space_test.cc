// The CPU search space: every sampled or mutated candidate of every op is a valid schedule
// that builds and agrees with the reference; candidates round-trip through their traces.
#include "tuner/space.h"

#include <gtest/gtest.h>

#include "ir/printer.h"
#include "test_util.h"  // tests/codegen: BuildAndCheck

namespace lathe::tuner {
namespace {

class SpaceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpaceTest, SamplesAndMutationsAreCorrectKernels) {
  auto w = ir::MakeWorkload(GetParam());
  ASSERT_TRUE(w.ok()) << w.status();
  auto space = SearchSpace::Create(*w, HostCpuTarget());
  ASSERT_TRUE(space.ok()) << space.status();
  std::mt19937_64 rng(42);
  std::set<std::string> distinct;
  for (int i = 0; i < 6; ++i) {
    auto c = (*space)->Sample(rng);
    ASSERT_TRUE(c.ok()) << c.status();
    auto m = (*space)->Mutate(*c, rng);
    ASSERT_TRUE(m.ok()) << m.status();
    for (const Candidate* x : {&*c, &*m}) {
      auto sch = (*space)->Apply(*x);
      ASSERT_TRUE(sch.ok()) << sch.status();
      absl::Status st = testing::BuildAndCheck(*sch, 5);
      ASSERT_TRUE(st.ok()) << st << "\n" << ir::TraceToText(x->trace);
      distinct.insert(ir::TraceToJson(x->trace));
      // The trace alone replays to the same schedule, and maps back to its decisions.
      auto back = (*space)->FromTrace(*ir::TraceFromJson(ir::TraceToJson(x->trace)));
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->decisions, x->decisions);
    }
  }
  EXPECT_GT(distinct.size(), 4u) << "sampling should explore";
}

INSTANTIATE_TEST_SUITE_P(
    Ops, SpaceTest,
    ::testing::Values("matmul:m=64,n=64,k=64", "matmul:m=37,n=50,k=23,epilogue=bias_relu",
                      "batch_matmul:b=2,m=16,n=24,k=8",
                      "conv2d:n=1,c=8,h=14,w=14,k=16,r=3,s=3,pad=1",
                      "conv2d:n=1,c=8,h=9,w=9,k=8,r=3,s=3,pad=1,groups=8,epilogue=bias",
                      "conv2d:n=1,c=4,h=8,w=8,k=8,r=1,s=1,layout=nhwc",
                      "pool2d:n=1,c=4,h=9,w=9,r=3,s=3,stride=2,pad=1", "softmax:m=8,n=40",
                      "layer_norm:m=6,n=33"));

}  // namespace
}  // namespace lathe::tuner
