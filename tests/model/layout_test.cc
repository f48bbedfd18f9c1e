// The model compiler's layout and affine passes: activations kept in the blocked layout
// nchw{b}c between convolutions (squeeze-excite, residual adds, resize and a channel concat
// on blocked tensors; conversions only at the input and where a plain kernel reads), and the
// per-node constants of "learnable affine" blocks turned into weights and parameter tensors so
// that convolutions of one shape share one task. Every program is run against its plain or
// unfused form on the same inputs.
#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "graph_builder.h"
#include "gtest/gtest.h"
#include "model/compile.h"
#include "model/tasks.h"

namespace lathe::model {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

Attr Float(float v) {
  Attr a;
  a.kind = Attr::kFloat;
  a.f = v;
  return a;
}

Attr Str(const std::string& s) {
  Attr a;
  a.kind = Attr::kString;
  a.s = s;
  return a;
}

// A small network with what PP-OCR and ResNet bring between convolutions.
Graph SmallNet() {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 3, 10, 12});
  std::string y = b.Op("Conv", {x, b.Const("w0", {16, 3, 3, 3}), b.Const("b0", {16})},
                       {{"pads", Ints({1, 1, 1, 1})}});
  y = b.Op("Mul", {y, b.Op("HardSigmoid", {y}, {{"alpha", Float(1.0f / 6)}})});  // hswish
  // Squeeze-excite: global pool, 1x1 convs on 1x1, hard-sigmoid, multiply.
  std::string s = b.Op("GlobalAveragePool", {y});
  s = b.Op("Relu", {b.Op("Conv", {s, b.Const("w1", {4, 16, 1, 1}), b.Const("b1", {4})})});
  s = b.Op("HardSigmoid", {b.Op("Conv", {s, b.Const("w2", {16, 4, 1, 1}), b.Const("b2", {16})})});
  std::string se = b.Op("Mul", {y, s});
  // A residual block and a depthwise conv with a stride.
  std::string r = b.Op("Conv", {se, b.Const("w3", {16, 16, 1, 1}), b.Const("b3", {16})});
  r = b.Op("Add", {r, se});
  std::string d = b.Op(
      "Conv", {r, b.Const("w4", {16, 1, 3, 3}), b.Const("b4", {16})},
      {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 2})}, {"group", Attr{Attr::kInt, 16}}});
  // Upsampled back and joined on the channels with the block's input.
  std::string u = b.Op("Resize", {d, "", b.Values("scales", {4}, {1, 1, 2, 2})},
                       {{"mode", Str("nearest")},
                        {"coordinate_transformation_mode", Str("asymmetric")},
                        {"nearest_mode", Str("floor")}});
  std::string c = b.Op("Concat", {u, r}, {{"axis", Attr{Attr::kInt, 1}}});
  c = b.Op("Conv", {c, b.Const("w5", {12, 32, 1, 1}), b.Const("b5", {12})});
  c = b.Op("MaxPool", {c}, {{"kernel_shape", Ints({2, 2})}, {"strides", Ints({2, 2})}});
  std::string f = b.Op("Flatten", {b.Op("GlobalAveragePool", {c})});
  return b.Finish(b.Op("Gemm", {f, b.Const("wf", {5, 12}), b.Const("bf", {5})},
                       {{"transB", Attr{Attr::kInt, 1}}}));
}

int Count(const Program& p, const std::string& prefix) {
  return static_cast<int>(
      std::count_if(p.kernels.begin(), p.kernels.end(),
                    [&](const KernelCall& k) { return k.spec.rfind(prefix, 0) == 0; }));
}

TEST(LayoutTest, BlockedProgramMatchesThePlainOne) {
  Graph g = SmallNet();
  CompileOptions plain_opts;
  absl::StatusOr<Program> plain = CompileGraph(g, plain_opts);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Count(*plain, "transpose"), 0);
  const std::vector<float> want = RunProgram(*plain);
  for (int64_t lanes : {16, 8}) {
    SCOPED_TRACE(lanes);
    CompileOptions o;
    o.block_lanes = lanes;
    o.concat_in_place = false;  // the concat kernel blocked (ConcatTest: written in place)
    absl::StatusOr<Program> blocked = CompileGraph(g, o);
    ASSERT_TRUE(blocked.ok()) << blocked.status();
    EXPECT_EQ(blocked->layout, ActivationLayout::kBlocked);
    std::string specs;
    for (const KernelCall& k : blocked->kernels) specs += k.spec + "\n";
    // The 3-channel input read plainly by the first conv, which writes the blocked layout (no
    // conversion); squeeze-excite, the residual, resize, concat and pooling blocked; the
    // pooled 1x1 result read by the Gemm as a view.
    EXPECT_THAT(specs, HasSubstr("conv2d:c=3,dilation=1,epilogue=bias_hswish,groups=1,h=10,k=16,"
                                 "kblock=" +
                                 std::to_string(lanes) + ",layout=nchw,"));
    EXPECT_THAT(specs, HasSubstr(lanes == 16 ? "layout=nchw16c" : "layout=nchw8c"));
    EXPECT_THAT(specs, HasSubstr("ewise:a=1x" + std::to_string(16 / lanes) + "x10x12x" +
                                 std::to_string(lanes) + ",b=1x" + std::to_string(16 / lanes) +
                                 "x1x1x" + std::to_string(lanes)));
    EXPECT_THAT(specs, HasSubstr("resize:"));
    EXPECT_THAT(specs, HasSubstr("concat:axis=1,inputs=1x"));
    EXPECT_EQ(Count(*blocked, "transpose"), 0) << specs;
    EXPECT_EQ(Count(*blocked, "matmul"), 1);
    for (const KernelCall& k : blocked->kernels) {
      if (k.spec.rfind("conv2d", 0) == 0 || k.spec.rfind("pool2d", 0) == 0 ||
          k.spec.rfind("resize", 0) == 0) {
        EXPECT_THAT(k.spec, HasSubstr("layout=nchw")) << k.spec;
        if (k.spec.find("c=3,") != std::string::npos) continue;  // the plain-input first conv
        EXPECT_THAT(k.spec, ::testing::Not(HasSubstr("layout=nchw,"))) << k.spec;
      }
    }
    ExpectClose(RunProgram(*blocked), want);
  }
}

