// Hostile ONNX files (issue 31): dims that overflow or are negative, zero strides, perms that
// are no permutation, constant folding asked for 10^12 elements, mismatched constants, short
// attribute lists. Each must be refused by the importer with an InvalidArgument naming the
// problem, never a crash, an allocation of hundreds of megabytes or a printed address.
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hostile_models.h"
#include "model/onnx_import.h"

namespace lathe::model {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::OnnxModel;

// Imports `m` and expects a refusal whose message holds `what` and no address.
void ExpectRefused(const OnnxModel& m, const std::string& what,
                   const std::vector<InputShape>& shapes = {}) {
  absl::StatusOr<Graph> g = ImportOnnxBytes(m.Bytes(), "hostile.onnx", shapes);
  ASSERT_FALSE(g.ok()) << "imported; expected a refusal saying: " << what;
  EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << g.status();
  const std::string msg(g.status().message());
  EXPECT_THAT(msg, HasSubstr(what));
  EXPECT_THAT(msg, Not(HasSubstr("0x")));
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

OnnxModel Image() {
  OnnxModel m;
  m.Input("x", {1, 1, 8, 8}).Output("y", 4);
  return m;
}

OnnxModel ConvModel(std::vector<std::pair<std::string, std::vector<int64_t>>> attrs,
                    const std::string& op = "Conv") {
  OnnxModel m = Image();
  m.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 0.1f));
  m.Node(op, {"x", "w"}, {"y"}, std::move(attrs));
  return m;
}

// Found by fuzz_onnx_import (session 16): a folded Add broadcasting a zero extent against one
// near 2^62 overflowed while counting the (empty) result's elements. NumElements is 0 for any
// shape with an empty extent and saturates instead of overflowing; the file imports or is
// refused with a message, never undefined behaviour (the fuzz smoke runs under UBSan).
TEST(HostileModelTest, EmptyExtentsBesideHugeOnesCountZeroElements) {
  EXPECT_EQ(NumElements({0, int64_t{1} << 62, 44856}), 0);
  EXPECT_EQ(NumElements({44856, int64_t{1} << 62, 0}), 0);
  EXPECT_EQ(NumElements({int64_t{1} << 40, int64_t{1} << 40}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  const std::string bytes(
      "\x08\x03\x12\x07\x70\x79\x74\x6f\x72\x63\x68\x1a\x03\x30\x2e\x33\x3a\xba\x01\x0a\x0e\x0a"
      "\x01\x30\x0a\x01\x30\x12\x01\x32\x22\x03\x41\x64\x64\x0a\x0e\x0a\x01\x30\x0a\x01\x32\x12"
      "\x01\x33\x22\x03\x4d\x75\x6c\x4a\x0c\x0a\x01\x33\x12\x01\xe7\x22\x04\x54\x61\x6e\x48\x0a"
      "\x0f\x0a\x01\x31\x12\x01\x35\x22\x07\x53\x71\x75\x65\x65\x7a\x65\x0a\x0b\x0a\x01\x33\x12"
      "\x01\x36\x22\x03\x41\x62\x73\x12\x10\x74\x6f\x72\x63\x68\x2d\x6a\x69\x74\x2d\x65\x78\x70"
      "\x6f\x72\x74\x2a\x1b\x08\x02\x08\x02\x10\x01\x42\x01\x30\x0a\x10\xd9\x00\x7e\xba\xff\xff"
      "\xff\xbf\xff\xff\xbf\x40\x00\x01\x80\x40\x5a\x13\x0a\x01\x30\x12\x0e\x0a\x0c\x08\x01\x12"
      "\x08\x0a\x02\x08\x02\x0a\x02\x08\x02\x5a\x13\x0a\x01\x31\x12\x0e\x0a\x0c\x08\x01\x12\x08"
      "\x08\x02\x1a\x02\x0a\x02\x08\x6e\x65\x67\x0a\x01\x35\x12\x0e\x0a\x0c\x08\x01\x12\x08\x0a"
      "\x02\x08\x02\x0a\x02\x08\x02\x42\x02\x10\x06",
      209);
  absl::StatusOr<Graph> g = ImportOnnxBytes(bytes, "fuzz.onnx", {});
  if (!g.ok()) {
    const std::string msg(g.status().message());
    EXPECT_THAT(msg, Not(HasSubstr("0x")));
    EXPECT_FALSE(msg.empty());
  }
}

TEST(HostileModelTest, AWellFormedConvStillImports) {
  OnnxModel m = ConvModel({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}, {"dilations", {1, 1}}});
  absl::StatusOr<Graph> g = ImportOnnxBytes(m.Bytes(), "ok.onnx", {});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->Find("y")->shape, (std::vector<int64_t>{1, 1, 4, 4}));
}

