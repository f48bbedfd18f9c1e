// The CPU search space's rule-picked candidates (tuner/cpu_rules/): what a tuning run measures
// first and what a model is built with before any tuning, for AVX2 and AVX-512 target
// descriptions: the tiles, loop orders, packing and paddings each rule picks, and that every
// one builds and agrees with the reference.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/printer.h"
#include "proto/trace_io.h"
#include "test_util.h"  // tests/codegen: BuildAndCheck
#include "tests/tuner/space_test_util.h"
#include "tests/tuner/test_targets.h"
#include "tuner/space.h"

namespace lathe::tuner {
namespace {

// The first rule-picked candidate of a large GEMM on an AVX2-like target is the classic
// micro-kernel: 6 rows x 2 vectors of accumulators, B's column panel packed once per
// parallel column tile, column tiles outermost and parallel.
TEST(SpaceHeuristicTest, GemmGetsTheRegisterMicroKernelFirst) {
  auto w = ir::MakeWorkload("matmul:m=1024,n=1024,k=1024");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, Avx2TwoCores());
  ASSERT_TRUE(space.ok()) << space.status();
  std::vector<Candidate> rules = (*space)->Heuristic(4);
  ASSERT_EQ(rules.size(), 4u);
  const std::string text = ir::TraceToText(rules[0].trace);
  EXPECT_NE(text.find("split(C, [i], {6})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(C, [j], {16})"), std::string::npos) << text;
  EXPECT_NE(text.find("cache_read(B, C.local, \"global\")"), std::string::npos) << text;
  EXPECT_NE(text.find("reorder(C, [j.0, i.0, i.1, j.1])"), std::string::npos) << text;
  EXPECT_NE(text.find("parallel(C, [j.0])"), std::string::npos) << text;
  EXPECT_EQ(text.find("cache_read(A"), std::string::npos) << text;
}

// A 3x3 NCHW convolution's first rule-picked candidate is vectorized over the output
// channels: the accumulator and the packed weights are stored with the channels innermost,
// 2 vectors of channels x 4 columns of accumulators, parallel over the channel tiles. Among
// the next ones: one vector of columns x 2 rows x 6 channels, the kernel columns unrolled.
TEST(SpaceHeuristicTest, ConvGetsTheChannelVectorKernelFirst) {
  auto w = ir::MakeWorkload("conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1");
  ASSERT_TRUE(w.ok());
  auto space = SearchSpace::Create(*w, Avx2TwoCores());
  ASSERT_TRUE(space.ok()) << space.status();
  std::vector<Candidate> rules = (*space)->Heuristic(8);
  ASSERT_GE(rules.size(), 6u);
  const std::string text = ir::TraceToText(rules[0].trace);
  EXPECT_NE(text.find("storage_order(Y.local, [n, y, x, k])"), std::string::npos) << text;
  EXPECT_NE(text.find("storage_order(W.global, [ax1, ax2, ax3, ax0])"), std::string::npos) << text;
  // First (16 registers): two channel vectors by 4 columns, the window's columns unrolled; then
  // the channels mode 2 tile: 2 vectors by 6 columns, the input channels split by 4 innermost of
  // the reduction and unrolled (first on 32 registers: PlainConvChannelTilesFitTheRegistersAndL2).
  EXPECT_NE(text.find("split(Y, [k], {16})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [x], {4})"), std::string::npos) << text;
  EXPECT_NE(text.find("unroll(Y.local, [rx])"), std::string::npos) << text;
  EXPECT_NE(text.find("vectorize(Y.local, [k])"), std::string::npos) << text;
  EXPECT_NE(text.find("parallel(Y, [n.0+k.0])"), std::string::npos) << text;
  const std::string second = ir::TraceToText(rules[1].trace);
  EXPECT_NE(second.find("split(Y, [k], {16})"), std::string::npos) << second;
  EXPECT_NE(second.find("split(Y, [x], {6})"), std::string::npos) << second;
  EXPECT_NE(second.find("split(Y.local, [rc], {4})"), std::string::npos) << second;
  EXPECT_NE(second.find("reorder(Y.local, [rc.0, ry, rx, rc.1, n, y, x, k])"), std::string::npos)
      << second;
  EXPECT_NE(second.find("unroll(Y.local, [rc.1])"), std::string::npos) << second;
  EXPECT_EQ(second.find("unroll(Y.local, [rx])"), std::string::npos) << second;
  bool x_vector_kernel = false;
  for (const Candidate& c : rules) {
    const std::string t = ir::TraceToText(c.trace);
    x_vector_kernel |= t.find("split(Y, [k], {6})") != std::string::npos &&
                       t.find("split(Y, [y], {2})") != std::string::npos &&
                       t.find("split(Y, [x], {8})") != std::string::npos &&
                       t.find("vectorize(Y.local, [x])") != std::string::npos;
  }
  EXPECT_TRUE(x_vector_kernel);
}

// On AVX-512, a plain NCHW conv with a window over channels in pairs of vectors first tiles two
// channel vectors by one row of 5-8 columns (7 of 28; both rows of a 7-wide map in turn), its
// padding inlined and the window's columns unrolled (mode 1: no input-channel split). Second,
// four channel vectors by the columns that fill the register file (a divisor of the row one
// above: 7 of 28), fewer vectors where the channel tile's packed weights would not stay in L2
// (512 input channels x 3x3: two vectors, and two rows of a 7-wide map), the padding copied
// and the input channels unrolled (mode 2). Where two vectors would not give both cores a tile
// (40 channels) only the latter, one vector by the whole 15-column row.
TEST(SpaceHeuristicTest, PlainConvChannelTilesFitTheRegistersAndL2) {
  struct Case {
    const char* spec;
    const char* k;
    const char* y;
    const char* x;
    bool inlined;  // the first rule is the inlined-padding tile
  };
  for (const Case& c :
       {Case{"conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", "64", "1", "7", true},
        Case{"conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1", "32", "2", "7", true},
        Case{"conv2d:n=2,c=32,h=31,w=31,k=40,r=5,s=3,stride=2,pad=1,dilation=2", "16", "1", "15",
             false}}) {
    auto w = ir::MakeWorkload(c.spec);
    ASSERT_TRUE(w.ok()) << c.spec;
    auto space = SearchSpace::Create(*w, Avx512TwoCores());
    ASSERT_TRUE(space.ok()) << space.status();
    std::vector<Candidate> rules = (*space)->Heuristic(2);
    ASSERT_EQ(rules.size(), 2u) << c.spec;
    if (c.inlined) {
      const std::string first = ir::TraceToText(rules[0].trace);
      EXPECT_NE(first.find("compute_inline(pad)"), std::string::npos) << first;
      EXPECT_NE(first.find("split(Y, [k], {32})"), std::string::npos) << first;
      EXPECT_NE(first.find("split(Y, [y], {1})"), std::string::npos) << first;
      EXPECT_NE(first.find("split(Y, [x], {7})"), std::string::npos) << first;
      EXPECT_NE(first.find("unroll(Y.local, [rx])"), std::string::npos) << first;
      EXPECT_EQ(first.find("split(Y.local, [rc]"), std::string::npos) << first;
    }
    const std::string text = ir::TraceToText(rules[c.inlined ? 1 : 0].trace);
    EXPECT_EQ(text.find("compute_inline(pad)"), std::string::npos) << text;
    EXPECT_NE(text.find(absl::StrCat("split(Y, [k], {", c.k, "})")), std::string::npos) << text;
    EXPECT_NE(text.find(absl::StrCat("split(Y, [y], {", c.y, "})")), std::string::npos) << text;
    EXPECT_NE(text.find(absl::StrCat("split(Y, [x], {", c.x, "})")), std::string::npos) << text;
    EXPECT_NE(text.find("split(Y.local, [rc], {4})"), std::string::npos) << text;
  }
}

// A plain 1x1 convolution whose rows are a multiple of 8 first tiles two channel vectors by 8
// columns on AVX-512, and writes the tile out as transposed tiles: the channels unrolled around
// the vectorized columns (codegen/transpose_copy.h). Rows of 14 keep four vectors by 7.
TEST(SpaceHeuristicTest, PlainConvTilesOfEightColumnsAreWrittenTransposed) {
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=64,h=56,w=56,k=256,r=1,s=1,epilogue=bias_relu", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {32})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {8})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("reorder(Y, [n.0, k.0, y.0, x.0, n.1, y.1, k.1, x.1])"),
            std::string::npos)
      << rules[0];
  EXPECT_NE(rules[0].find("unroll(Y, [k.1])"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("vectorize(Y, [x.1])"), std::string::npos) << rules[0];
  rules = RuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [x], {7})"), std::string::npos) << rules[0];
  EXPECT_EQ(rules[0].find("vectorize(Y, [x.1])"), std::string::npos) << rules[0];
}