TEST(LayoutTest, PlainKernelsBetweenBlockedOnesGetConversions) {
  // conv -> softmax over the channels (plain) -> conv: back and forth, and the output plain.
  GraphBuilder b;
  std::string x = b.Input("x", {1, 16, 4, 5});
  std::string y = b.Op("Conv", {x, b.Const("w0", {16, 16, 1, 1})});
  y = b.Op("Softmax", {y}, {{"axis", Attr{Attr::kInt, 1}}});
  y = b.Op("Conv", {y, b.Const("w1", {8, 16, 3, 3})}, {{"pads", Ints({1, 1, 1, 1})}});
  Graph g = b.Finish(y);
  CompileOptions o;
  o.block_lanes = 8;
  absl::StatusOr<Program> blocked = CompileGraph(g, o);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  // Input, softmax's input and output, the model's output: four conversions.
  EXPECT_EQ(Count(*blocked, "transpose"), 4);
  ExpectClose(RunProgram(*blocked), RunProgram(*CompileGraph(g)));
}

TEST(LayoutTest, AHeavyConvReblocksAnInputHeldInASmallerBlock) {
  // Two 8-channel maps (blocks of 8 at 16 lanes) joined into 16 channels: the 3x3 conv after
  // them (16 * 9 multiply-adds per input element) reads them in blocks of 16, a 1x1 conv to 4
  // channels before it keeps the blocks of 8.
  GraphBuilder b;
  std::string x = b.Input("x", {1, 16, 5, 6});
  std::string p = b.Op("Conv", {x, b.Const("wp", {8, 16, 1, 1})});
  std::string q = b.Op("Conv", {x, b.Const("wq", {8, 16, 1, 1})});
  std::string c = b.Op("Concat", {p, q}, {{"axis", Attr{Attr::kInt, 1}}});
  std::string light = b.Op("Conv", {c, b.Const("wl", {4, 16, 1, 1})});
  std::string heavy =
      b.Op("Conv", {c, b.Const("wh", {16, 16, 3, 3})}, {{"pads", Ints({1, 1, 1, 1})}});
  Graph g = b.Finish(b.Op("Concat", {heavy, light}, {{"axis", Attr{Attr::kInt, 1}}}));
  CompileOptions o;
  o.block_lanes = 16;
  absl::StatusOr<Program> blocked = CompileGraph(g, o);
  ASSERT_TRUE(blocked.ok()) << blocked.status();
  std::string specs;
  for (const KernelCall& k : blocked->kernels) specs += k.spec + "\n";
  EXPECT_THAT(specs, HasSubstr("c=16,dilation=1,epilogue=none,groups=1,h=5,k=16,layout=nchw16c"));
  EXPECT_THAT(specs, HasSubstr("c=16,dilation=1,epilogue=none,groups=1,h=5,k=4,kblock=4,"
                               "layout=nchw8c"));
  EXPECT_THAT(specs, HasSubstr("transpose:perm=1x0x2,shape=2x30x8\n"));  // 8 -> 16
  // The input, the re-blocking, and both inputs of the last concat (blocks of 16 and 4: it
  // runs plain).
  EXPECT_EQ(Count(*blocked, "transpose"), 4) << specs;
  ExpectClose(RunProgram(*blocked), RunProgram(*CompileGraph(g)));
}

using ProgramCheck = std::function<void(const Program&, const std::string& specs, int64_t lanes)>;

// Compiles `g` with `reference` (the expected output) and then with the default options in
// blocks of each of `lanes` (0: plain): `check` sees each program and its kernel specs (one per
// line), whose output must match the reference's.
void CheckAgainstReference(const Graph& g, const CompileOptions& reference,
                           const std::vector<int64_t>& lanes, const ProgramCheck& check,
                           const CompileOptions& blocked = CompileOptions{}) {
  absl::StatusOr<Program> want = CompileGraph(g, reference);
  ASSERT_TRUE(want.ok()) << want.status();
  const std::vector<float> expected = RunProgram(*want);
  for (int64_t l : lanes) {
    SCOPED_TRACE(l);
    CompileOptions o = blocked;
    o.block_lanes = l;
    absl::StatusOr<Program> p = CompileGraph(g, o);
    ASSERT_TRUE(p.ok()) << p.status();
    std::string specs;
    for (const KernelCall& k : p->kernels) specs += k.spec + "\n";
    check(*p, specs, l);
    ExpectClose(RunProgram(*p), expected);
  }
}

TEST(LayoutTest, GroupedConvsRunBlockedWhereBlocksLieWithinTheirGroups) {
  // RegNet's block: 1x1, grouped 3x3 of 16 channels a group (blocks of 16 or 8 lie within the
  // groups: blocked, each output block reading its own group's), 1x1, residual; then a grouped
  // conv of 4 channels a group (ResNeXt's), which no block of 16 fits: it reads the blocks of 16
  // that hold 4 groups each (their lanes of the group) and writes blocks of 4; on 8 lanes its
  // groups are merged in pairs (GroupsOfHalfABlockRunAsGroupsOfAWholeOne).
  GraphBuilder b;
  std::string x = b.Input("x", {1, 32, 9, 10});
  std::string y = b.Op("Relu", {b.Op("Conv", {x, b.Const("wa", {32, 32, 1, 1})})});
  y = b.Op("Relu", {b.Op("Conv", {y, b.Const("wb", {32, 16, 3, 3}), b.Const("bb", {32})},
                         {{"pads", Ints({1, 1, 1, 1})}, {"group", Attr{Attr::kInt, 2}}})});
  y = b.Op("Add", {b.Op("Conv", {y, b.Const("wc", {32, 32, 1, 1})}), x});
  y = b.Op(
      "Conv", {y, b.Const("wd", {32, 4, 3, 3})},
      {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 2})}, {"group", Attr{Attr::kInt, 8}}});
  Graph g = b.Finish(y);
  CheckAgainstReference(
      g, CompileOptions{}, {16, 8}, [](const Program& p, const std::string& specs, int64_t lanes) {
        EXPECT_THAT(specs, HasSubstr("epilogue=bias_relu,groups=2,h=9,k=32,layout=nchw" +
                                     std::to_string(lanes) + "c,"));
        EXPECT_THAT(specs, HasSubstr(lanes == 16 ? "groups=8,h=9,k=32,kblock=4,layout=nchw16c,"
                                                 : "groups=4,h=9,k=32,layout=nchw8c,"));
        // The input's conversion and the output's.
        EXPECT_EQ(Count(p, "transpose"), 2) << specs;
      });
}

