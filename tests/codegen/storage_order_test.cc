// Schedule::StorageOrder: an intermediate stage stored with its dimensions permuted. The
// convolution schedule it exists for (weights packed with the output channels innermost, the
// accumulator tile vectorized over output channels) must build and agree with the reference,
// and the packed weights must be read as whole vectors.
#include <gtest/gtest.h>

#include "codegen/cpu_kernel.h"
#include "codegen/lower.h"
#include "ir/printer.h"
#include "ir/schedule.h"
#include "test_util.h"

namespace lathe {
namespace {

using testing::W;

TEST(StorageOrderTest, TransposedAccumulatorOfAMatmul) {
  ir::Schedule sch(W("matmul:m=12,n=20,k=8"));
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  ASSERT_TRUE(sch.StorageOrder("C.local", {"j", "i"}).ok());
  const ir::Stage* s = sch.FindStage("C.local");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->tensor->shape, (std::vector<int64_t>{20, 12}));
  EXPECT_EQ(s->root_loops, (std::vector<std::string>{"j", "i", "k"}));
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  ASSERT_TRUE(sch.ComputeAt("C.local", "C", "i.0").ok());
  ASSERT_TRUE(sch.Reorder("C.local", {"k", "j", "i"}).ok());
  ASSERT_TRUE(sch.Vectorize("C.local", "i").ok());
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
  // The trace replays it.
  auto again = ir::ApplyTrace(sch.workload(), sch.trace());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(testing::BuildAndCheck(*again).ok());
}

TEST(StorageOrderTest, ConvWithChannelsInnermost) {
  ir::Schedule sch(W("conv2d:n=1,c=16,h=10,w=10,k=32,r=3,s=3,pad=1"));
  ASSERT_TRUE(sch.CacheWrite("Y", "local").ok());
  ASSERT_TRUE(sch.StorageOrder("Y.local", {"n", "y", "x", "k"}).ok());
  auto wg = sch.CacheRead("W", "global", {"Y.local"});
  ASSERT_TRUE(wg.ok()) << wg.status();
  ASSERT_TRUE(sch.StorageOrder(*wg, {"ax1", "ax2", "ax3", "ax0"}).ok());
  auto k = sch.Split("Y", "k", {16});
  ASSERT_TRUE(k.ok());
  auto x = sch.Split("Y", "x", {4});
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k.0", "y", "x.0", "k.1", "x.1"}).ok());
  auto f = sch.Fuse("Y", {"n", "k.0"});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(sch.Parallel("Y", *f).ok());
  ASSERT_TRUE(sch.ComputeAt("Y.local", "Y", "x.0").ok());
  ASSERT_TRUE(sch.Reorder("Y.local", {"rc", "ry", "rx", "n", "y", "x", "k"}).ok());
  ASSERT_TRUE(sch.Vectorize("Y.local", "k").ok());
  ASSERT_TRUE(sch.Unroll("Y.local", "x").ok());
  ASSERT_TRUE(sch.ComputeAt(*wg, "Y", *f).ok());
  absl::Status st = testing::BuildAndCheck(sch);
  ASSERT_TRUE(st.ok()) << st;

  auto fn = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(fn.ok()) << fn.status();
  const std::string text = ir::ToText(fn->body);
  // The packed weights hold 16 channels innermost: c x 3 x 3 x 16 per channel tile.
  EXPECT_NE(text.find("W.global[Y.local.rc*144 + (Y.local.ry*48) + (Y.local.rx*16) + Y.local.k]"),
            std::string::npos)
      << text;
}

// Two 8-channel blocks of a blocked convolution side by side in one 16-lane vector (CpuSpace's
// pair_blocks): the accumulator stored (n, y, x, k, kv), its block loop split by two and fused
// with the block. Its tile is read and written as whole vectors, its weights as one run of a
// block per channel block; 3 blocks leave the last pair half full.
void PairedBlockedConv(const std::string& spec, std::string* text, std::string* llvm_ir) {
  ir::Schedule sch(W(spec));
  ASSERT_TRUE(sch.CacheWrite("Y", "local").ok());
  ASSERT_TRUE(sch.StorageOrder("Y.local", {"n", "y", "x", "k", "kv"}).ok());
  auto k = sch.Split("Y", "k", {2});
  ASSERT_TRUE(k.ok());
  auto x = sch.Split("Y", "x", {4});
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k.0", "y", "x.0", "k.1", "x.1", "kv"}).ok());
  ASSERT_TRUE(sch.Vectorize("Y", "kv").ok());
  ASSERT_TRUE(sch.ComputeAt("Y.local", "Y", "x.0").ok());
  auto kp = sch.Split("Y.local", "k", {2});
  ASSERT_TRUE(kp.ok());
  ASSERT_TRUE(
      sch.Reorder("Y.local", {"rc", "ry", "rx", "rv", "n", "y", "x", "k.0", "k.1", "kv"}).ok());
  ASSERT_TRUE(sch.Unroll("Y.local", "x").ok());
  auto f = sch.Fuse("Y.local", {"k.1", "kv"});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(sch.Vectorize("Y.local", *f).ok());
  absl::Status st = testing::BuildAndCheck(sch);
  ASSERT_TRUE(st.ok()) << st;
  auto fn = codegen::Lower(sch, "f");
  ASSERT_TRUE(fn.ok()) << fn.status();
  *text = ir::ToText(fn->body);
  auto ll = codegen::EmitLlvmIr({*fn});
  ASSERT_TRUE(ll.ok()) << ll.status();
  *llvm_ir = *ll;
}

TEST(StorageOrderTest, PairedChannelBlocks) {
  // 4 blocks: two pairs; 3 blocks: the second pair half full, its update masked.
  for (const char* spec : {"conv2d:n=1,c=16,h=6,w=8,k=32,r=3,s=3,pad=1,layout=nchw8c,kblock=8",
                           "conv2d:n=1,c=16,h=5,w=7,k=24,r=3,s=3,pad=1,layout=nchw8c,kblock=8"}) {
    SCOPED_TRACE(spec);
    std::string text, llvm_ir;
    PairedBlockedConv(spec, &text, &llvm_ir);
    if (HasFailure()) return;
    // 8*(f/8) + f%8 == f: the accumulator tile is one contiguous 16-lane vector.
    EXPECT_NE(text.find("Y.local[ramp(Y.local.n*64 + (Y.local.y*64) + (Y.local.x*16) + "
                        "(Y.local.k.0*16), 1, 16)] = Y.local[ramp("),
              std::string::npos)
        << text;
    // The weights: two runs of 8 (one per block), loaded as such rather than gathered.
    EXPECT_NE(text.find("(((ramp(0, 1, 16))/(x16(8)))*(x16(1152)))"), std::string::npos) << text;
    EXPECT_EQ(llvm_ir.find("masked.gather"), std::string::npos);
    EXPECT_EQ(llvm_ir.find("masked.scatter"), std::string::npos);
  }
}

TEST(StorageOrderTest, BadUsesAreRefused) {
  ir::Schedule sch(W("matmul:m=12,n=20,k=8"));
  EXPECT_FALSE(sch.StorageOrder("C", {"j", "i"}).ok()) << "the output's layout is fixed";
  EXPECT_FALSE(sch.StorageOrder("A", {"ax1", "ax0"}).ok()) << "placeholders are not stages";
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  EXPECT_FALSE(sch.StorageOrder("C.local", {"j"}).ok());
  EXPECT_FALSE(sch.StorageOrder("C.local", {"j", "j"}).ok());
  EXPECT_FALSE(sch.StorageOrder("C.local", {"j", "k"}).ok()) << "k is a reduce axis";
  ASSERT_TRUE(sch.Split("C.local", "i", {4}).ok());
  absl::Status st = sch.StorageOrder("C.local", {"j", "i"});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("before the stage's loops are transformed"), std::string::npos);
}

}  // namespace
}  // namespace lathe