TEST(HostileModelTest, InitializerDimsThatOverflowAreRefused) {
  // 2^62 x 4 = 2^64 elements: the product wraps to 0, which the empty data field matches.
  OnnxModel zero = Image();
  zero.RawFloats("b", {int64_t{1} << 62, 4}, 0).Node("Add", {"x", "b"}, {"y"});
  ExpectRefused(zero,
                "tensor 'b': shape [4611686018427387904,4] has more than 2147483648 (2^31) "
                "elements");
  // (2^62 + 1) elements of 4 bytes: the byte count wraps to 4, which the raw data matches.
  OnnxModel bytes = Image();
  bytes.RawFloats("b", {(int64_t{1} << 62) + 1}, 4).Node("Add", {"x", "b"}, {"y"});
  ExpectRefused(bytes, "more than 2147483648 (2^31) elements");
  // (2^62 + 1) x 4 wraps to 4 elements, then a Transpose folds it.
  OnnxModel transposed;
  transposed.Input("x", {4, 1}).Output("y", 2);
  transposed.RawFloats("b", {(int64_t{1} << 62) + 1, 4}, 16)
      .Node("Transpose", {"b"}, {"t"}, {{"perm", {1, 0}}})
      .Node("Add", {"x", "t"}, {"y"});
  ExpectRefused(transposed, "more than 2147483648 (2^31) elements");
}

TEST(HostileModelTest, NegativeDimsAreRefused) {
  OnnxModel m = Image();
  m.RawFloats("b", {-1, -4}, 16).Node("Add", {"x", "b"}, {"y"});
  ExpectRefused(m, "tensor 'b': shape [-1,-4] has a negative extent");
}

TEST(HostileModelTest, InputShapesThatOverflowAreRefused) {
  OnnxModel m;
  m.Input("x", {-1, -1}).Output("y", 2).Node("Relu", {"x"}, {"y"});
  // Each extent is below --input's per-dimension bound; the product is 2^48.
  ExpectRefused(m, "input 'x': shape [16777216,16777216] has more than",
                {{"x", {1 << 24, 1 << 24}}});
}

TEST(HostileModelTest, ZeroStridesAndBadWindowsAreRefusedBeforeShapeInference) {
  ExpectRefused(ConvModel({{"strides", {0, 1}}}),
                "node 'Conv_0' (Conv): stride 0 in attribute 'strides' (must be >= 1)");
  ExpectRefused(ConvModel({{"dilations", {1, 0}}}), "dilation 0 in attribute 'dilations'");
  ExpectRefused(ConvModel({{"pads", {-5, 0, 0, 0}}}), "pad -5 in attribute 'pads' (must be >= 0)");
  ExpectRefused(ConvModel({{"strides", {1}}}), "attribute 'strides' has 1 value(s), 2 expected");
  ExpectRefused(ConvModel({{"kernel_shape", {5, 5}}}),
                "attribute 'kernel_shape' [5,5] does not match the weight [1,1,3,3]");
  OnnxModel pool = Image();
  pool.Node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", {2, 2}}, {"strides", {1, 0}}});
  ExpectRefused(pool, "node 'MaxPool_0' (MaxPool): stride 0 in attribute 'strides'");
  OnnxModel big_pool = Image();
  big_pool.Node("AveragePool", {"x"}, {"y"},
                {{"kernel_shape", {int64_t{1} << 62, 2}}, {"pads", {0, 0, 0, 0}}});
  ExpectRefused(big_pool, "kernel extent 4611686018427387904 in attribute 'kernel_shape'");
  OnnxModel group = ConvModel({});
  group = Image();
  group.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 0.1f))
      .Node("Conv", {"x", "w"}, {"y"}, {}, {{"group", 0}});
  ExpectRefused(group, "attribute 'group' is 0");
}