TEST(LayoutTest, GroupsOfHalfABlockRunAsGroupsOfAWholeOne) {
  // RegNetX-200MF's 3x3 in groups of 8 between 1x1s in blocks of 16 (AVX-512): merged into
  // groups of 16 whose weights are zero between the pairs' halves, in blocks of 16 (no
  // re-blocking around it); on 8 lanes the groups are whole blocks already. Groups of 4 (a
  // quarter of 16, half of 8): merged on 8 lanes; on 16 they read the blocks of 16 that hold
  // them and write blocks of 4, which the 1x1 after them reads.
  for (int64_t group : {8, 4}) {
    SCOPED_TRACE(group);
    GraphBuilder b;
    std::string x = b.Input("x", {1, 32, 7, 6});
    std::string y = b.Op("Relu", {b.Op("Conv", {x, b.Const("wa", {32, 32, 1, 1})})});
    y = b.Op("Relu",
             {b.Op("Conv", {y, b.Const("wb", {32, group, 3, 3}), b.Const("bb", {32})},
                   {{"pads", Ints({1, 1, 1, 1})}, {"group", Attr{Attr::kInt, 32 / group}}})});
    y = b.Op("Conv", {y, b.Const("wc", {32, 32, 1, 1})});
    CheckAgainstReference(
        b.Finish(y), CompileOptions{}, {16, 8},
        [&](const Program& p, const std::string& specs, int64_t lanes) {
          const int64_t width = 2 * group == lanes ? lanes : group;
          EXPECT_THAT(
              specs, HasSubstr(width == lanes
                                   ? absl::StrCat("groups=", 32 / width, ",h=7,k=32,layout=nchw",
                                                  width, "c,")
                                   : absl::StrCat("groups=", 32 / width, ",h=7,k=32,kblock=", width,
                                                  ",layout=nchw16c,")))
              << specs;
          // The input's conversion and the output's: the grouped conv reads the blocks it is
          // given.
          EXPECT_EQ(Count(p, "transpose"), 2) << specs;
        });
  }
}

TEST(LayoutTest, AFewChannelsAreOneBlockOnEitherVector) {
  // 58 channels (ShuffleNetV2's): no power of two from 4 up divides them; one block of all 58
  // on 16 lanes and on 8 (plain on 8 before: 1x1 58->58 at 28x28 402 us, blocked 120).
  GraphBuilder b;
  std::string x = b.Input("x", {1, 58, 6, 7});
  std::string y = b.Op("Relu", {b.Op("Conv", {x, b.Const("w0", {58, 58, 1, 1})})});
  y = b.Op("Conv", {y, b.Const("w1", {58, 58, 1, 1})});
  CheckAgainstReference(b.Finish(y), CompileOptions{}, {16, 8},
                        [](const Program& p, const std::string& specs, int64_t) {
                          EXPECT_EQ(Count(p, "conv2d"), 2);
                          EXPECT_THAT(specs, HasSubstr("k=58,layout=nchw58c,")) << specs;
                          EXPECT_THAT(specs, Not(HasSubstr("layout=nchw,"))) << specs;
                        });
}

TEST(LayoutTest, PartialVectorBlocksGiveWayToOneBlockOfAllChannels) {
  // Where the core executes whole vectors (datapath_lanes 0: those of the block), channels that
  // fill no whole vectors take one block up to 16 vectors, beyond that the largest block of at
  // most 8 vectors that divides them: 116, 60, 232, 168 one block on 16 lanes, 360 blocks of
  // 120 (22.5 vectors), 24 one block; on 8 lanes 116 and 60 one block, 12 (under 2 vectors)
  // blocks of 4, the rest whole vectors. Where it runs
  // half a vector per operation (Zen 4's AVX-512: datapath_lanes 8 of 16), half vectors run at
  // full rate: 116 (a quarter vector divides it, 7.25 vectors) one block, 60 (fewer than 4
  // vectors) blocks of 4, 232 (29 half vectors, a count no tile of 2 or 3 blocks divides) one
  // block, 168 (21: tiles of 3) and 360 blocks of 8.
  struct Case {
    int64_t c, half16, full16, full8;
  };
  for (const Case& t :
       {Case{116, 116, 116, 116}, Case{60, 4, 60, 60}, Case{232, 232, 232, 8}, Case{168, 8, 168, 8},
        Case{360, 8, 120, 8}, Case{24, 8, 24, 8}, Case{12, 12, 12, 4}}) {
    for (int64_t datapath : {0, 8}) {
      SCOPED_TRACE(absl::StrCat(t.c, " channels, datapath lanes ", datapath));
      GraphBuilder b;
      std::string x = b.Input("x", {1, t.c, 3, 5});
      std::string y = b.Op("Relu", {b.Op("Conv", {x, b.Const("w0", {t.c, t.c, 1, 1})})});
      y = b.Op("Conv", {y, b.Const("w1", {t.c, t.c, 1, 1})});
      CompileOptions o;
      o.datapath_lanes = datapath;
      CheckAgainstReference(
          b.Finish(y), CompileOptions{},
          datapath == 0 ? std::vector<int64_t>{16, 8} : std::vector<int64_t>{16},
          [&](const Program& p, const std::string& specs, int64_t lanes) {
            const int64_t block = datapath != 0 ? t.half16 : lanes == 16 ? t.full16 : t.full8;
            EXPECT_THAT(specs, HasSubstr(absl::StrCat("k=", t.c, ",layout=nchw", block, "c,")))
                << specs;
            EXPECT_EQ(Count(p, "conv2d"), 2);
          },
          o);
    }
  }
}

// Unfused as the reference, fused plain and in blocks of 8.
void CheckFusedAgainstUnfused(const Graph& g, const ProgramCheck& check) {
  CompileOptions unfused;
  unfused.fuse = false;
  CheckAgainstReference(g, unfused, {0, 8}, check);
}

