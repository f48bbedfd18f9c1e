// Loop versioning for guards (codegen/partition.h): which loops are versioned, that the
// guard-free copy really lost its guards, and that the built kernels still agree with the
// reference (BuildAndCheck runs the whole backend, versioning included).
#include "codegen/partition.h"

#include <gtest/gtest.h>

#include "ir/printer.h"
#include "test_util.h"

namespace lathe {
namespace {

using testing::Count;
using testing::W;

// The GEMM micro-kernel shape: a 4-row accumulator tile over 10 rows leaves a last tile of 2
// rows; every row of the reduction is guarded (C.local vectorized over 8 columns).
ir::Schedule TailTileGemm() {
  ir::Schedule sch(W("matmul:m=10,n=16,k=8"));
  EXPECT_TRUE(sch.CacheWrite("C", "local").ok());
  EXPECT_TRUE(sch.Split("C", "i", {4}).ok());
  EXPECT_TRUE(sch.Split("C", "j", {8}).ok());
  EXPECT_TRUE(sch.Reorder("C", {"j.0", "i.0", "i.1", "j.1"}).ok());
  EXPECT_TRUE(sch.Parallel("C", "j.0").ok());
  EXPECT_TRUE(sch.ComputeAt("C.local", "C", "i.0").ok());
  EXPECT_TRUE(sch.Reorder("C.local", {"k", "i", "j"}).ok());
  EXPECT_TRUE(sch.Vectorize("C.local", "j").ok());
  return sch;
}

// Tiles 0 and 1 of the tail-tile GEMM get a copy without the guard.
TEST(PartitionTest, TailTileOfAnAccumulatorIsVersioned) {
  const ir::Schedule sch = TailTileGemm();
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string before = ir::ToText(f->body);
  const std::string guard = "(C.i.0*4 + C.local.i) < 10";
  ASSERT_EQ(Count(before, guard), 2u) << before;  // init and update

  const std::string after = ir::ToText(codegen::PartitionLoops(f->body));
  EXPECT_EQ(Count(after, "if C.i.0 <= 1 {"), 1u) << after;
  // The guards are left in the copy for the last tile only.
  EXPECT_EQ(Count(after, guard), 2u) << after;
  EXPECT_EQ(Count(after, "for C.local.k in 0..8"), 2u) << after;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch);
}

// Padding inlined into a convolution: the selects of the halo hold only at the borders, so
// the inner rows of the output get a select-free copy; the vectorized loop's tail (28 is no
// multiple of 8) keeps its mask in the last column tile only.
TEST(PartitionTest, PaddingSelectsLeaveTheInterior) {
  ir::Schedule sch(W("conv2d:n=1,c=4,h=28,w=28,k=8,r=3,s=3,pad=1"));
  for (const ir::Stage& s : sch.stages()) {
    if (s.tensor->tag == "pad") {
      ASSERT_TRUE(sch.ComputeInline(s.name).ok());
    }
  }
  ASSERT_TRUE(sch.CacheWrite("Y", "local").ok());
  ASSERT_TRUE(sch.Split("Y", "y", {2}).ok());
  ASSERT_TRUE(sch.Split("Y", "x", {8}).ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k", "y.0", "x.0", "y.1", "x.1"}).ok());
  ASSERT_TRUE(sch.ComputeAt("Y.local", "Y", "x.0").ok());
  ASSERT_TRUE(sch.Vectorize("Y.local", "x").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string before = ir::ToText(f->body);
  ASSERT_NE(before.find("select("), std::string::npos) << before;
  const std::string after = ir::ToText(codegen::PartitionLoops(f->body));
  // y.0 in 1..12 and, inside, x.0 in 1..2 are free of the halo.
  EXPECT_NE(after.find("if (Y.y.0 >= 1) && (Y.y.0 <= 12) {"), std::string::npos) << after;
  EXPECT_NE(after.find("if (Y.x.0 >= 1) && (Y.x.0 <= 2) {"), std::string::npos) << after;
  EXPECT_GE(Count(after, "select("), 1u) << after;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch);
}

// Loops without guards, and guards that no contiguous range of the loop avoids, stay as
// they are.
TEST(PartitionTest, NothingToVersion) {
  ir::Schedule sch(W("matmul:m=8,n=8,k=8"));
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ir::ToText(codegen::PartitionLoops(f->body)), ir::ToText(f->body));
}

// A column tail under a vectorized loop: the guard would become a lane mask on every load and
// store of the tile (LLVM's masked intrinsics; a 40x6625x120 matmul with 16-wide tiles ran
// 18x slower masked than versioned), so the tile loop gets a guard-free copy too.
TEST(PartitionTest, ColumnTailOfAVectorLoopIsVersioned) {
  ir::Schedule lanes(W("matmul:m=4,n=12,k=3"));
  ASSERT_TRUE(lanes.CacheWrite("C", "local").ok());
  ASSERT_TRUE(lanes.Split("C", "j", {8}).ok());
  ASSERT_TRUE(lanes.ComputeAt("C.local", "C", "j.0").ok());
  ASSERT_TRUE(lanes.Reorder("C.local", {"k", "i", "j"}).ok());
  ASSERT_TRUE(lanes.Vectorize("C.local", "j").ok());
  ASSERT_TRUE(lanes.Vectorize("C", "j.1").ok());
  auto g = codegen::Lower(lanes, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_NE(ir::ToText(g->body).find("(C.j.0*8 + C.local.j) < 12"), std::string::npos);
  const std::string text = ir::ToText(codegen::PartitionLoops(g->body));
  const size_t fast = text.find("if C.j.0 <= 0 {"), slow = text.find("} else {");
  ASSERT_NE(fast, std::string::npos) << text;
  ASSERT_NE(slow, std::string::npos) << text;
  EXPECT_EQ(text.substr(fast, slow - fast).find("< 12"), std::string::npos) << text;
  EXPECT_NE(text.substr(slow).find("(C.j.0*8 + C.local.j) < 12"), std::string::npos) << text;
}

// A row of two column tiles, both touching the padding, over one block of 24 channels (a
// vector and a half): the two peeled copies are all the work there is, and each splits off
// the guard of the channels' partial vector (unsplit, every access of the tile was masked and
// its accumulators stayed in memory: depthwise 3x3 over a block of 200 at 28x28, 56 -> 23 us).
TEST(PartitionTest, TwoPeeledBorderCopiesAreVersionedFurther) {
  ir::Schedule sch(W("conv2d:n=1,c=24,h=6,w=8,k=24,r=3,s=3,pad=1,groups=24,layout=nchw24c"));
  for (const ir::Stage& s : sch.stages()) {
    if (s.tensor->tag == "pad") {
      ASSERT_TRUE(sch.ComputeInline(s.name).ok());
    }
  }
  ASSERT_TRUE(sch.CacheWrite("Y", "local").ok());
  ASSERT_TRUE(sch.Split("Y", "x", {4}).ok());
  ASSERT_TRUE(sch.Split("Y", "kv", {16}).ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k", "y", "x.0", "kv.0", "x.1", "kv.1"}).ok());
  ASSERT_TRUE(sch.Vectorize("Y", "kv.1").ok());
  ASSERT_TRUE(sch.ComputeAt("Y.local", "Y", "kv.0").ok());
  ASSERT_TRUE(sch.Reorder("Y.local", {"ry", "rx", "n", "k", "y", "x", "kv"}).ok());
  for (const char* l : {"rx", "x"}) ASSERT_TRUE(sch.Unroll("Y.local", l).ok());
  ASSERT_TRUE(sch.Vectorize("Y.local", "kv").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string text = ir::ToText(codegen::PartitionLoops(f->body));
  EXPECT_EQ(Count(text, "if Y.x.0 == 0 {"), 1u) << text;
  EXPECT_EQ(Count(text, "if Y.kv.0 <= 0 {"), 2u) << text;
  absl::Status st = testing::BuildAndCheck(sch);
  EXPECT_TRUE(st.ok()) << st;
}

// The guard of a fused loop (i.0 and j.0 fused; j tiles do not divide) holds on no
// contiguous range of the fused index: the loop is versioned by the guard at its worst case
// over the tile (the last column of the tile inside the tensor); asked to, the tail tiles'
// copy then versions its column loop by range (columns 0 and 1 exist in every tile).
TEST(PartitionTest, FusedLoopIsVersionedByPredicate) {
  ir::Schedule fused(W("matmul:m=8,n=10,k=8"));
  ASSERT_TRUE(fused.Split("C", "i", {4}).ok());
  ASSERT_TRUE(fused.Split("C", "j", {4}).ok());
  ASSERT_TRUE(fused.Reorder("C", {"i.0", "j.0", "i.1", "j.1"}).ok());
  ASSERT_TRUE(fused.Fuse("C", {"i.0", "j.0"}).ok());
  auto g = codegen::Lower(fused, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string text = ir::ToText(codegen::PartitionLoops(g->body));
  EXPECT_EQ(Count(text, "if (((C.i.0+j.0 % 3)*4) - 7) < 0 {"), 1u) << text;
  EXPECT_EQ(Count(text, "if ((C.i.0+j.0 % 3)*4 + C.j.1) < 10 {"), 2u) << text;
  EXPECT_EQ(Count(text, "if C.j.1 <= 1 {"), 0u) << text;
  codegen::PartitionOptions all;
  all.version_slow_copies = true;
  const std::string every = ir::ToText(codegen::PartitionLoops(g->body, all));
  EXPECT_EQ(Count(every, "if C.j.1 <= 1 {"), 1u) << every;
  EXPECT_TRUE(testing::BuildAndCheck(fused).ok()) << testing::BuildAndCheck(fused);
}

// The limits on versioned loops hold.
TEST(PartitionTest, DepthLimit) {
  ir::Schedule sch(W("matmul:m=10,n=10,k=10"));
  ASSERT_TRUE(sch.Split("C", "i", {4}).ok());
  ASSERT_TRUE(sch.Split("C", "j", {4}).ok());
  ASSERT_TRUE(sch.Split("C", "k", {4}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"i.0", "j.0", "k.0", "i.1", "j.1", "k.1"}).ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  codegen::PartitionOptions one;
  one.max_depth = 1;
  const std::string text = ir::ToText(codegen::PartitionLoops(f->body, one));
  EXPECT_EQ(Count(text, "if C.i.0 <= 1 {"), 1u) << text;
  EXPECT_EQ(Count(text, "if C.j.0 <= 1 {"), 0u) << text;
  // By default the copy for the tail rows (i.0 == 2) is not versioned again.
  const std::string full = ir::ToText(codegen::PartitionLoops(f->body));
  EXPECT_EQ(Count(full, "if C.j.0 <= 1 {"), 1u) << full;
  codegen::PartitionOptions all;
  all.version_slow_copies = true;
  const std::string every = ir::ToText(codegen::PartitionLoops(f->body, all));
  EXPECT_EQ(Count(every, "if C.j.0 <= 1 {"), 2u) << every;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch);
}

}  // namespace
}  // namespace lathe

namespace lathe {
namespace {

// The last column tile of an accumulator (12 columns in tiles of 8): the accumulator is a
// local buffer, so its stores and loads take every lane (the masked-off lanes are columns
// past the tensor's edge, read by nobody) and it stays in registers; the loads of the inputs
// and the store of the output keep their masks.
TEST(VectorizeTest, LocalAccumulatorOfATailTileIsUnmasked) {
  ir::Schedule sch(W("matmul:m=4,n=12,k=3"));
  ASSERT_TRUE(sch.CacheWrite("C", "local").ok());
  ASSERT_TRUE(sch.Split("C", "j", {8}).ok());
  ASSERT_TRUE(sch.Reorder("C", {"i", "j.0", "j.1"}).ok());
  ASSERT_TRUE(sch.ComputeAt("C.local", "C", "j.0").ok());
  ASSERT_TRUE(sch.Reorder("C.local", {"k", "i", "j"}).ok());
  ASSERT_TRUE(sch.Vectorize("C.local", "j").ok());
  ASSERT_TRUE(sch.Vectorize("C", "j.1").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string text = ir::ToText(codegen::VectorizeLoops(f->body));
  // Masked: the loads of B and the store of C; not the accumulator.
  EXPECT_EQ(Count(text, "C.local[ramp(C.local.i*8, 1, 8)] = x8(0f)\n"), 1u) << text;
  EXPECT_EQ(Count(text, "] = C.local[ramp(C.local.i*8, 1, 8)] + "), 1u) << text;
  EXPECT_NE(text.find("B[ramp(C.local.k*12 + (C.j.0*8), 1, 8)] if "), std::string::npos) << text;
  EXPECT_NE(text.find("] = C.local[ramp(0, 1, 8)] if "), std::string::npos) << text;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch);
}

}  // namespace
}  // namespace lathe

namespace lathe {
namespace {

// A row guard (the last row tile of a convolution sticks out of the image) around the
// accumulation into a local tile whose scalar loads (the weights) stay inside their buffer
// for every row: it becomes a lane mask on the input loads instead of a branch, and the
// tile's stores are unmasked. The output store keeps its branch.
TEST(VectorizeTest, RowGuardOfALocalTileBecomesAMask) {
  ir::Schedule sch(W("conv2d:n=1,c=2,h=5,w=8,k=2,r=3,s=3,pad=1"));
  ASSERT_TRUE(sch.CacheWrite("Y", "local").ok());
  ASSERT_TRUE(sch.Split("Y", "y", {2}).ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k", "y.0", "x", "y.1"}).ok());
  ASSERT_TRUE(sch.Reorder("Y", {"n", "k", "y.0", "y.1", "x"}).ok());
  ASSERT_TRUE(sch.ComputeAt("Y.local", "Y", "y.0").ok());
  ASSERT_TRUE(sch.Reorder("Y.local", {"rc", "ry", "rx", "n", "k", "y", "x"}).ok());
  ASSERT_TRUE(sch.Vectorize("Y.local", "x").ok());
  auto f = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string before = ir::ToText(f->body);
  const std::string guard = "(Y.y.0*2 + Y.local.y) < 5";
  ASSERT_NE(before.find("if " + guard), std::string::npos) << before;
  const std::string text = ir::ToText(codegen::VectorizeLoops(f->body));
  EXPECT_EQ(text.find("if " + guard), std::string::npos) << text;
  EXPECT_NE(text.find("x8(" + guard + ")"), std::string::npos) << text;
  EXPECT_EQ(Count(text, "Y.local[ramp(Y.local.n*16 + (Y.local.k*16) + (Y.local.y*8), 1, 8)] = "),
            2u)
      << text;
  EXPECT_TRUE(testing::BuildAndCheck(sch).ok()) << testing::BuildAndCheck(sch);
}

// Lower()'s recipe: the CPU one is structural lowering, then versioning, then vectorization,
// so what the cost model featurizes (Lower's result) is what the LLVM backend compiles; the
// CUDA recipe keeps the vectorized loops (float4 accesses) and the guards.
TEST(LowerRecipeTest, CpuRecipeVersionsThenVectorizes) {
  const ir::Schedule sch = TailTileGemm();
  auto structural = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  auto cpu = codegen::Lower(sch, "f");
  auto cuda = codegen::Lower(sch, "f", codegen::LowerOptions::ForTarget(ir::TargetKind::kCuda));
  ASSERT_TRUE(structural.ok() && cpu.ok() && cuda.ok());
  const std::string by_hand =
      ir::ToText(codegen::VectorizeLoops(codegen::PartitionLoops(structural->body)));
  EXPECT_EQ(ir::ToText(cpu->body), by_hand);
  EXPECT_NE(by_hand.find("ramp("), std::string::npos) << by_hand;
  EXPECT_NE(by_hand.find("if C.i.0 <= 1 {"), std::string::npos) << by_hand;
  EXPECT_EQ(ir::ToText(cuda->body), ir::ToText(structural->body));
  EXPECT_EQ(ir::ToText(cuda->body).find("ramp("), std::string::npos);

  codegen::LowerOptions no_versioning;
  no_versioning.partition = false;
  auto plain = codegen::Lower(sch, "f", no_versioning);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(ir::ToText(plain->body), ir::ToText(codegen::VectorizeLoops(structural->body)));
}

// The LLVM backend compiles what it is given: a loop still marked vectorized (a program
// lowered without the CPU recipe's vectorization) is refused, not run as a scalar loop.
TEST(LowerRecipeTest, LlvmBackendRefusesUnvectorizedLoops) {
  ir::Schedule sch(W("matmul:m=8,n=16,k=8"));
  ASSERT_TRUE(sch.Vectorize("C", "j").ok());
  auto structural = codegen::Lower(sch, "f", codegen::LowerOptions::StructuralOnly());
  ASSERT_TRUE(structural.ok());
  auto k = codegen::JitCompile(*structural);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
  EXPECT_NE(k.status().message().find("still marked vectorized"), absl::string_view::npos)
      << k.status();
  auto cpu = codegen::Lower(sch, "f");
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(codegen::JitCompile(*cpu).ok());
}

}  // namespace
}  // namespace lathe