// The rule-picked candidates (what a tuning run measures first and what a model is built with
// before any tuning) build and agree with the reference for an AVX2 and an AVX-512 target
// description alike, on the kinds of convolution models bring (plain and blocked layouts,
// strided, dilated, depthwise, 1x1, fused epilogues). The host compiles what each describes.
TEST(SpaceHeuristicTest, RulePickedCandidatesAreCorrectOnBothIsaDescriptions) {
  const std::vector<std::string> specs = {
      "conv2d:n=1,c=32,h=10,w=12,k=32,r=3,s=3,pad=1",
      "conv2d:n=1,c=32,h=9,w=9,k=48,r=1,s=1,epilogue=bias_relu",
      // Rows of 16: the output tile written as transposed tiles (8 columns).
      "conv2d:n=1,c=16,h=3,w=16,k=64,r=1,s=1,epilogue=bias_relu",
      "conv2d:n=1,c=8,h=4,w=16,k=32,r=3,s=3,pad=1",
      "conv2d:n=2,c=8,h=15,w=15,k=40,r=5,s=3,stride=2,pad=1,dilation=2",
      "conv2d:n=1,c=3,h=23,w=23,k=16,r=7,s=7,stride=2,pad=3",
      "conv2d:n=1,c=32,h=14,w=14,k=32,r=3,s=3,stride=2,pad=1,groups=32",
      // Plain rows wide enough to vectorize: stride-2 columns (a load of the span and a
      // shuffle), paddings inlined, a 5-wide window unrolled whole.
      "conv2d:n=1,c=20,h=24,w=40,k=20,r=3,s=3,stride=2,pad=1,groups=20",
      "conv2d:n=1,c=24,h=20,w=20,k=24,r=5,s=5,pad=2,groups=24",
      // Plain grouped, 16 channels a group: over channel vectors (a tail of columns), one or two
      // vectors a tile.
      "conv2d:n=1,c=32,h=7,w=14,k=32,r=3,s=3,pad=1,groups=2,epilogue=bias_relu",
      "pool2d:n=1,c=4,h=12,w=40,r=3,s=3,stride=2,pad=1",
      "conv2d:n=1,c=32,h=10,w=10,k=32,r=3,s=3,pad=1,layout=nchw16c,epilogue=bias_relu_res",
      "conv2d:n=1,c=32,h=9,w=11,k=16,r=1,s=1,layout=nchw8c",
      // One block of 42 channels (a vector at a time, the last masked); 24 in blocks of 8
      // (half-vector blocks on AVX-512, 3 of them a tile).
      "conv2d:n=1,c=32,h=6,w=7,k=42,r=1,s=1,kblock=42,layout=nchw16c,epilogue=bias",
      "conv2d:n=1,c=58,h=5,w=9,k=58,r=1,s=1,layout=nchw58c,epilogue=bias_relu",
      "conv2d:n=1,c=32,h=10,w=10,k=24,r=3,s=3,pad=1,kblock=8,layout=nchw16c",
      "conv2d:n=1,c=40,h=7,w=7,k=40,r=1,s=1,layout=nchw8c,epilogue=bias_relu",
      "conv2d:n=1,c=32,h=12,w=12,k=32,r=5,s=5,stride=2,pad=2,groups=32,layout=nchw16c",
      // Grouped (RegNet's 16 channels a group): one block a group on AVX-512, two on AVX2.
      "conv2d:n=1,c=64,h=9,w=10,k=64,r=3,s=3,pad=1,groups=4,layout=nchw16c,epilogue=bias_relu",
      "conv2d:n=1,c=64,h=9,w=10,k=64,r=3,s=3,stride=2,pad=1,groups=4,layout=nchw8c",
      "pool2d:n=1,c=32,h=9,w=9,r=3,s=3,stride=2,pad=1,layout=nchw16c",
      "sepconv2d:n=1,c=32,h=20,w=20,k=48,r=3,s=3,pad=1,layout=nchw16c,dw_epilogue=bias_relu,"
      "epilogue=bias",
      "sepconv2d:n=1,c=24,h=19,w=17,k=16,r=5,s=5,stride=2,pad=2,layout=nchw8c,"
      "dw_epilogue=bias_hswish,epilogue=bias_hswish",
      "matmul:m=33,n=70,k=19,epilogue=bias", "matmul:m=20,n=64,k=19,bpanel=16,epilogue=bias_gelu",
      "matmul:m=15,n=64,k=9,bpanel=32,epilogue=bias_res",
      "batch_matmul:b=4,m=13,n=64,k=9,bpanel=16,epilogue=bias",
      "winograd_in:n=1,c=32,h=8,w=8,m=4,pad=1,layout=nchw16c",
      "winograd_out:n=1,k=32,oh=8,ow=8,m=2,layout=nchw8c,epilogue=bias_relu_res",
      "softmax:m=37,n=70", "layer_norm:m=20,n=96"};
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    for (const std::string& spec : specs) {
      std::unique_ptr<SearchSpace> space = SpaceOf(spec, target);
      ASSERT_NE(space, nullptr);
      std::vector<Candidate> rules = space->Heuristic(6);
      if (space->workload().spec.op != "pool2d") {
        EXPECT_FALSE(rules.empty()) << spec;
      }
      for (const Candidate& c : rules) {
        absl::Status st = testing::BuildAndCheck(*c.schedule);
        EXPECT_TRUE(st.ok()) << spec << " (" << target.vector_lanes << " lanes): " << st << "\n"
                             << ir::TraceToText(c.trace);
      }
    }
  }
}