// A nearest resize by integer factors read only by a binary elementwise kernel (an FPN's
// upsample-and-add) is read in place by it: one ewise kernel with b upsampled, no resize
// kernel, plain and blocked, with the coordinate modes that read o / f, on either side of a
// commuting op; a linear resize, one read twice, and a Sub with the resize on the left stay.
TEST(ResizeFusionTest, NearestUpsamplingIsReadInPlaceByItsAdd) {
  struct Case {
    std::string coord, nearest, mode, op;
    bool resize_left, read_twice, fused;
  };
  const Case cases[] = {
      {"asymmetric", "floor", "nearest", "Add", false, false, true},
      {"half_pixel", "round_prefer_floor", "nearest", "Mul", true, false, true},
      {"asymmetric", "round_prefer_floor", "nearest", "Add", false, false, false},
      {"asymmetric", "floor", "linear", "Add", false, false, false},
      {"asymmetric", "floor", "nearest", "Add", false, true, false},
      {"asymmetric", "floor", "nearest", "Sub", true, false, false},
      {"asymmetric", "floor", "nearest", "Sub", false, false, true},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.coord + " " + cs.nearest + " " + cs.mode + " " + cs.op);
    GraphBuilder b;
    std::string x = b.Input("x", {1, 16, 6, 8});
    // The full-size operand is the model's input: no producer's epilogue takes the op in.
    const std::string& fine = x;
    std::string coarse =
        b.Op("Conv", {x, b.Const("wc", {16, 16, 1, 1})}, {{"strides", Ints({2, 2})}});
    std::string u = b.Op("Resize", {coarse, "", b.Values("scales", {4}, {1, 1, 2, 2})},
                         {{"mode", Str(cs.mode)},
                          {"coordinate_transformation_mode", Str(cs.coord)},
                          {"nearest_mode", Str(cs.nearest)}});
    std::string y = cs.resize_left ? b.Op(cs.op, {u, fine}) : b.Op(cs.op, {fine, u});
    if (cs.read_twice) y = b.Op("Add", {y, u});
    Graph g = b.Finish(b.Op("Conv", {y, b.Const("wy", {8, 16, 1, 1})}));
    CheckFusedAgainstUnfused(g, [&](const Program& p, const std::string& specs, int64_t lanes) {
      EXPECT_EQ(Count(p, "resize"), cs.fused ? 0 : 1) << specs;
      if (cs.fused) {
        EXPECT_THAT(specs, HasSubstr(lanes == 0 ? "b=1x16x3x4,binary=" : "b=1x2x3x4x8,binary="));
        EXPECT_THAT(specs, HasSubstr(lanes == 0 ? "upsample=1x1x2x2\n" : "upsample=1x1x2x2x1\n"));
      }
    });
  }
}

// A feature pyramid's top-down add whose finer map comes from an elementwise kernel read by
// nothing else (PP-OCR det's x * se(x) + x): the add and the resize become that kernel's resup
// epilogue step; one kernel instead of three, the same result, plain and blocked.
TEST(ResizeFusionTest, UpsampledAddGoesIntoAnElementwiseProducer) {
  for (bool other_reader : {false, true}) {
    SCOPED_TRACE(other_reader);
    GraphBuilder b;
    std::string x = b.Input("x", {1, 16, 6, 8});
    std::string fine = b.Op("Conv", {x, b.Const("wf", {16, 16, 1, 1})});
    std::string s = b.Op("Sigmoid", {b.Op("ReduceMean", {fine}, {{"axes", Ints({2, 3})}})});
    std::string se = b.Op("Add", {b.Op("Mul", {fine, s}), fine});
    std::string coarse =
        b.Op("Conv", {x, b.Const("wc", {16, 16, 1, 1})}, {{"strides", Ints({2, 2})}});
    std::string u = b.Op("Resize", {coarse, "", b.Values("scales", {4}, {1, 1, 2, 2})},
                         {{"mode", Str("nearest")},
                          {"coordinate_transformation_mode", Str("asymmetric")},
                          {"nearest_mode", Str("floor")}});
    std::string y = b.Op("Add", {se, u});
    // A second reader of the SE output keeps it written: the add stays a kernel of its own.
    if (other_reader) y = b.Op("Mul", {y, se});
    Graph g = b.Finish(b.Op("Conv", {y, b.Const("wy", {8, 16, 1, 1})}));
    CheckFusedAgainstUnfused(g, [&](const Program& p, const std::string& specs, int64_t) {
      EXPECT_EQ(Count(p, "resize"), 0) << specs;
      if (other_reader) {
        EXPECT_THAT(specs, Not(HasSubstr("resup"))) << specs;
      } else {
        EXPECT_THAT(specs, HasSubstr("epilogue=res_resup2:2")) << specs;
        EXPECT_THAT(specs, Not(HasSubstr("upsample="))) << specs;
      }
    });
  }
}

TEST(ConcatTest, ProducersWriteTheirSlabsOfAChannelConcatInPlace) {
  // Two convs and a resize joined on the channels, then read by a conv: the three producers
  // write into the concat's storage and no concat kernel runs.
  GraphBuilder b;
  std::string x = b.Input("x", {1, 16, 6, 8});
  std::string p = b.Op("Conv", {x, b.Const("wp", {16, 16, 1, 1})});
  std::string q = b.Op("Conv", {x, b.Const("wq", {16, 16, 3, 3})}, {{"pads", Ints({1, 1, 1, 1})}});
  std::string s = b.Op("Conv", {x, b.Const("ws", {16, 16, 1, 1})}, {{"strides", Ints({2, 2})}});
  std::string u = b.Op("Resize", {s, "", b.Values("scales", {4}, {1, 1, 2, 2})},
                       {{"mode", Str("nearest")},
                        {"coordinate_transformation_mode", Str("asymmetric")},
                        {"nearest_mode", Str("floor")}});
  std::string c = b.Op("Concat", {p, q, u}, {{"axis", Attr{Attr::kInt, 1}}});
  std::string y = b.Op("Conv", {c, b.Const("wy", {16, 48, 1, 1})});
  // p is read again after the concat: its slab of c must still hold it.
  y = b.Op("Add", {y, p});
  Graph g = b.Finish(b.Op("Concat", {y, x}, {{"axis", Attr{Attr::kInt, 1}}}));
  for (int64_t lanes : {0, 16, 8}) {
    SCOPED_TRACE(lanes);
    CompileOptions copy;
    copy.block_lanes = lanes;
    copy.concat_in_place = false;
    CompileOptions in_place = copy;
    in_place.concat_in_place = true;
    absl::StatusOr<Program> a = CompileGraph(g, copy);
    absl::StatusOr<Program> bp = CompileGraph(g, in_place);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(bp.ok()) << bp.status();
    EXPECT_EQ(Count(*a, "concat"), 2);
    // Plain, the second concat reads the model's input (storage the caller owns) and stays;
    // blocked, it joins the input's blocked copy, which its conversion writes in place.
    EXPECT_EQ(Count(*bp, "concat"), lanes == 0 ? 1 : 0);
    if (lanes == 0) {  // the producers' outputs are views of the concat's storage, side by side
      const Alias ap = StorageOf(*bp, p), aq = StorageOf(*bp, q);
      EXPECT_EQ(ap.base, aq.base);
      EXPECT_EQ(aq.offset - ap.offset, 16 * 6 * 8);
    }
    ExpectClose(RunProgram(*bp), RunProgram(*a));
  }
}

