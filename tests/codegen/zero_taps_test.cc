// Products of a padding skipped (codegen/zero_taps.h) and the border tiles peeled for them
// (codegen/partition.h): the compiled kernel holds only the multiply-adds of taps inside the
// image, and still agrees with the reference.
#include "codegen/zero_taps.h"

#include <gtest/gtest.h>

#include <string>

#include "codegen/cpu_kernel.h"
#include "ir/printer.h"
#include "test_util.h"

namespace lathe {
namespace {

using testing::Count;
using testing::W;

// A 3x3 convolution in nchw16c with its padding inlined, as the CPU space's blocked rule
// tiles it: 2 output blocks x `cols` columns of accumulators, the input block's lanes
// unrolled by 4, the window's columns unrolled (and the tile's one row, where `unroll_row`).
ir::Schedule BlockedConv(const std::string& spec, int64_t cols, bool unroll_row = false) {
  ir::Schedule sch(W(spec));
  for (const ir::Stage& s : sch.stages()) {
    if (s.tensor->tag == "pad") {
      EXPECT_TRUE(sch.ComputeInline(s.name).ok());
    }
  }
  EXPECT_TRUE(sch.CacheWrite("Y", "local").ok());
  EXPECT_TRUE(sch.Split("Y", "n", {1}).ok());
  EXPECT_TRUE(sch.Split("Y", "k", {2}).ok());
  EXPECT_TRUE(sch.Split("Y", "y", {1}).ok());
  EXPECT_TRUE(sch.Split("Y", "x", {cols}).ok());
  EXPECT_TRUE(sch.Split("Y", "kv", {16}).ok());
  EXPECT_TRUE(
      sch.Reorder("Y", {"n.0", "k.0", "y.0", "x.0", "kv.0", "n.1", "k.1", "y.1", "x.1", "kv.1"})
          .ok());
  EXPECT_TRUE(sch.Fuse("Y", {"n.0", "k.0"}).ok());
  EXPECT_TRUE(sch.Parallel("Y", "n.0+k.0").ok());
  EXPECT_TRUE(sch.Vectorize("Y", "kv.1").ok());
  EXPECT_TRUE(sch.ComputeAt("Y.local", "Y", "kv.0").ok());
  EXPECT_TRUE(sch.Split("Y.local", "rv", {4}).ok());
  EXPECT_TRUE(
      sch.Reorder("Y.local", {"rc", "ry", "rx", "rv.0", "rv.1", "n", "k", "y", "x", "kv"}).ok());
  for (const char* l : {"rv.1", "k", "x", "rx"}) EXPECT_TRUE(sch.Unroll("Y.local", l).ok());
  if (unroll_row) {
    EXPECT_TRUE(sch.Unroll("Y.local", "y").ok());
  }
  EXPECT_TRUE(sch.Vectorize("Y.local", "kv").ok());
  return sch;
}

// The multiply-adds of the compiled kernel (one `fmul contract` each).
size_t Products(const ir::Schedule& sch, const codegen::LowerOptions& options, std::string* text) {
  auto f = codegen::Lower(sch, "f", options);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return 0;
  *text = ir::ToText(f->body);
  auto ll = codegen::EmitLlvmIr({*f});
  EXPECT_TRUE(ll.ok()) << ll.status();
  return ll.ok() ? Count(*ll, "fmul contract") : 0;
}

// 7 columns in one tile: of the 7 x 3 (column, tap) products per row, 19 read the image.
TEST(ZeroTapsTest, BorderTapsOfARowTileAreNotComputed) {
  const ir::Schedule sch =
      BlockedConv("conv2d:n=1,c=16,h=7,w=7,k=32,r=3,s=3,pad=1,layout=nchw16c", 7);
  std::string text;
  // 2 blocks x 4 lanes x 19 column taps, once (the rows are not versioned: their guard is
  // one branch per row of the window).
  EXPECT_EQ(Products(sch, {}, &text), 2u * 4u * 19u) << text;
  EXPECT_EQ(text.find("select("), std::string::npos) << text;
  EXPECT_EQ(Count(text, "if (((Y.y.0 + Y.local.ry) - 1) >= 0)"), 1u) << text;
  codegen::LowerOptions all_taps;
  all_taps.skip_zero_taps = false;
  // Without the pass: every tap, in two copies (the rows versioned for the selects).
  EXPECT_GE(Products(sch, all_taps, &text), 2u * 2u * 4u * 21u) << text;
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
}

// The tile's one row unrolled (as the CPU space unrolls a register tile's rows): a loop of one
// iteration is no hot loop, so the row guard still rises to the window's rows rather than
// staying a select per product.
TEST(ZeroTapsTest, AnUnrolledRowOfOneIterationKeepsTheRowGuardAboveTheTile) {
  const ir::Schedule sch =
      BlockedConv("conv2d:n=1,c=16,h=7,w=7,k=32,r=3,s=3,pad=1,layout=nchw16c", 7, true);
  std::string text;
  EXPECT_EQ(Products(sch, {}, &text), 2u * 4u * 19u) << text;
  EXPECT_EQ(text.find("select("), std::string::npos) << text;
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
}

// Two tiles of 7 columns over 14: each touches the padding on one side; both are peeled
// into copies with the tile a constant (20 of 21 products each).
TEST(ZeroTapsTest, ColumnTilesAtBothBordersArePeeled) {
  const ir::Schedule sch =
      BlockedConv("conv2d:n=1,c=16,h=9,w=14,k=32,r=3,s=3,pad=1,layout=nchw16c", 7);
  std::string text;
  EXPECT_EQ(Products(sch, {}, &text), 2u * (2u * 4u * 20u)) << text;
  EXPECT_EQ(Count(text, "if Y.x.0 == 0 {"), 1u) << text;
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
}

// Four tiles over 28 columns, the last one short (6 x 5 = 30): the first and the last are
// peeled, the two between run guard-free.
TEST(ZeroTapsTest, InnerColumnTilesRunWithoutGuards) {
  const ir::Schedule sch =
      BlockedConv("conv2d:n=1,c=32,h=5,w=28,k=32,r=3,s=3,pad=1,stride=1,layout=nchw16c", 6);
  std::string text;
  // First tile 17 of 18, inner tiles 18, the last tile 4 columns: 11 of 12.
  EXPECT_EQ(Products(sch, {}, &text), 2u * 4u * (17u + 18u + 11u)) << text;
  EXPECT_EQ(Count(text, "if Y.x.0 == 0 {"), 1u) << text;
  EXPECT_EQ(Count(text, "if Y.x.0 < 4 {"), 1u) << text;
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
}

}  // namespace
}  // namespace lathe