// A fused epilogue's accumulator whose vector axis ends in a partial vector (one block of 58
// channels: 7.25 vectors of 8) is stored locally, so that code generation keeps the partial
// vector's tile in registers under its lane mask (AVX2 1x1 58->58 at 28x28: 109 -> 35 us); where
// the vectors are whole the accumulator stays as it was (its tail tiles' guards stay branches).
TEST(SpaceHeuristicTest, APartialVectorAccumulatorIsStoredLocally) {
  for (const std::string& t :
       RuleTexts("conv2d:n=1,c=58,h=28,w=28,k=58,r=1,s=1,layout=nchw58c,epilogue=bias_relu",
                 Avx2TwoCores(), 2)) {
    EXPECT_NE(t.find("storage_scope(conv2d, \"local\")"), std::string::npos) << t;
  }
  for (const std::string& t :
       RuleTexts("conv2d:n=1,c=64,h=28,w=28,k=112,r=1,s=1,layout=nchw16c,epilogue=bias_relu",
                 Avx512TwoCores(), 2)) {
    EXPECT_EQ(t.find("storage_scope"), std::string::npos) << t;
  }
}

// A separable convolution's candidates run its rows outermost and in parallel (the images and
// row tiles fused), compute the depthwise part there for every channel block (never per
// channel tile of the 1x1), and tile the depthwise part as the blocked depthwise convolution
// is: a row of columns x the channel block as the vector, the window unrolled.
TEST(SpaceHeuristicTest, SeparableConvsComputeTheDepthwisePartPerRowTile) {
  const std::string spec =
      "sepconv2d:n=1,c=16,h=320,w=320,k=32,r=3,s=3,pad=1,layout=nchw16c,"
      "dw_epilogue=bias_hswish,epilogue=bias_hswish";
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    SCOPED_TRACE(target.vector_lanes);
    std::vector<std::string> rules = RuleTexts(spec, target, 4);
    ASSERT_FALSE(rules.empty());
    for (const std::string& text : rules) {
      EXPECT_NE(text.find("reorder(Y, [n.0, y.0, k.0"), std::string::npos) << text;
      EXPECT_NE(text.find("parallel(Y, [n.0+y.0])"), std::string::npos) << text;
      EXPECT_NE(text.find("compute_at(dw, Y.n.0+y.0)"), std::string::npos) << text;
      EXPECT_NE(text.find("vectorize(dwconv, [kv])"), std::string::npos) << text;
      EXPECT_NE(text.find("unroll(dwconv, [rx])"), std::string::npos) << text;
    }
    // Ten columns of 320 (12 accumulators on AVX2; half the 28 on AVX-512).
    EXPECT_NE(rules[0].find("split(dw, [x], {10})"), std::string::npos) << rules[0];
  }
}