// Conv, BatchNorm, x * a + b, hard-swish, x * c + d: PP-OCR's "learnable affine" block.
std::string AffineBlock(GraphBuilder& b, const std::string& x, const std::string& tag, float a,
                        float bb, float c, float d) {
  std::string y = b.Op("Conv", {x, b.Const("w" + tag, {8, 8, 1, 1}), b.Const("b" + tag, {8})});
  y = b.Op("BatchNormalization", {y, b.Const("g" + tag, {8}, 0.5, 1.5), b.Const("be" + tag, {8}),
                                  b.Const("m" + tag, {8}), b.Const("v" + tag, {8}, 0.5, 2)});
  y = b.Op("Add", {b.Op("Mul", {y, b.Scalar("a" + tag, a)}), b.Scalar("bb" + tag, bb)});
  std::string t = b.Op("Clip", {b.Op("Add", {y, b.Scalar("three" + tag, 3)}),
                                b.Scalar("zero" + tag, 0), b.Scalar("six" + tag, 6)});
  y = b.Op("Div", {b.Op("Mul", {y, t}), b.Scalar("sixd" + tag, 6)});
  return b.Op("Add", {b.Op("Mul", {y, b.Scalar("c" + tag, c)}), b.Scalar("d" + tag, d)});
}

TEST(AffineTest, LearnableAffineConstantsBecomeWeightsAndParameterTensors) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 8, 5, 6});
  std::string y = AffineBlock(b, x, "1", 2.15f, -0.55f, 0.53f, 0.17f);
  y = AffineBlock(b, y, "2", 1.26f, 0.93f, 0.97f, -0.44f);
  Graph g = b.Finish(y);
  absl::StatusOr<Program> p = CompileGraph(g);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->kernels.size(), 2u);
  const std::string spec =
      "conv2d:c=8,dilation=1,epilogue=bias_hswish_scale_shift,groups=1,h=5,k=8,layout=nchw,n=1,"
      "pad=0,r=1,s=1,stride=1,w=6";
  EXPECT_EQ(p->kernels[0].spec, spec);
  std::vector<Task> tasks = ExtractTasks(*p);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].weight, 2);
  CompileOptions off;
  off.fuse = false;
  ExpectClose(RunProgram(*p), RunProgram(*CompileGraph(g, off)));
  CompileOptions blocked;
  blocked.block_lanes = 8;
  ExpectClose(RunProgram(*CompileGraph(g, blocked)), RunProgram(*CompileGraph(g, off)));
}

TEST(AffineTest, BiasThenBatchNormAfterATransposedConvFoldIntoItsWeights) {
  // ConvTranspose, its bias as an Add of a [1,C,1,1] constant, BatchNorm, ReLU (PP-OCR det's
  // head): the bias and the BatchNorm's scale and shift both fold.
  GraphBuilder b;
  std::string x = b.Input("x", {1, 4, 3, 3});
  std::string y =
      b.Op("ConvTranspose", {x, b.Const("w", {4, 6, 2, 2})}, {{"strides", Ints({2, 2})}});
  y = b.Op("Add", {y, b.Const("bias", {1, 6, 1, 1})});
  y = b.Op("BatchNormalization", {y, b.Const("g", {6}, 0.5, 1.5), b.Const("beta", {6}),
                                  b.Const("mean", {6}), b.Const("var", {6}, 0.5, 2)});
  y = b.Op("Relu", {y});
  Graph g = b.Finish(y);
  CompileOptions direct;
  direct.deconv_as_conv = false;
  absl::StatusOr<Program> p = CompileGraph(g, direct);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->kernels.size(), 1u);
  EXPECT_THAT(p->kernels[0].spec, HasSubstr("conv2d_transpose:"));
  EXPECT_THAT(p->kernels[0].spec, HasSubstr("epilogue=bias_relu"));
  CompileOptions off;
  off.fuse = false;
  ExpectClose(RunProgram(*p), RunProgram(*CompileGraph(g, off)));
}