TEST(HostileModelTest, ShortConvTransposeOutputPaddingIsRefused) {
  ExpectRefused(ConvModel({{"strides", {2, 2}}, {"output_padding", {1}}}, "ConvTranspose"),
                "attribute 'output_padding' has 1 value(s), 2 expected");
  ExpectRefused(ConvModel({{"strides", {2, 2}}, {"output_padding", {1, 5}}}, "ConvTranspose"),
                "output padding 5 in attribute 'output_padding' (must be smaller than the stride");
}

TEST(HostileModelTest, TransposePermMustBeAPermutation) {
  OnnxModel repeated = Image();
  repeated.Node("Transpose", {"x"}, {"y"}, {{"perm", {0, 0, 1, 2}}});
  ExpectRefused(repeated, "axis 0 appears twice in attribute 'perm'");
  OnnxModel outside = Image();
  outside.Node("Transpose", {"x"}, {"y"}, {{"perm", {0, 1, 2, 9}}});
  ExpectRefused(outside, "perm value 9 is outside [0, 4)");
  OnnxModel short_perm = Image();
  short_perm.Node("Transpose", {"x"}, {"y"}, {{"perm", {1, 0}}});
  ExpectRefused(short_perm, "perm names 2 axes for an input of rank 4");
  // A folded Transpose of a constant checks the same.
  OnnxModel folded;
  folded.Input("x", {3, 2}).Output("y", 2);
  folded.Floats("c", {2, 3}, std::vector<float>(6, 1))
      .Node("Transpose", {"c"}, {"t"}, {{"perm", {0, 1, 2}}})
      .Node("Add", {"x", "t"}, {"y"});
  ExpectRefused(folded, "perm names 3 axes for an input of rank 2");
}

// start, limit, delta -> Range -> Cast to float -> Add to x.
OnnxModel RangeModel(int64_t limit) {
  OnnxModel m;
  m.Input("x", {1}).Output("y", 1);
  m.Scalar("s", 0).Scalar("l", limit).Scalar("d", 1);
  m.Node("Range", {"s", "l", "d"}, {"r"})
      .Node("Cast", {"r"}, {"rf"}, {}, {{"to", 1}})
      .Node("Add", {"x", "rf"}, {"y"});
  return m;
}

TEST(HostileModelTest, FoldingIsBoundedInElements) {
  ExpectRefused(RangeModel(1000000000000), "a Range of 1e+12 elements");
  // The 119-byte model that took 900 MB: 10^8 elements, refused before allocating.
  ExpectRefused(RangeModel(100000000), "more than the 16777216 lathe folds");
  OnnxModel cos;
  cos.Input("x", {1}).Output("y", 1);
  cos.Ints("s", {2}, {1 << 13, 1 << 12})
      .Node("ConstantOfShape", {"s"}, {"c"})
      .Node("Add", {"x", "c"}, {"y"});
  ExpectRefused(cos,
                "folding would create 33554432 elements (shape [8192,4096]), more than the "
                "16777216 lathe folds in one tensor");
  OnnxModel negative;
  negative.Input("x", {1}).Output("y", 1);
  negative.Ints("s", {1}, {-5})
      .Node("ConstantOfShape", {"s"}, {"c"})
      .Node("Add", {"x", "c"}, {"y"});
  ExpectRefused(negative, "shape [-5] has a negative extent");
  OnnxModel expand;
  expand.Input("x", {1}).Output("y", 2);
  expand.Ints("v", {1}, {7})
      .Ints("s", {2}, {1 << 13, 1 << 12})
      .Node("Expand", {"v", "s"}, {"e"})
      .Node("Cast", {"e"}, {"ef"}, {}, {{"to", 1}})
      .Node("Add", {"x", "ef"}, {"y"});
  ExpectRefused(expand, "folding would create 33554432 elements");
  OnnxModel huge;
  huge.Input("x", {1}).Output("y", 1);
  huge.Ints("s", {2}, {1 << 20, 1 << 20})
      .Node("ConstantOfShape", {"s"}, {"c"})
      .Node("Add", {"x", "c"}, {"y"});
  ExpectRefused(huge, "shape [1048576,1048576] has more than 2147483648 (2^31) elements");
}