// A blocked convolution's channels are innermost already: its rule-picked candidates vectorize
// the output channel block, hold a row of output columns in registers (half the register file
// on AVX-512: 14 of 28 columns), pack nothing and permute nothing. A depthwise 3x3 reads each
// input element a few times only: its padding is inlined first. A dense 3x3's is inlined first
// too where the tile's window columns unroll (the padding's products then drop out of the
// code, codegen/zero_taps.h).
TEST(SpaceHeuristicTest, BlockedConvVectorizesTheChannelBlock) {
  const std::string conv16 = "conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1,layout=nchw16c";
  // (Unchunked ones: a dense 3x3 conv's first candidate is chunked, SpaceChunkTest.)
  std::vector<std::string> rules = UnchunkedRuleTexts(conv16, Avx512TwoCores(), 4);
  ASSERT_GE(rules.size(), 3u);
  // (First: 4 channel blocks x 6 columns, padding inlined and then at root,
  // OneByOneConvsGetFourBlocksBySixColumnsOnAvx512.)
  EXPECT_NE(rules[0].find("split(Y, [k], {4})"), std::string::npos) << rules[0];
  EXPECT_EQ(rules[0].find("[rc], {"), std::string::npos) << rules[0];  // not chunked first
  EXPECT_NE(rules[0].find("compute_inline(pad)"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("unroll(Y.local, [rx])"), std::string::npos) << rules[0];
  EXPECT_EQ(rules[1].find("compute_inline(pad)"), std::string::npos) << rules[1];
  EXPECT_EQ(rules[1].find("unroll(Y.local, [rx])"), std::string::npos) << rules[1];
  std::string text = rules[2];
  EXPECT_NE(text.find("split(Y, [x], {14})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [kv], {16})"), std::string::npos) << text;
  EXPECT_NE(text.find("vectorize(Y.local, [kv])"), std::string::npos) << text;
  EXPECT_EQ(text.find("storage_order"), std::string::npos) << text;
  EXPECT_EQ(text.find("cache_read"), std::string::npos) << text;
  EXPECT_NE(text.find("compute_inline(pad)"), std::string::npos) << text;
  // AVX2: a full row of accumulators (12 of 16 registers): 7 columns of 28.
  std::vector<std::string> avx2_rules = UnchunkedRuleTexts(conv16, Avx2TwoCores(), 1);
  ASSERT_EQ(avx2_rules.size(), 1u);
  text = avx2_rules[0];
  EXPECT_NE(text.find("split(Y, [x], {7})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [kv], {16})"), std::string::npos) << text;  // two ymm vectors

  // AVX2 with a block of one vector (nchw8c): two channel blocks first, 2 rows x 2 columns
  // (one broadcast input per two FMAs), the weights packed per parallel tile and the kernel's
  // channel lanes unrolled by 2 (what 300-trial tunings on Zen 3 picked).
  std::vector<std::string> rules8 = UnchunkedRuleTexts(
      "conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1,layout=nchw8c", Avx2TwoCores(), 2);
  ASSERT_EQ(rules8.size(), 2u);
  text = rules8[0];
  EXPECT_NE(text.find("split(Y, [k], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [y], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [x], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [kv], {8})"), std::string::npos) << text;
  EXPECT_NE(text.find("cache_read(W"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y.local, [rv], {2})"), std::string::npos) << text;
  // A 1x1 kernel walks the blocked weights contiguously: no copy (first rule of conv
  // 1x1/256/14x14 on Zen 3: 252-259 us packed, 165-204 us not); its first unchunked tile is
  // one row of columns (two blocks x 5 of 40: rows share no inputs).
  std::vector<std::string> rules1 = UnchunkedRuleTexts(
      "conv2d:n=1,c=256,h=40,w=40,k=256,r=1,s=1,layout=nchw8c", Avx2TwoCores(), 1);
  ASSERT_EQ(rules1.size(), 1u);
  text = rules1[0];
  EXPECT_EQ(text.find("cache_read(W"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y.local, [rv], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [k], {2})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [y], {1})"), std::string::npos) << text;
  EXPECT_NE(text.find("split(Y, [x], {5})"), std::string::npos) << text;

  rules = RuleTexts("conv2d:n=1,c=32,h=56,w=56,k=32,r=3,s=3,pad=1,groups=32,layout=nchw16c",
                    Avx512TwoCores(), 2);
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_NE(rules[0].find("compute_inline(pad)"), std::string::npos);
  EXPECT_EQ(rules[1].find("compute_inline(pad)"), std::string::npos);
}

// A channel block that is neither whole registers nor a power of two (what the layout pass
// picks for 12, 18 or 42 channels on AVX-512) is still vectorized when the tile takes the whole
// block: no tail to mask (PP-OCR det's 1x1 48->12 at 160x160 ran 12x slower as scalar code).
TEST(SpaceHeuristicTest, AnOddWholeChannelBlockIsVectorized) {
  for (const char* spec :
       {"conv2d:n=1,c=48,h=20,w=20,k=12,r=1,s=1,kblock=12,layout=nchw16c",
        "conv2d:n=1,c=96,h=10,w=10,k=18,r=3,s=3,pad=1,kblock=18,layout=nchw16c"}) {
    std::vector<std::string> rules = RuleTexts(spec, Avx512TwoCores(), 4);
    ASSERT_FALSE(rules.empty()) << spec;
    for (const std::string& text : rules) {
      EXPECT_NE(text.find("vectorize(Y.local, [kv])"), std::string::npos) << spec << "\n" << text;
    }
  }
  // A block wider than the vector and not a multiple of it goes a vector at a time (LLVM splits
  // x42 into pieces and scalar lanes: det's 1x1 192->42 at 40x40 846-869 -> 244-254 us), one
  // narrower than the vector stays whole, as does the block of a single output pixel.
  const std::pair<const char*, const char*> tiles[] = {
      {"conv2d:n=1,c=192,h=40,w=40,k=42,r=1,s=1,kblock=42,layout=nchw16c", "split(Y, [kv], {16})"},
      {"conv2d:n=1,c=96,h=80,w=80,k=18,r=1,s=1,kblock=18,layout=nchw16c", "split(Y, [kv], {16})"},
      {"conv2d:n=1,c=48,h=20,w=20,k=12,r=1,s=1,kblock=12,layout=nchw16c", "split(Y, [kv], {12})"},
      {"conv2d:n=1,c=104,h=1,w=1,k=26,r=1,s=1,kblock=26,layout=nchw8c", "split(Y, [kv], {26})"}};
  for (const auto& [spec, split] : tiles) {
    std::vector<std::string> rules = RuleTexts(spec, Avx512TwoCores(), 1);
    ASSERT_EQ(rules.size(), 1u) << spec;
    EXPECT_NE(rules[0].find(split), std::string::npos) << spec << "\n" << rules[0];
  }
}

// A dense conv with whole-vector blocks on AVX-512: 4 channel blocks x up to 6 columns first
// (oneDNN's tile shape), the blocks unrolled so that the 24 accumulators stay in registers,
// and not chunked (a 3x3 conv too); half the blocks by twice the columns where the row has no
// divisor near 6 and 6 columns would waste more than a tenth of it (7 and 14 columns: 2 x 7);
// fewer blocks where their weights would not stay in L2 between the pixel tiles (3x3/512 at
// 7x7: 1.2 MB for 4 blocks); on AVX2 (16 registers) the rules are unchanged.
TEST(SpaceHeuristicTest, OneByOneConvsGetFourBlocksBySixColumnsOnAvx512) {
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=256,h=56,w=56,k=256,r=1,s=1,layout=nchw16c", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {4})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {6})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("unroll(Y.local, [k])"), std::string::npos) << rules[0];
  rules = RuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1,layout=nchw16c", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {2})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {7})"), std::string::npos) << rules[0];
  // 2 blocks of 512 x 9 input channels: 590 KB of weights (4 blocks: 1.2 MB); 4 blocks of 1024 x
  // 1: 262 KB.
  for (const auto& [spec, blocks] : std::vector<std::pair<std::string, std::string>>{
           {"conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1,layout=nchw16c", "2"},
           {"conv2d:n=1,c=1024,h=28,w=28,k=256,r=1,s=1,layout=nchw16c", "4"}}) {
    rules = RuleTexts(spec, Avx512TwoCores(), 1);
    ASSERT_EQ(rules.size(), 1u);
    EXPECT_NE(rules[0].find("split(Y, [k], {" + blocks + "})"), std::string::npos)
        << spec << ": " << rules[0];
  }
  // 30 output blocks: 5 blocks (a divisor) x 4 columns.
  rules = RuleTexts("conv2d:n=1,c=240,h=12,w=80,k=480,r=1,s=1,layout=nchw16c", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {5})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {4})"), std::string::npos) << rules[0];
  rules = RuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=3,s=3,pad=1,layout=nchw16c",
                    Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {2})"), std::string::npos) << rules[0];
  EXPECT_EQ(rules[0].find("[rc], {"), std::string::npos) << rules[0];
  rules = UnchunkedRuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1,layout=nchw8c",
                             Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("split(Y, [k], {4})"), std::string::npos) << rules[0];
}