// ConvTransposes whose windows do not overlap (stride == kernel: PP-OCR det's head) become a
// 1x1 convolution and a depth-to-space transpose, their bias and activation on the 1x1 conv;
// an overlapping one stays direct; a narrow 1x1 conv that reads a depth-to-space runs before
// it (CommuteDepthToSpace). Every variant agrees with the direct program; in the
// blocked layout each depth-to-space reads the 1x1 conv's blocked output directly.
TEST(DeconvTest, NonOverlappingTransposedConvsBecomeOneByOneConvs) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 8, 5, 6});
  std::string y = b.Op("ConvTranspose", {x, b.Const("w0", {8, 6, 2, 2}), b.Const("b0", {6})},
                       {{"strides", Ints({2, 2})}});
  y = b.Op("Relu", {y});
  y = b.Op("ConvTranspose", {y, b.Const("w1", {6, 1, 2, 2}), b.Const("b1", {1})},
           {{"strides", Ints({2, 2})}});
  Graph g = b.Finish(b.Op("Sigmoid", {y}));
  GraphBuilder ob;
  Graph overlapping =
      ob.Finish(ob.Op("ConvTranspose", {ob.Input("x", {1, 8, 5, 6}), ob.Const("w", {8, 4, 3, 3})},
                      {{"strides", Ints({2, 2})}, {"pads", Ints({1, 1, 1, 1})}}));
  CompileOptions direct;
  direct.deconv_as_conv = false;
  absl::StatusOr<Program> want = CompileGraph(g, direct);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(Count(*want, "conv2d_transpose"), 2);
  const std::vector<float> expected = RunProgram(*want);
  for (int64_t lanes : {0, 8, 16}) {
    SCOPED_TRACE(lanes);
    CompileOptions opt;
    opt.block_lanes = lanes;
    absl::StatusOr<Program> p = CompileGraph(g, opt);
    ASSERT_TRUE(p.ok()) << p.status();
    std::string specs;
    for (const KernelCall& k : p->kernels) specs += k.spec + "\n";
    EXPECT_EQ(Count(*p, "conv2d_transpose"), 0) << specs;
    EXPECT_THAT(specs, HasSubstr("epilogue=bias_relu,groups=1,h=5,k=24,"));
    // The second 1x1 conv (6 -> 4 at 10x12) reads only the first depth-to-space: it runs
    // before it, 24 -> 16 at 5x6 (block diagonal), and the transpose moves 16 channels.
    EXPECT_THAT(specs, HasSubstr("c=24,dilation=1,epilogue=bias_sigmoid,groups=1,h=5,k=16,"));
    if (lanes == 0) {
      EXPECT_EQ(Count(*p, "transpose"), 2) << specs;
    }
    // Blocked: the input's conversion and each depth-to-space (reading the blocked 1x1 output;
    // the first one writing the block the second 1x1 conv reads).
    if (lanes == 8) {
      EXPECT_EQ(Count(*p, "transpose"), 3) << specs;
    }
    ExpectClose(RunProgram(*p), expected);
    absl::StatusOr<Program> o = CompileGraph(overlapping, opt);
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(Count(*o, "conv2d_transpose"), 1);
  }
  // A wide second conv (6 -> 8*4 channels) would cost more before the transpose (24 more
  // multiply-adds per element moved) than the transpose it shrinks: it stays after it.
  GraphBuilder wb;
  std::string wy =
      wb.Op("ConvTranspose", {wb.Input("x", {1, 8, 5, 6}), wb.Const("w0", {8, 6, 2, 2})},
            {{"strides", Ints({2, 2})}});
  wy = wb.Op("ConvTranspose", {wb.Op("Relu", {wy}), wb.Const("w1", {6, 8, 2, 2})},
             {{"strides", Ints({2, 2})}});
  Graph wide = wb.Finish(wy);
  absl::StatusOr<Program> wd = CompileGraph(wide, direct);
  absl::StatusOr<Program> wp = CompileGraph(wide, {});
  ASSERT_TRUE(wd.ok() && wp.ok());
  std::string wspecs;
  for (const KernelCall& k : wp->kernels) wspecs += k.spec + "\n";
  EXPECT_THAT(wspecs, HasSubstr("c=6,dilation=1,epilogue=none,groups=1,h=10,k=32,"));
  ExpectClose(RunProgram(*wp), RunProgram(*wd));
}

// A transpose of a value held only in the blocked layout reads the blocked form directly: one
// transpose kernel instead of a conversion to the plain form and the transpose (also through
// a reshaping view).
TEST(LayoutTest, ATransposeReadsTheBlockedFormDirectly) {
  for (bool reshaped : {false, true}) {
    SCOPED_TRACE(reshaped);
    GraphBuilder b;
    std::string x = b.Input("x", {1, 16, 3, 5});
    std::string y = b.Op("Conv", {x, b.Const("w0", {24, 16, 1, 1})});
    if (reshaped) {
      y = b.Op("Reshape", {y, b.Values("shape", {3}, {1, 24, 15})});
      y = b.Op("Transpose", {y}, {{"perm", Ints({0, 2, 1})}});
    } else {
      y = b.Op("Transpose", {y}, {{"perm", Ints({0, 2, 3, 1})}});  // NHWC
    }
    Graph g = b.Finish(y);
    CheckAgainstReference(g, CompileOptions(), {8, 16},
                          [&](const Program& p, const std::string& specs, int64_t) {
                            // The input's conversion, the transpose.
                            EXPECT_EQ(Count(p, "transpose"), 2) << specs;
                          });
  }
}

// ShuffleNetV2's unit: the channels split in halves, one half through a conv, the halves
// concatenated and shuffled (Reshape, Transpose, Reshape), twice. Blocked, the split is a view
// of the blocked value at a block boundary (no slice kernel; 24 channels held in blocks of 8 are
// re-blocked for halves that want 12 or 4) and the shuffle one transpose from the blocked concat
// to the block its readers want (no conversion to the plain layout).
TEST(LayoutTest, AChannelSplitIsAViewAndAShuffleStaysBlocked) {
  for (int64_t c : {32, 24}) {
    SCOPED_TRACE(c);
    const int64_t h = c / 2;
    GraphBuilder b;
    std::string x = b.Input("x", {1, c, 5, 6});
    x = b.Op("Conv", {x, b.Const("w0", {c, c, 1, 1})});
    auto slice = [&](const std::string& v, int64_t from, int64_t to) {
      return b.Op("Slice",
                  {v, b.Values("st", {1}, {static_cast<float>(from)}),
                   b.Values("en", {1}, {static_cast<float>(to)}), b.Values("ax", {1}, {1})});
    };
    for (int unit = 0; unit < 2; ++unit) {
      const std::string tag = std::to_string(unit);
      std::string branch =
          b.Op("Relu", {b.Op("Conv", {slice(x, h, c), b.Const("wb" + tag, {h, h, 1, 1})})});
      x = b.Op("Concat", {slice(x, 0, h), branch}, {{"axis", Attr{Attr::kInt, 1}}});
      x = b.Op("Reshape", {x, b.Values("s1", {5}, {1, 2, static_cast<float>(h), 5, 6})});
      x = b.Op("Transpose", {x}, {{"perm", Ints({0, 2, 1, 3, 4})}});
      x = b.Op("Reshape", {x, b.Values("s2", {4}, {1, static_cast<float>(c), 5, 6})});
    }
    Graph g = b.Finish(b.Op("Conv", {x, b.Const("w9", {8, c, 1, 1})}));
    CheckAgainstReference(
        g, CompileOptions(), {16, 8}, [&](const Program& p, const std::string& specs, int64_t) {
          EXPECT_EQ(Count(p, "slice"), 0) << specs;
          // The branch writes its slab of the concat; the half, a view, is copied into its own.
          EXPECT_EQ(Count(p, "concat"), 0) << specs;
          int shuffles = 0, copies = 0;
          for (const KernelCall& k : p.kernels) {
            for (const std::string& n : k.nodes) {
              shuffles +=
                  n.find("reads layout nchw") == 0 && n.find(", writes nchw") != std::string::npos;
              copies += n == "input 0 copied into its slab";
            }
          }
          EXPECT_EQ(shuffles, 2) << specs;
          EXPECT_EQ(copies, 2) << specs;
        });
  }
}