TEST(HostileModelTest, MismatchedConstantsAreRefusedNotReadOutOfBounds) {
  OnnxModel m;
  m.Input("x", {7, 3}).Output("y", 2);
  m.Ints("c1", {2, 3}, {1, 1, 1, 1, 1, 1})
      .Ints("c2", {5, 1}, {2, 2, 2, 2, 2})
      .Node("Concat", {"c1", "c2"}, {"c"}, {}, {{"axis", 0}})
      .Node("Cast", {"c"}, {"cf"}, {}, {{"to", 1}})
      .Node("Add", {"x", "cf"}, {"y"});
  ExpectRefused(m, "input shapes [2,3] and [5,1] differ outside axis 0");
  OnnxModel gather;
  gather.Input("x", {1, 1, 8, 8}).Output("y", 1);
  gather.Ints("i", {1}, {1000})
      .Node("Shape", {"x"}, {"s"})
      .Node("Gather", {"s", "i"}, {"g"}, {}, {{"axis", 0}})
      .Node("Cast", {"g"}, {"gf"}, {}, {{"to", 1}})
      .Node("Relu", {"gf"}, {"y"});
  ExpectRefused(gather, "index 1000 is outside an axis of extent 4");
}

TEST(HostileModelTest, ShapeOperandsAreChecked) {
  OnnxModel reshape = Image();
  reshape.Ints("s", {4}, {int64_t{1} << 40, int64_t{1} << 40, 1, 1})
      .Node("Reshape", {"x", "s"}, {"y"});
  ExpectRefused(reshape, "has more than 2147483648 (2^31) elements");
  OnnxModel unsqueeze;
  unsqueeze.Input("x", {2}).Output("y", 3);
  unsqueeze.Ints("a", {2}, {0, -3}).Node("Unsqueeze", {"x", "a"}, {"y"});
  ExpectRefused(unsqueeze, "is named twice");
  OnnxModel resize = Image();
  resize.Floats("roi", {0}, {})
      .Floats("sc", {4}, {1, 1, 1e30f, 1e30f})
      .Node("Resize", {"x", "roi", "sc"}, {"y"});
  ExpectRefused(resize, "give no valid output extent");
  OnnxModel pool = Image();
  pool.Node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", {20, 20}}});
  ExpectRefused(pool, "output 'y': shape [1,1,-11,-11] has a negative extent");
}

TEST(HostileModelTest, UnknownOperatorsAreRefusedBeforeShapeInference) {
  OnnxModel m = Image();
  m.Node("SpaceToDepth", {"x"}, {"y"}, {}, {{"blocksize", 0}});
  ExpectRefused(m, "node 'SpaceToDepth_0' (SpaceToDepth): operator SpaceToDepth is not supported");
}

TEST(HostileModelTest, CheckerMessagesAreOneLine) {
  // strides given as one INT where the schema wants INTS: libonnx's checker refuses it with a
  // message over several lines, which the importer joins.
  OnnxModel m = Image();
  m.Floats("w", {1, 1, 3, 3}, std::vector<float>(9, 0.1f))
      .Node("Conv", {"x", "w"}, {"y"}, {}, {{"strides", 2}});
  ExpectRefused(m, "hostile.onnx: invalid ONNX model: ");
}

}  // namespace
}  // namespace lathe::model
