// Copies that transpose a tile (codegen/transpose_copy.h): a plain convolution's weights
// packed with the output channels innermost are emitted as row loads and shuffles instead of
// gathers, and the kernel still agrees with the reference.
#include "codegen/transpose_copy.h"

#include <gtest/gtest.h>

#include <string>

#include "codegen/cpu_kernel.h"
#include "ir/printer.h"
#include "test_util.h"

namespace lathe {
namespace {

using testing::Count;
using testing::W;

// A plain NCHW convolution as the CPU space's channels-inner rule tiles it: `kt` output
// channels a tile (vectors of `lanes`), one row of 5 columns, the weights packed per channel
// tile as [c][r][s][k] by a copy whose channel loop is split by `lanes` and vectorized, the
// source's window loops (contiguous in W[k][c][r][s]) unrolled inside it when `unroll`.
ir::Schedule PlainConv(const std::string& spec, int64_t kt, int64_t lanes, bool unroll) {
  ir::Schedule sch(W(spec));
  EXPECT_TRUE(sch.CacheWrite("Y", "local").ok());
  EXPECT_TRUE(sch.StorageOrder("Y.local", {"n", "y", "x", "k"}).ok());
  auto pack = sch.CacheRead("W", "global", {"Y.local"});
  EXPECT_TRUE(pack.ok()) << pack.status();
  EXPECT_TRUE(sch.StorageOrder("W.global", {"ax1", "ax2", "ax3", "ax0"}).ok());
  EXPECT_TRUE(sch.Split("Y", "k", {kt}).ok());
  EXPECT_TRUE(sch.Split("Y", "y", {1}).ok());
  EXPECT_TRUE(sch.Split("Y", "x", {5}).ok());
  EXPECT_TRUE(sch.Reorder("Y", {"n", "k.0", "y.0", "x.0", "k.1", "y.1", "x.1"}).ok());
  EXPECT_TRUE(sch.Parallel("Y", "k.0").ok());
  EXPECT_TRUE(sch.ComputeAt("Y.local", "Y", "x.0").ok());
  EXPECT_TRUE(sch.Reorder("Y.local", {"rc", "ry", "rx", "n", "y", "x", "k"}).ok());
  EXPECT_TRUE(sch.Vectorize("Y.local", "k").ok());
  EXPECT_TRUE(sch.ComputeAt("W.global", "Y", "k.0").ok());
  auto parts = sch.Split("W.global", "ax0", {lanes});
  EXPECT_TRUE(parts.ok()) << parts.status();
  EXPECT_TRUE(sch.Reorder("W.global", {"ax1", "ax0.0", "ax2", "ax3", "ax0.1"}).ok());
  if (unroll) {
    EXPECT_TRUE(sch.Unroll("W.global", "ax2").ok());
    EXPECT_TRUE(sch.Unroll("W.global", "ax3").ok());
  }
  EXPECT_TRUE(sch.Vectorize("W.global", "ax0.1").ok());
  return sch;
}

// Builds and runs `sch` against the reference (a failure is the test's), and returns its
// optimized LLVM IR.
std::string CheckedLlvmIr(const ir::Schedule& sch) {
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
  auto f = codegen::Lower(sch, "f");
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return "";
  auto ll = codegen::EmitLlvmIr({*f});
  EXPECT_TRUE(ll.ok()) << ll.status();
  return ll.ok() ? *ll : "";
}

// 3x3 window: 9 consecutive weights per (k, c), one block of 9 columns per 16 channels.
TEST(TransposeCopyTest, AWeightPackOfSixteenLanesLoadsRowsAndShuffles) {
  const ir::Schedule sch =
      PlainConv("conv2d:n=1,c=8,h=5,w=5,k=32,r=3,s=3,pad=1", 32, 16, /*unroll=*/true);
  const std::string ll = CheckedLlvmIr(sch);
  EXPECT_EQ(Count(ll, "llvm.masked.gather"), 0u) << ll;
  EXPECT_GE(Count(ll, "shufflevector <16 x float>"), 16u) << ll;
}

// A 1x3 window on 16 lanes: 3 columns do not pay for 16 row loads; the copy stays gathers.
TEST(TransposeCopyTest, ABlockOfTooFewColumnsKeepsTheGathers) {
  const ir::Schedule sch =
      PlainConv("conv2d:n=1,c=8,h=5,w=5,k=32,r=1,s=3,pad=1", 32, 16, /*unroll=*/true);
  const std::string ll = CheckedLlvmIr(sch);
  EXPECT_GE(Count(ll, "llvm.masked.gather"), 1u) << ll;
  EXPECT_EQ(Count(ll, "shufflevector <16 x float>"), 0u) << ll;
}

// The 3x3 window on 8 lanes: its 9 columns are a block of 8 and a block of 1, which is not
// worth 8 row loads, so the nest is not taken whole; each window row's 3 columns are (the
// inner unrolled loop matches on its own).
TEST(TransposeCopyTest, EightLanesTransposeEachWindowRow) {
  const ir::Schedule sch =
      PlainConv("conv2d:n=1,c=8,h=5,w=5,k=16,r=3,s=3,pad=1", 16, 8, /*unroll=*/true);
  const std::string ll = CheckedLlvmIr(sch);
  EXPECT_EQ(Count(ll, "llvm.masked.gather"), 0u) << ll;
  EXPECT_GE(Count(ll, "shufflevector <8 x float>"), 8u) << ll;
}

// A 2x2 window on 8 lanes, two images: 4 columns of 8 rows, two channel vectors per tile.
TEST(TransposeCopyTest, NarrowBlocksOfEightLanesAreTransposed) {
  const ir::Schedule sch =
      PlainConv("conv2d:n=2,c=6,h=6,w=6,k=16,r=2,s=2,pad=1", 16, 8, /*unroll=*/true);
  const std::string ll = CheckedLlvmIr(sch);
  EXPECT_EQ(Count(ll, "llvm.masked.gather"), 0u) << ll;
  EXPECT_GE(Count(ll, "shufflevector <8 x float>"), 8u) << ll;
}

// Without the unrolled nest there is nothing to transpose: one gather per vector.
TEST(TransposeCopyTest, AVectorLoopAloneStaysAGather) {
  const ir::Schedule sch =
      PlainConv("conv2d:n=1,c=8,h=5,w=5,k=32,r=3,s=3,pad=1", 32, 16, /*unroll=*/false);
  const std::string ll = CheckedLlvmIr(sch);
  EXPECT_GE(Count(ll, "llvm.masked.gather"), 1u) << ll;
}

// An output tile written from an accumulator stored with the channels innermost, through an
// epilogue (bias + relu): the columns vectorized, the channels unrolled around them. The
// gathered vector is transposed first and the epilogue computed on it.
TEST(TransposeCopyTest, AnOutputTileIsWrittenThroughItsEpilogue) {
  ir::Schedule sch(W("conv2d:n=1,c=16,h=3,w=16,k=32,r=1,s=1,epilogue=bias_relu"));
  EXPECT_TRUE(sch.StorageOrder("conv2d", {"n", "y", "x", "k"}).ok());
  EXPECT_TRUE(sch.Split("Y", "k", {32}).ok());
  EXPECT_TRUE(sch.Split("Y", "x", {8}).ok());
  EXPECT_TRUE(sch.Reorder("Y", {"n", "k.0", "y", "x.0", "k.1", "x.1"}).ok());
  EXPECT_TRUE(sch.ComputeAt("conv2d", "Y", "x.0").ok());
  EXPECT_TRUE(sch.Reorder("conv2d", {"rc", "ry", "rx", "n", "y", "x", "k"}).ok());
  EXPECT_TRUE(sch.Vectorize("conv2d", "k").ok());
  EXPECT_TRUE(sch.Unroll("Y", "k.1").ok());
  EXPECT_TRUE(sch.Vectorize("Y", "x.1").ok());
  const std::string ll = CheckedLlvmIr(sch);
  // (The accumulator's unpacked weights are a gather of 32 lanes; the output's would be 8.)
  EXPECT_EQ(Count(ll, "call <8 x float> @llvm.masked.gather"), 0u) << ll;
  EXPECT_GE(Count(ll, "shufflevector <8 x float>"), 8u) << ll;
}

// A plain depthwise convolution's input copied per block of 16 channels with the channels
// innermost and its padding inlined into the copy: each gather is masked by the column's (and
// at the border rows the row's) bounds, the same for every lane. The copy is still row loads
// and shuffles, reading only the columns inside the image (16 columns from 2 before the row:
// the first two lanes and the last four of a 14-column row are off); the kernel agrees with the
// reference, borders included.
TEST(TransposeCopyTest, APaddedCopyReadsOnlyTheColumnsInsideTheImage) {
  ir::Schedule sch(W("conv2d:n=1,c=32,h=6,w=14,k=32,r=5,s=5,pad=2,groups=32"));
  EXPECT_TRUE(sch.CacheWrite("Y", "local").ok());
  auto in = sch.CacheRead("pad", "global", {"Y.local"});
  ASSERT_TRUE(in.ok()) << in.status();
  auto wt = sch.CacheRead("W", "global", {"Y.local"});
  ASSERT_TRUE(wt.ok()) << wt.status();
  EXPECT_TRUE(sch.ComputeInline("pad").ok());
  EXPECT_TRUE(sch.StorageOrder("pad.global", {"ax0", "ax2", "ax3", "ax1"}).ok());
  EXPECT_TRUE(sch.StorageOrder("W.global", {"ax1", "ax2", "ax3", "ax0"}).ok());
  EXPECT_TRUE(sch.StorageOrder("Y.local", {"n", "y", "x", "k"}).ok());
  EXPECT_TRUE(sch.Split("Y", "k", {16}).ok());
  EXPECT_TRUE(sch.Split("Y", "x", {7}).ok());
  EXPECT_TRUE(sch.Reorder("Y", {"n", "k.0", "y", "x.0", "k.1", "x.1"}).ok());
  EXPECT_TRUE(sch.Parallel("Y", "k.0").ok());
  EXPECT_TRUE(sch.ComputeAt("Y.local", "Y", "x.0").ok());
  EXPECT_TRUE(sch.Reorder("Y.local", {"rc", "ry", "rx", "n", "y", "x", "k"}).ok());
  EXPECT_TRUE(sch.Unroll("Y.local", "rx").ok());
  EXPECT_TRUE(sch.Vectorize("Y.local", "k").ok());
  EXPECT_TRUE(sch.ComputeAt("pad.global", "Y", "k.0").ok());
  auto c = sch.Split("pad.global", "ax1", {16});
  ASSERT_TRUE(c.ok()) << c.status();
  auto x = sch.Split("pad.global", "ax3", {16});
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_TRUE(sch.Reorder("pad.global", {"ax1.0", "ax0", "ax2", "ax3.0", "ax3.1", "ax1.1"}).ok());
  EXPECT_TRUE(sch.Unroll("pad.global", "ax3.1").ok());
  EXPECT_TRUE(sch.Vectorize("pad.global", "ax1.1").ok());
  EXPECT_TRUE(sch.ComputeAt("W.global", "Y", "k.0").ok());
  EXPECT_TRUE(sch.Vectorize("W.global", "ax0").ok());
  const std::string ll = CheckedLlvmIr(sch);
  // Only the weights' copy (25 floats apart per channel) stays a gather.
  EXPECT_LE(Count(ll, "call <16 x float> @llvm.masked.gather"), 1u) << ll;
  EXPECT_GE(Count(ll, "shufflevector <16 x float>"), 32u) << ll;
  EXPECT_GE(Count(ll, "@llvm.masked.load.v16f32"), 16u) << ll;
}

}  // namespace
}  // namespace lathe