// The program of `g` with its matmul weights in panels of 16 (null, and a test failure, where
// it does not compile), its kernels' specs one per line in `specs`; checks that it computes what
// the unpacked program does.
std::optional<Program> CompilePacked(const Graph& g, std::string* specs) {
  absl::StatusOr<Program> plain = CompileGraph(g);
  EXPECT_TRUE(plain.ok()) << plain.status();
  CompileOptions opts;
  opts.weight_panel = 16;
  absl::StatusOr<Program> packed = CompileGraph(g, opts);
  EXPECT_TRUE(packed.ok()) << packed.status();
  if (!plain.ok() || !packed.ok()) return std::nullopt;
  for (const KernelCall& k : packed->kernels) *specs += k.spec + "\n";
  ExpectClose(RunProgram(*packed), RunProgram(*plain));
  return *std::move(packed);
}

// Constant matmul weights packed once into column panels (PackMatmulWeights): two vectors of
// columns where they divide n, one vector where only that does, row-major otherwise; a weight
// two kernels share is packed once. The packed program agrees with the row-major one.
TEST(PackTest, MatmulWeightsArePackedInColumnPanels) {
  GraphBuilder b;
  std::string x = b.Input("x", {5, 24});
  std::string w = b.Const("w", {24, 48});
  std::string y = b.Op("Relu", {b.Op("Add", {b.Op("MatMul", {x, w}), b.Const("b", {48})})});
  std::string y2 = b.Op("MatMul", {x, w});  // shares w; added to y as its residual
  std::string z = b.Op("Gemm", {b.Op("Add", {y, y2}), b.Const("w2", {40, 48})},
                       {{"transB", Attr{Attr::kInt, 1}}});       // n=40: panels of 8
  std::string o = b.Op("MatMul", {z, b.Const("w3", {40, 20})});  // n=20: too narrow
  Graph g = b.Finish(o);
  std::string specs;
  std::optional<Program> packed = CompilePacked(g, &specs);
  ASSERT_TRUE(packed.has_value());
  EXPECT_THAT(specs, HasSubstr("matmul:bpanel=16,epilogue=bias_relu_res,k=24,m=5,n=48"));
  EXPECT_THAT(specs, HasSubstr("matmul:bpanel=16,epilogue=none,k=24,m=5,n=48"));
  EXPECT_THAT(specs, HasSubstr("bpanel=8,epilogue=none,k=48,m=5,n=40"));
  EXPECT_THAT(specs, HasSubstr("matmul:epilogue=none,k=40,m=5,n=20"));
  int panels = 0;
  for (const auto& [name, v] : packed->graph.values) {
    if (v.constant && name.find("@panel") != std::string::npos) ++panels;
  }
  EXPECT_EQ(panels, 2) << specs;  // w once, w2 once
}

// Where no panel of one vector or more divides n, a matmul that several rows share is padded
// with zero columns to whole panels (its per-column bias too), writes a padded output, and a
// slice keeps its n columns for the next kernel; a single row (a classifier) too. A residual
// tensor (not per column) or padding of more than 1/16 of the columns keeps B row-major.
TEST(PackTest, ColumnsThatNoPanelDividesArePaddedToWholePanels) {
  GraphBuilder b;
  std::string x = b.Input("x", {6, 24});
  std::string y = b.Op(
      "Relu", {b.Op("Add", {b.Op("MatMul", {x, b.Const("w", {24, 500})}), b.Const("b", {500})})});
  std::string s = b.Op("Softmax", {y}, {{"axis", Attr{Attr::kInt, 1}}});
  std::string r = b.Op("Add", {b.Op("MatMul", {x, b.Const("w2", {24, 500})}), s});  // residual
  std::string o = b.Op("MatMul", {r, b.Const("w4", {500, 100})});  // 100 -> 112 is > 1/16
  std::string row = b.Op("MatMul", {b.Op("Reshape", {o, b.Values("shape", {2}, {1, 600})}),
                                    b.Const("w3", {600, 1001})});  // one row
  Graph g = b.Finish(row);
  std::string specs;
  std::optional<Program> packed = CompilePacked(g, &specs);
  ASSERT_TRUE(packed.has_value());
  EXPECT_THAT(specs, HasSubstr("matmul:bpanel=16,epilogue=bias_relu,k=24,m=6,n=512"));
  EXPECT_THAT(specs, HasSubstr("slice:begin=0x0,shape=6x512,size=6x500"));
  EXPECT_THAT(specs, HasSubstr("matmul:epilogue=res,k=24,m=6,n=500"));
  EXPECT_THAT(specs, HasSubstr("matmul:epilogue=none,k=500,m=6,n=100"));
  EXPECT_THAT(specs, HasSubstr("matmul:bpanel=16,epilogue=none,k=600,m=1,n=1008"));
  EXPECT_THAT(specs, HasSubstr("slice:begin=0x0,shape=1x1008,size=1x1001"));
}