// On 16 registers a 1x1 conv whose chunks hold 4 input-channel blocks or more starts chunked,
// with chunks of up to 8 blocks (16 blocks x taps per accumulator reload; 3x3: 2); with fewer
// input blocks it starts unchunked. Chunk sizes are every divisor up to 8 (12 blocks: 6).
TEST(SpaceChunkTest, OneByOneConvsOnSixteenRegistersChunkByUpToEightBlocks) {
  for (const auto& [spec, chunk] : std::vector<std::pair<std::string, std::string>>{
           {"conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1,layout=nchw8c", "8"},
           {"conv2d:n=1,c=96,h=40,w=40,k=16,r=1,s=1,layout=nchw8c,epilogue=bias_sigmoid", "6"},
           {"conv2d:n=1,c=64,h=56,w=56,k=256,r=1,s=1,layout=nchw8c,epilogue=bias_relu", "4"},
           {"conv2d:n=1,c=64,h=28,w=28,k=64,r=3,s=3,pad=1,layout=nchw8c", "2"}}) {
    std::vector<std::string> rules = RuleTexts(spec, Avx2TwoCores(), 1);
    ASSERT_EQ(rules.size(), 1u) << spec;
    EXPECT_NE(rules[0].find("[rc], {" + chunk + "})"), std::string::npos) << spec << rules[0];
  }
  // Two input blocks: chunks of one would reload the accumulators every 8 multiply-adds.
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=16,h=40,w=40,k=32,r=1,s=1,layout=nchw8c", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("[rc], {"), std::string::npos) << rules[0];
  // Output blocks narrower than the vector (half-vector accumulators) start chunked however
  // few blocks a chunk holds (6 input blocks: chunks of 3).
  rules =
      RuleTexts("conv2d:n=1,c=48,h=40,w=40,k=12,kblock=4,r=1,s=1,layout=nchw8c", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("[rc], {3})"), std::string::npos) << rules[0];
  // 32 registers keep the unchunked 4-block tile first.
  rules = RuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1,layout=nchw16c", Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("[rc], {"), std::string::npos) << rules[0];
}

// A plain NCHW conv whose channels no whole-vector tile divides starts with pixel vectors (1x1
// 192->42 at 40x40, 8 lanes: 2.4-4.6 ms with channel tiles of 16 or 32, 0.27 with pixel
// vectors); where the channels are whole vectors the channel tile divides them.
TEST(SpaceHeuristicTest, ChannelVectorTilesDivideTheChannelsWhereRowsAreWide) {
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=192,h=40,w=40,k=42,r=1,s=1,epilogue=bias", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("storage_order"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("vectorize(conv2d, [x])"), std::string::npos) << rules[0];
  for (const std::string& t :
       RuleTexts("conv2d:n=1,c=192,h=40,w=40,k=40,r=1,s=1,epilogue=bias", Avx2TwoCores(), 8)) {
    if (t.find("storage_order") == std::string::npos) continue;  // not a channel tile
    EXPECT_EQ(t.find("split(Y, [k], {16})"), std::string::npos) << t;
    EXPECT_EQ(t.find("split(Y, [k], {32})"), std::string::npos) << t;
  }
}

// A copy (no reduction) does not take the convolutions' first tile, a few elements on each
// outer axis: a layout conversion 12x8x1600 -> 12x1600x8 so made 1,600 parallel tasks of 96
// elements (111-151 us against 42 with one row of blocks per task, AVX2).
TEST(SpaceHeuristicTest, CopiesParallelizeWholeRowsFirst) {
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    std::vector<std::string> rules = RuleTexts("transpose:perm=0x2x1,shape=12x8x1600", target, 1);
    ASSERT_EQ(rules.size(), 1u);
    EXPECT_NE(rules[0].find("parallel(Y, [i0.0])"), std::string::npos) << rules[0];
    // A re-blocking transpose (nchw8c -> nchw16c, 96 channels at 160x160), whose tile is two
    // vectors: its pixels in the largest tiles the slot offers (64 on AVX-512, 32 on AVX2:
    // 2,400 or 4,800 tasks), not 153,600 tasks of 16 elements.
    rules = RuleTexts("transpose:perm=0x2x1x3,shape=6x2x25600x8", target, 1);
    ASSERT_EQ(rules.size(), 1u);
    const std::string tile = target.vector_lanes == 16 ? "64" : "32";
    EXPECT_NE(rules[0].find("split(Y, [i1], {" + tile + "})"), std::string::npos) << rules[0];
    EXPECT_NE(rules[0].find("parallel(Y, [i0.0+i1.0])"), std::string::npos) << rules[0];
    // Two axes alike: ShuffleNetV2's channel shuffle into 8-channel blocks took 3,248 tasks of
    // 28 elements (154 us); its rows now in tiles of 32 or more (at most 1,421 tasks).
    rules = RuleTexts("transpose:perm=1x0,shape=2x45472", target, 1);
    ASSERT_EQ(rules.size(), 1u);
    const size_t at = rules[0].find("split(Y, [i0], {");
    ASSERT_NE(at, std::string::npos) << rules[0];
    EXPECT_GE(std::stoll(rules[0].substr(at + 16)), 32) << rules[0];
  }
}

// The innermost tile loop joins the parallel loop only where the outer tiles leave a core
// idle: a softmax of 40 rows x 6625 keeps its row statistics per row tile (873-915 us with
// 2,905 parallel tiles and the statistics apart, AVX2), a slice its rows as the tasks.
TEST(SpaceHeuristicTest, ParallelTilesLeaveTheColumnTilesInnerWhereRowsSuffice) {
  std::vector<std::string> rules = RuleTexts("softmax:m=40,n=6625", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("parallel(Y, [i.0])"), std::string::npos) << rules[0];
  // 40 rows on 2 cores in tiles of 5 (4 tiles a core), not 6 (7 tiles: 24 rows on one core;
  // AVX2, 342-445 against 217-310 us).
  EXPECT_NE(rules[0].find("split(Y, [i], {5})"), std::string::npos) << rules[0];
  EXPECT_EQ(rules[0].find("parallel(exp_sum"), std::string::npos) << rules[0];
  rules = RuleTexts("slice:begin=0x0x0,shape=1x40x6640,size=1x40x6625", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("parallel(Y, [i0.0+i1.0])"), std::string::npos) << rules[0];
}

// An op in a blocked layout (its channel block innermost) gets no channel-vector candidates: a
// global average pool over nchw8c took 2.0-3.6 ms so, 0.23 ms vectorized over the block.
TEST(SpaceHeuristicTest, BlockedLayoutsVectorizeTheirChannelBlock) {
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    const std::string spec = target.vector_lanes == 8
                                 ? "pool2d:n=1,c=96,h=40,w=40,r=40,s=40,kind=avg,layout=nchw8c"
                                 : "pool2d:n=1,c=96,h=40,w=40,r=40,s=40,kind=avg,layout=nchw16c";
    for (const std::string& t : RuleTexts(spec, target, 8)) {
      EXPECT_EQ(t.find("storage_order"), std::string::npos) << t;
      EXPECT_NE(t.find("[cv]"), std::string::npos) << t;
    }
  }
}