// Dense 3x3 stride-1 convolutions with enough channels become winograd_in, a batch_matmul by
// the transformed weights and winograd_out carrying the epilogue (a residual included); the
// others stay direct. The program computes what the direct one does.
TEST(WinogradTest, ThreeByThreeConvsBecomeTransformsAroundABatchMatmul) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 32, 8, 12});
  std::string y =
      b.Op("Relu", {b.Op("Conv", {x, b.Const("w0", {32, 32, 3, 3}), b.Const("b0", {32})},
                         {{"pads", Ints({1, 1, 1, 1})}})});
  std::string z = b.Op("Conv", {y, b.Const("w1", {32, 32, 3, 3}), b.Const("b1", {32})},
                       {{"pads", Ints({1, 1, 1, 1})}});
  z = b.Op("Relu", {b.Op("Add", {z, y})});
  // 6x10 out of 8x12 with no padding: tiles of 2.
  std::string v = b.Op("Conv", {z, b.Const("w2", {32, 32, 3, 3})});
  // Too few channels, and a stride of 2: direct.
  std::string n = b.Op("Conv", {v, b.Const("w3", {16, 32, 3, 3})}, {{"pads", Ints({1, 1, 1, 1})}});
  n = b.Op("Conv", {n, b.Const("w4", {16, 16, 3, 3})},
           {{"pads", Ints({1, 1, 1, 1})}, {"strides", Ints({2, 2})}});
  Graph g = b.Finish(n);
  CompileOptions direct_opts;
  direct_opts.block_lanes = 8;
  absl::StatusOr<Program> direct = CompileGraph(g, direct_opts);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_EQ(Count(*direct, "winograd_in"), 0);
  CompileOptions opts = direct_opts;
  opts.winograd = true;
  opts.weight_panel = 16;
  absl::StatusOr<Program> wino = CompileGraph(g, opts);
  ASSERT_TRUE(wino.ok()) << wino.status();
  std::string specs;
  for (const KernelCall& k : wino->kernels) specs += k.spec + "\n";
  EXPECT_EQ(Count(*wino, "winograd_in"), 3) << specs;
  EXPECT_EQ(Count(*wino, "winograd_out"), 3) << specs;
  EXPECT_EQ(Count(*wino, "conv2d"), 2) << specs;
  EXPECT_THAT(specs, HasSubstr("winograd_in:c=32,h=8,layout=nchw8c,m=4,n=1,pad=1,w=12"));
  EXPECT_THAT(specs, HasSubstr("batch_matmul:b=36,bpanel=16,epilogue=none,k=32,m=6,n=32"));
  EXPECT_THAT(specs, HasSubstr("winograd_out:epilogue=bias_relu,k=32,layout=nchw8c,m=4"));
  EXPECT_THAT(specs, HasSubstr("winograd_out:epilogue=bias_res_relu,k=32,layout=nchw8c,m=4"));
  EXPECT_THAT(specs, HasSubstr("batch_matmul:b=16,bpanel=16,epilogue=none,k=32,m=15,n=32"));
  ExpectClose(RunProgram(*wino), RunProgram(*direct));
}

// A blocked depthwise convolution whose only reader is a 1x1 convolution becomes one
// sepconv2d kernel (its bias and activation, the 1x1's bias, activation and residual kept);
// one read by two kernels, or feeding a 3x3 convolution, stays apart. The fused program
// computes what the unfused one does.
TEST(SeparableTest, DepthwiseThenOneByOneBecomesOneKernel) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 16, 12, 10});
  auto dw = [&](const std::string& in, const std::string& name, int64_t c, int64_t r,
                int64_t stride) {
    return b.Op("Conv", {in, b.Const(name, {c, 1, r, r}), b.Const(name + "b", {c})},
                {{"pads", Ints({r / 2, r / 2, r / 2, r / 2})},
                 {"strides", Ints({stride, stride})},
                 {"group", Attr{Attr::kInt, c}}});
  };
  std::string d = dw(x, "d0", 16, 3, 1);
  d = b.Op("Mul", {d, b.Op("HardSigmoid", {d}, {{"alpha", Float(1.0f / 6)}})});  // hswish
  std::string y = b.Op("Conv", {d, b.Const("p0", {24, 16, 1, 1}), b.Const("p0b", {24})});
  std::string e = dw(y, "d1", 24, 5, 2);
  e = b.Op("Relu", {e});
  std::string z = b.Op("Conv", {e, b.Const("p1", {24, 24, 1, 1}), b.Const("p1b", {24})});
  z = b.Op("Relu", {b.Op("Add", {z, e})});  // e read twice: not fused
  std::string f = dw(z, "d2", 24, 3, 1);
  f = b.Op("Conv", {f, b.Const("p2", {8, 24, 3, 3})}, {{"pads", Ints({1, 1, 1, 1})}});
  Graph g = b.Finish(f);
  for (int64_t lanes : {8, 16}) {
    SCOPED_TRACE(lanes);
    CompileOptions apart;
    apart.block_lanes = lanes;
    apart.fuse_separable = false;
    absl::StatusOr<Program> two = CompileGraph(g, apart);
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(Count(*two, "sepconv2d"), 0);
    CompileOptions fused_opts = apart;
    fused_opts.fuse_separable = true;
    // (Maps of 12 rows: fused only where the row threshold allows so few.)
    absl::StatusOr<Program> few_rows = CompileGraph(g, fused_opts);
    ASSERT_TRUE(few_rows.ok()) << few_rows.status();
    EXPECT_EQ(Count(*few_rows, "sepconv2d"), 0);
    fused_opts.separable_min_rows = 12;
    absl::StatusOr<Program> fused = CompileGraph(g, fused_opts);
    ASSERT_TRUE(fused.ok()) << fused.status();
    std::string specs;
    for (const KernelCall& k : fused->kernels) specs += k.spec + "\n";
    EXPECT_EQ(Count(*fused, "sepconv2d"), 1) << specs;
    EXPECT_EQ(Count(*fused, "conv2d"), Count(*two, "conv2d") - 2) << specs;
    EXPECT_THAT(specs, HasSubstr("dw_epilogue=bias_hswish"));
    EXPECT_THAT(specs, HasSubstr("sepconv2d:c=16,dilation=1,dw_epilogue=bias_hswish,"
                                 "epilogue=bias,h=12,k=24"));
    ExpectClose(RunProgram(*fused), RunProgram(*two));
  }
}

}  // namespace
}  // namespace lathe::model