// The per-call copy of a plain convolution's weights (W[k][c][r][s] -> [c][r][s][k tile]) is
// made of transposed tiles (codegen/transpose_copy.h): the output channels split by the vector,
// the inner part vectorized, the source's contiguous innermost axes unrolled between the parts
// (a 3x3 window's 9 floats on 16 lanes, its rows' 3 on 8; 16 or 8 input channels of a 1x1
// convolution, split off), one vector of channels at a time.
TEST(SpaceHeuristicTest, PlainConvWeightCopiesAreTransposedTiles) {
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    const std::string lanes = std::to_string(target.vector_lanes);
    const bool wide = target.vector_lanes == 16;
    std::vector<std::string> rules =
        RuleTexts("conv2d:n=1,c=512,h=7,w=7,k=512,r=3,s=3,pad=1", target, 2);
    ASSERT_EQ(rules.size(), 2u);
    for (const std::string& text : rules) {
      EXPECT_NE(text.find("storage_order(W.global, [ax1, ax2, ax3, ax0])"), std::string::npos)
          << text;
      EXPECT_NE(text.find("split(W.global, [ax0], {" + lanes + "})"), std::string::npos) << text;
      // One block of channels at a time, outermost.
      EXPECT_NE(text.find("reorder(W.global, [ax0.0, ax1, ax2, ax3, ax0.1])"), std::string::npos)
          << text;
      EXPECT_EQ(text.find("unroll(W.global, [ax2])") != std::string::npos, wide) << text;
      EXPECT_NE(text.find("unroll(W.global, [ax3])"), std::string::npos) << text;
      EXPECT_NE(text.find("vectorize(W.global, [ax0.1])"), std::string::npos) << text;
    }
    rules = RuleTexts("conv2d:n=1,c=256,h=14,w=14,k=256,r=1,s=1", target, 2);
    ASSERT_EQ(rules.size(), 2u);
    for (const std::string& text : rules) {
      EXPECT_NE(text.find("split(W.global, [ax1], {" + lanes + "})"), std::string::npos) << text;
      EXPECT_NE(text.find("reorder(W.global, [ax0.0, ax1.0, ax1.1, ax2, ax3, ax0.1])"),
                std::string::npos)
          << text;
      EXPECT_NE(text.find("unroll(W.global, [ax1.1])"), std::string::npos) << text;
    }
  }
}

// A dense blocked convolution whose output block is half a vector (PP-OCR det's 96 -> 24 in
// blocks of 8 on AVX-512): all three blocks by 5 columns first, where one block by 10 columns
// fed each broadcast input to one multiply-add (5190-5270 against 6000-6830 us).
TEST(SpaceHeuristicTest, HalfVectorBlocksTileEveryBlock) {
  const std::string spec = "conv2d:n=1,c=96,h=160,w=160,k=24,r=3,s=3,pad=1,kblock=8,layout=nchw16c";
  std::vector<std::string> rules = RuleTexts(spec, Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {3})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {5})"), std::string::npos) << rules[0];
  // A prime count of blocks (ShuffleNetV2's 232 channels, 29 blocks) that no 3, 4 or 2 divide:
  // one block by two rows of a 7-wide map (14 accumulators), where one row took 1.55x longer.
  rules = RuleTexts("conv2d:n=1,c=232,h=7,w=7,k=232,r=1,s=1,layout=nchw8c,epilogue=bias_relu",
                    Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {1})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [y], {2})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {7})"), std::string::npos) << rules[0];
}

// A blocked grouped convolution tiles one group's blocks: RegNet's 16 channels a group are one
// block on AVX-512 (one block x 14 columns: 36 us, where 5 blocks of 5 groups x 4 columns took
// 95); on AVX2 one block x one row of columns comes first, its padding inlined (groups of 8
// channels: 31 us against 55-73 for 1 x 2 x 6 with the padding at root).
TEST(SpaceHeuristicTest, BlockedGroupedConvsTileOneGroup) {
  std::vector<std::string> rules = RuleTexts(
      "conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=10,layout=nchw16c,epilogue=bias_relu",
      Avx512TwoCores(), 4);
  ASSERT_FALSE(rules.empty());
  for (const std::string& text : rules) {
    EXPECT_NE(text.find("split(Y, [k], {1})"), std::string::npos) << text;
  }
  rules = RuleTexts(
      "conv2d:n=1,c=152,h=14,w=14,k=152,r=3,s=3,pad=1,groups=19,layout=nchw8c,epilogue=bias_relu",
      Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [y], {1})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("compute_inline(pad)"), std::string::npos) << rules[0];
  rules = RuleTexts(
      "conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=10,layout=nchw8c,epilogue=bias_relu",
      Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [k], {1})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [y], {1})"), std::string::npos) << rules[0];
}

// A plain grouped convolution whose groups are one vector of output channels (RegNet's 16 on
// AVX-512) runs over channel vectors first, as a plain depthwise one may: each vector of output
// channels reads its group's input channels, copied with the channels innermost; one row of 8
// columns, a tail allowed (160 ch / 10 groups at 14x14: 51 us, the columns rule 735-826).
TEST(SpaceHeuristicTest, PlainGroupedConvsRunOverChannelVectors) {
  std::vector<std::string> rules =
      RuleTexts("conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=10,epilogue=bias_relu",
                Avx512TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("storage_order(pad.global, [ax0, ax2, ax3, ax1])"), std::string::npos)
      << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [k], {16})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [y], {1})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {8})"), std::string::npos) << rules[0];
  // On AVX2 a group of one vector (8 channels), and of two (16: each tile the whole group, 4
  // columns, so that it copies only its group's input: 65 us, one vector a tile 825); not where
  // a group is part of a vector, nor of more than two.
  rules = RuleTexts("conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=20", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("storage_order(pad.global, [ax0, ax2, ax3, ax1])"), std::string::npos)
      << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [k], {8})"), std::string::npos) << rules[0];
  rules = RuleTexts("conv2d:n=1,c=160,h=14,w=14,k=160,r=3,s=3,pad=1,groups=10", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("storage_order(pad.global, [ax0, ax2, ax3, ax1])"), std::string::npos)
      << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [k], {16})"), std::string::npos) << rules[0];
  EXPECT_NE(rules[0].find("split(Y, [x], {4})"), std::string::npos) << rules[0];
  for (const auto& [spec, target] : std::vector<std::pair<std::string, CpuTarget>>{
           {"conv2d:n=1,c=96,h=14,w=14,k=96,r=3,s=3,pad=1,groups=4", Avx2TwoCores()},
           {"conv2d:n=1,c=64,h=14,w=14,k=64,r=3,s=3,pad=1,groups=8", Avx512TwoCores()}}) {
    for (const std::string& text : RuleTexts(spec, target, 3)) {
      EXPECT_EQ(text.find("storage_order(pad.global"), std::string::npos) << spec << "\n" << text;
    }
  }
}

// A plain NCHW depthwise convolution's channels share no input: the first tile is rows (which
// share the window's input rows) by one vector of columns, two channels, parallel over the
// channel tiles only (5x5 at 28x28 on AVX-512: 107 us against 201 for 14 channels x 2 rows).
// A dense one keeps its channel-vector tile (ConvGetsTheChannelVectorKernelFirst).
TEST(SpaceHeuristicTest, PlainDepthwiseConvsTileRowsNotChannels) {
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    const std::string lanes = std::to_string(target.vector_lanes);
    std::vector<std::string> rules =
        RuleTexts("conv2d:n=1,c=240,h=28,w=28,k=240,r=5,s=5,pad=2,groups=240", target, 3);
    ASSERT_EQ(rules.size(), 3u);
    // A 5x5 window: over vectors of channels first (ApplyDepthwiseChannels): the input copied
    // per channel block with the channels innermost and the padding inlined into the copy, 2
    // rows x 4 columns of channel vectors, the output tile written transposed.
    EXPECT_NE(rules[0].find("cache_read(pad, Y.local, \"global\")"), std::string::npos) << rules[0];
    EXPECT_NE(rules[0].find("storage_order(pad.global, [ax0, ax2, ax3, ax1])"), std::string::npos)
        << rules[0];
    EXPECT_NE(rules[0].find("split(Y, [k], {" + lanes + "})"), std::string::npos) << rules[0];
    EXPECT_NE(rules[0].find("split(Y, [y], {2})"), std::string::npos) << rules[0];
    EXPECT_NE(rules[0].find("split(Y, [x], {4})"), std::string::npos) << rules[0];
    EXPECT_NE(rules[0].find("vectorize(Y.local, [k])"), std::string::npos) << rules[0];
    // Then columns as the vector: two channels x 4 rows, then 2 x 7.
    EXPECT_NE(rules[1].find("split(Y, [k], {2})"), std::string::npos) << rules[1];
    EXPECT_NE(rules[1].find("split(Y, [y], {4})"), std::string::npos) << rules[1];
    EXPECT_NE(rules[1].find("split(Y, [x], {" + lanes + "})"), std::string::npos) << rules[1];
    EXPECT_NE(rules[1].find("parallel(Y, [n.0+k.0])"), std::string::npos) << rules[1];
    EXPECT_NE(rules[2].find("split(Y, [y], {7})"), std::string::npos) << rules[2];
    // The window's rows unrolled too, so that the input rows the tile's rows share are loaded
    // once: 2 channels x 4 rows x 5 columns x 5 window rows fit kMaxUnrolledWindowOps, 7 rows
    // do not.
    EXPECT_NE(rules[1].find("unroll(Y.local, [ry])"), std::string::npos) << rules[1];
    EXPECT_EQ(rules[2].find("unroll(Y.local, [ry])"), std::string::npos) << rules[2];
    // A 3x3 window: the columns first, the channel vectors (one row) second.
    rules = RuleTexts("conv2d:n=1,c=32,h=112,w=112,k=32,r=3,s=3,pad=1,groups=32", target, 2);
    ASSERT_EQ(rules.size(), 2u);
    EXPECT_NE(rules[0].find("split(Y, [k], {2})"), std::string::npos) << rules[0];
    EXPECT_NE(rules[1].find("storage_order(pad.global, [ax0, ax2, ax3, ax1])"), std::string::npos)
        << rules[1];
    EXPECT_NE(rules[1].find("split(Y, [y], {1})"), std::string::npos) << rules[1];
    rules = RuleTexts("conv2d:n=1,c=128,h=28,w=28,k=128,r=3,s=3,pad=1", target, 3);
    for (const std::string& text : rules) {
      EXPECT_EQ(text.find("split(Y, [k], {2})"), std::string::npos) << text;
      EXPECT_EQ(text.find("unroll(Y.local, [ry])"), std::string::npos) << text;
      EXPECT_EQ(text.find("pad.global"), std::string::npos) << text;
    }
  }
}

// A global pool's tile of one channel block is a single chain of dependent adds (PP-OCR det's
// pool over 96 channels at 160x160, AVX2: 226 us so, 77 us in tiles of 3 blocks): the first
// rule tiles several channel blocks while each core keeps two tasks.
TEST(SpaceHeuristicTest, LongReductionsIntoOneVectorGetSeveralAccumulators) {
  std::vector<std::string> rules = RuleTexts(
      "pool2d:n=1,c=96,h=160,w=160,r=160,s=160,kind=avg,layout=nchw8c", Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("split(Y, [c], {3})"), std::string::npos) << rules[0];
  // A short window (3x3) keeps one block a tile.
  rules = RuleTexts("pool2d:n=1,c=96,h=40,w=40,r=3,s=3,pad=1,kind=max,layout=nchw8c",
                    Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("split(Y, [c], {3})"), std::string::npos) << rules[0];
}

// A blocked convolution reading a model's plain input (its first layer) inlines the padding
// where each padded element feeds few products (PP-OCR det's 3 -> 16 3x3/2 at 640x640: 1127-1842
// us with the copy at root, 723-821 inlined; AVX2), not where it feeds many (ResNet-18's 7x7/2
// to 64 channels: no gain).
TEST(SpaceHeuristicTest, PlainInputStemsInlineTheirPadding) {
  std::vector<std::string> rules = RuleTexts(
      "conv2d:n=1,c=3,h=640,w=640,k=16,r=3,s=3,stride=2,pad=1,kblock=8,layout=nchw,epilogue=bias",
      Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_NE(rules[0].find("compute_inline(pad)"), std::string::npos) << rules[0];
  rules = RuleTexts(
      "conv2d:n=1,c=3,h=224,w=224,k=64,r=7,s=7,stride=2,pad=3,kblock=8,layout=nchw,epilogue=bias",
      Avx2TwoCores(), 1);
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].find("compute_inline(pad)"), std::string::npos) << rules[0];
}

// A matmul whose B comes in column panels: the first rule tiles a whole panel of columns by as
// many rows as the accumulators allow (AVX2: 6 rows x 2 ymm; AVX-512: 14 rows x 2 zmm), one
// panel per tile, and copies nothing (B is contiguous per k already).
TEST(SpaceHeuristicTest, PanelMatmulTilesAWholePanel) {
  std::vector<std::string> avx2 =
      RuleTexts("matmul:m=128,n=3072,k=768,bpanel=16,epilogue=bias_gelu", Avx2TwoCores(), 2);
  ASSERT_EQ(avx2.size(), 2u);
  for (const std::string& text : avx2) {
    EXPECT_NE(text.find("split(C, [i], {6})"), std::string::npos) << text;
    EXPECT_NE(text.find("split(C, [jo], {1})"), std::string::npos) << text;
    EXPECT_NE(text.find("split(C, [ji], {16})"), std::string::npos) << text;
    EXPECT_EQ(text.find("cache_read"), std::string::npos) << text;
    EXPECT_EQ(text.find("storage_order"), std::string::npos) << text;
  }
  std::vector<std::string> avx512 =
      RuleTexts("matmul:m=128,n=3072,k=768,bpanel=32,epilogue=bias", Avx512TwoCores(), 1);
  ASSERT_EQ(avx512.size(), 1u);
  EXPECT_NE(avx512[0].find("split(C, [i], {14})"), std::string::npos) << avx512[0];
  EXPECT_NE(avx512[0].find("split(C, [ji], {32})"), std::string::npos) << avx512[0];
  // An A that does not stay in L2 (BERT's FFN2: 128 x 3072, 1.5 MB) streams from L3 for every
  // panel: at most 8 of its rows a tile; a transposed A reads its rows contiguously.
  avx512 = RuleTexts("matmul:m=128,n=768,k=3072,bpanel=32,epilogue=bias_res", Avx512TwoCores(), 2);
  ASSERT_EQ(avx512.size(), 2u);
  for (const std::string& text : avx512) {
    EXPECT_NE(text.find("split(C, [i], {8})"), std::string::npos) << text;
  }
  avx512 = RuleTexts("matmul:m=128,n=768,k=3072,bpanel=32,transpose_a=1,epilogue=none",
                     Avx512TwoCores(), 1);
  ASSERT_EQ(avx512.size(), 1u);
  EXPECT_NE(avx512[0].find("split(C, [i], {14})"), std::string::npos) << avx512[0];
}

// A batch_matmul with panels: one batch and one panel per parallel tile, the rows as for a
// matmul. Winograd transforms: the positions tiled whole and unrolled (so that code
// generation keeps one case per position), the channel block as the vector.
TEST(SpaceHeuristicTest, WinogradKernelsUnrollTheirPositions) {
  std::vector<std::string> mm =
      RuleTexts("batch_matmul:b=36,m=196,n=64,k=64,bpanel=16,epilogue=none", Avx2TwoCores(), 1);
  ASSERT_EQ(mm.size(), 1u);
  EXPECT_NE(mm[0].find("split(C, [b], {1})"), std::string::npos) << mm[0];
  EXPECT_NE(mm[0].find("split(C, [i], {6})"), std::string::npos) << mm[0];
  EXPECT_NE(mm[0].find("split(C, [ji], {16})"), std::string::npos) << mm[0];
  EXPECT_NE(mm[0].find("fuse(C, [b.0, jo.0])"), std::string::npos) << mm[0];
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    const int lanes = target.vector_lanes;
    std::vector<std::string> in =
        RuleTexts(absl::StrCat("winograd_in:n=1,c=64,h=56,w=56,m=4,pad=1,layout=nchw", lanes, "c"),
                  target, 3);
    ASSERT_EQ(in.size(), 2u);
    for (const std::string& text : in) {
      for (const char* loop : {"unroll(V, [e1.1])", "unroll(V, [e2.1])", "vectorize(V, [cv.1])"}) {
        EXPECT_NE(text.find(loop), std::string::npos) << loop << "\n" << text;
      }
    }
    // The padding computed once (inlined, its bounds checks keep the loads apart, and LLVM
    // takes 10-60 s over the unrolled positions).
    for (const std::string& text : in) {
      EXPECT_NE(text.find("parallel(pad,"), std::string::npos) << text;
    }
    // So is every candidate the search may sample: tiles, order and parallel depth vary.
    std::unique_ptr<SearchSpace> space = SpaceOf(
        absl::StrCat("winograd_in:n=1,c=64,h=56,w=56,m=4,pad=1,layout=nchw", lanes, "c"), target);
    ASSERT_NE(space, nullptr);
    std::mt19937_64 rng(5);
    std::set<std::string> distinct;
    for (int i = 0; i < 40; ++i) {
      absl::StatusOr<Candidate> c = space->Sample(rng);
      ASSERT_TRUE(c.ok()) << c.status();
      const std::string text = ir::TraceToText(c->trace);
      distinct.insert(text);
      EXPECT_NE(text.find("parallel(pad,"), std::string::npos) << text;
      EXPECT_NE(text.find("vectorize(V, [cv.1])"), std::string::npos) << text;
    }
    EXPECT_GT(distinct.size(), 10u);
    std::vector<std::string> out =
        RuleTexts(absl::StrCat("winograd_out:n=1,k=64,oh=56,ow=56,m=4,layout=nchw", lanes,
                               "c,epilogue=bias_relu"),
                  target, 1);
    ASSERT_EQ(out.size(), 1u);
    for (const char* loop : {"unroll(Y, [vy.1])", "unroll(Y, [vx.1])", "vectorize(Y, [kv.1])"}) {
      EXPECT_NE(out[0].find(loop), std::string::npos) << loop << "\n" << out[0];
    }
  }
}

// Row statistics (softmax's max and sum, layer_norm's mean and variance) and their vector
// partial results go per row tile, into the output's parallel loop: one parallel region.
TEST(SpaceHeuristicTest, RowStatisticsGoPerRowTile) {
  for (const CpuTarget& target : {Avx2TwoCores(), Avx512TwoCores()}) {
    std::vector<std::string> rules = RuleTexts("softmax:m=1536,n=128", target, 1);
    ASSERT_EQ(rules.size(), 1u);
    const std::string& text = rules[0];
    for (const char* stage : {"row_max", "row_max.rf", "exp_sum", "exp_sum.rf"}) {
      EXPECT_NE(text.find(absl::StrCat("compute_at(", stage, ", Y.i.0)")), std::string::npos)
          << stage << "\n"
          << text;
      EXPECT_EQ(text.find(absl::StrCat("parallel(", stage, ",")), std::string::npos) << text;
    }
    EXPECT_NE(text.find("parallel(Y, [i.0])"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace lathe::tuner
