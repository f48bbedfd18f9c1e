#include "ir/workload.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/ops.h"

namespace lathe::ir {
namespace {

using ::testing::HasSubstr;

std::string Canonical(const std::string& text) {
  absl::StatusOr<WorkloadSpec> spec = ParseWorkloadSpec(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status();
  return spec.ok() ? spec->ToString() : "";
}

// The error message of a spec that must be rejected.
std::string Error(const std::string& text) {
  absl::StatusOr<WorkloadSpec> spec = ParseWorkloadSpec(text);
  EXPECT_FALSE(spec.ok()) << text << " was accepted as " << spec->ToString();
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  return std::string(spec.status().message());
}

TEST(WorkloadSpecTest, CanonicalFormSortsKeysAndFillsDefaults) {
  EXPECT_EQ(Canonical("matmul:m=4,n=8,k=2"), "matmul:epilogue=none,k=2,m=4,n=8");
  EXPECT_EQ(Canonical("batch_matmul:b=2,m=4,n=8,k=2,epilogue=bias_relu"),
            "batch_matmul:b=2,epilogue=bias_relu,k=2,m=4,n=8");
  EXPECT_EQ(Canonical("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1"),
            "conv2d:c=64,dilation=1,epilogue=none,groups=1,h=56,k=64,layout=nchw,n=1,pad=1,r=3,"
            "s=3,stride=1,w=56");
  EXPECT_EQ(Canonical("pool2d:n=1,c=8,h=8,w=8,r=2,s=2,stride=2"),
            "pool2d:c=8,h=8,kind=max,layout=nchw,n=1,pad=0,r=2,s=2,stride=2,w=8");
  EXPECT_EQ(Canonical("softmax:m=3,n=5"), "softmax:m=3,n=5");
  EXPECT_EQ(Canonical("layer_norm:m=3,n=5"), "layer_norm:eps=1e-05,m=3,n=5");
}

TEST(WorkloadSpecTest, KeyOrderAndSpellingDoNotMatter) {
  const std::string a = Canonical("matmul:m=64,n=32,k=16");
  EXPECT_EQ(Canonical("matmul:k=16,n=32,m=64"), a);
  EXPECT_EQ(Canonical("matmul:n=32,k=16,m=64,epilogue=none"), a);
  EXPECT_EQ(Canonical("matmul:m=064,n=32,k=16,dtype=float32"), a);
  EXPECT_EQ(Canonical("layer_norm:m=2,n=2,eps=0.00001"), Canonical("layer_norm:eps=1e-5,m=2,n=2"));
  EXPECT_EQ(Canonical("layer_norm:m=2,n=2,eps=0.001"), "layer_norm:eps=0.001,m=2,n=2");
}

TEST(WorkloadSpecTest, CanonicalFormIsAFixedPoint) {
  for (const char* text : {"matmul:m=1,n=2,k=3,epilogue=relu",
                           "conv2d:n=1,c=4,h=5,w=5,k=8,r=3,s=3,groups=2,"
                           "layout=nhwc,stride=2,dilation=2,pad=2,epilogue=bias",
                           "pool2d:n=1,c=2,h=5,w=5,r=3,s=3,pad=1,kind=avg,layout=nhwc",
                           "layer_norm:m=1,n=7,eps=0.5", "softmax:m=1,n=1"}) {
    const std::string c = Canonical(text);
    EXPECT_EQ(Canonical(c), c);
  }
}

TEST(WorkloadSpecTest, KeyIsStable) {
  // Records in databases are keyed by this value; it must never change.
  EXPECT_EQ(WorkloadKey("matmul:epilogue=none,k=1024,m=1024,n=1024"), "52fb5a30d6369808");
  EXPECT_EQ(WorkloadKey(""), "cbf29ce484222325");
  absl::StatusOr<Workload> w = MakeWorkload("matmul:k=1024,n=1024,m=1024");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->canonical, "matmul:epilogue=none,k=1024,m=1024,n=1024");
  EXPECT_EQ(w->key, "52fb5a30d6369808");
}

TEST(WorkloadSpecTest, UnknownOp) {
  EXPECT_EQ(Error("matmull:m=1,n=1,k=1"),
            "unknown op 'matmull' (expected one of matmul, batch_matmul, conv2d, conv2d_transpose, "
            "pool2d, softmax, layer_norm, ewise, transpose, slice, concat, resize, reduce, "
            "winograd_in, winograd_out, sepconv2d)");
  EXPECT_THAT(Error("MATMUL:m=1,n=1,k=1"), HasSubstr("unknown op 'MATMUL'"));
  EXPECT_THAT(Error(":m=1"), HasSubstr("unknown op ''"));
  EXPECT_EQ(Error(""), "empty workload spec");
}

TEST(WorkloadSpecTest, UnknownAndMissingKeys) {
  EXPECT_THAT(Error("matmul:m=1,n=1,k=1,q=2"), HasSubstr("unknown key 'q' for op matmul"));
  EXPECT_THAT(Error("softmax:m=1,n=1,k=2"), HasSubstr("unknown key 'k' for op softmax"));
  EXPECT_THAT(Error("matmul:m=1,n=1,k=1,stride=2"), HasSubstr("unknown key 'stride'"));
  EXPECT_EQ(Error("matmul:m=1,n=1"), "missing key 'k' for matmul");
  EXPECT_EQ(Error("matmul"), "missing key 'm' for matmul");
  EXPECT_EQ(Error("batch_matmul:m=1,n=1,k=1"), "missing key 'b' for batch_matmul");
}

TEST(WorkloadSpecTest, MalformedEntries) {
  EXPECT_EQ(Error("matmul:m=1,m=2,n=1,k=1"), "duplicate key 'm' for op matmul");
  EXPECT_EQ(Error("matmul:m=,n=1,k=1"), "empty value for key 'm' of matmul");
  EXPECT_THAT(Error("matmul:m=1,,n=1,k=1"), HasSubstr("empty entry"));
  EXPECT_THAT(Error("matmul:m=1,n=1,k=1,"), HasSubstr("empty entry"));
  EXPECT_THAT(Error("matmul:m1,n=1,k=1"), HasSubstr("malformed entry 'm1'"));
  EXPECT_THAT(Error("matmul:=1,n=1,k=1"), HasSubstr("malformed entry '=1'"));
  EXPECT_THAT(Error("matmul: m=1,n=1,k=1"), HasSubstr("contains whitespace"));
}

TEST(WorkloadSpecTest, BadValues) {
  EXPECT_EQ(Error("matmul:m=0x,n=1,k=1"), "key 'm' of matmul must be a positive integer, got '0x'");
  EXPECT_EQ(Error("matmul:m=0,n=1,k=1"), "key 'm' of matmul must be a positive integer, got '0'");
  EXPECT_THAT(Error("matmul:m=-3,n=1,k=1"), HasSubstr("got '-3'"));
  EXPECT_THAT(Error("matmul:m=+3,n=1,k=1"), HasSubstr("got '+3'"));
  EXPECT_THAT(Error("matmul:m=1.5,n=1,k=1"), HasSubstr("got '1.5'"));
  EXPECT_THAT(Error("matmul:m=99999999999999999999999,n=1,k=1"),
              HasSubstr("must be a positive integer"));
  EXPECT_THAT(Error("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,pad=-1"),
              HasSubstr("key 'pad' of conv2d must be a non-negative integer, got '-1'"));
  EXPECT_THAT(Error("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,stride=0"),
              HasSubstr("key 'stride' of conv2d must be a positive integer"));
  EXPECT_THAT(Error("matmul:m=1,n=1,k=1,epilogue=gelux"),
              HasSubstr("key 'epilogue' of matmul: unknown epilogue step 'gelux'"));
  EXPECT_THAT(Error("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,layout=chwn"),
              HasSubstr("key 'layout' of conv2d must be nchw, nhwc or nchw{x}c"));
  EXPECT_THAT(Error("pool2d:n=1,c=1,h=3,w=3,r=1,s=1,kind=min"),
              HasSubstr("key 'kind' of pool2d must be one of max, avg"));
  EXPECT_THAT(Error("layer_norm:m=1,n=1,eps=0"), HasSubstr("key 'eps' of layer_norm"));
  EXPECT_THAT(Error("layer_norm:m=1,n=1,eps=nan"), HasSubstr("positive number, got 'nan'"));
  EXPECT_THAT(Error("layer_norm:m=1,n=1,eps=abc"), HasSubstr("got 'abc'"));
  EXPECT_EQ(Error("matmul:m=1,n=1,k=1,dtype=float16"),
            "unsupported dtype 'float16' for op matmul (only float32 is supported)");
}

TEST(WorkloadSpecTest, ImpossibleShapes) {
  EXPECT_EQ(Error("conv2d:n=1,c=64,h=8,w=8,k=64,r=3,s=3,groups=3"),
            "conv2d: c=64 is not divisible by groups=3");
  EXPECT_EQ(Error("conv2d:n=1,c=4,h=8,w=8,k=6,r=3,s=3,groups=4"),
            "conv2d: k=6 is not divisible by groups=4");
  EXPECT_EQ(Error("conv2d:n=1,c=1,h=2,w=8,k=1,r=5,s=1"),
            "conv2d: output height is not positive (h=2, r=5, pad=0, dilation=1, stride=1)");
  // Truncating division would give oh = 1 here.
  EXPECT_THAT(Error("conv2d:n=1,c=1,h=2,w=8,k=1,r=3,s=1,stride=2"),
              HasSubstr("output height is not positive"));
  EXPECT_THAT(Error("conv2d:n=1,c=1,h=8,w=4,k=1,r=1,s=3,dilation=2"),
              HasSubstr("output width is not positive (w=4, s=3"));
  EXPECT_THAT(Error("pool2d:n=1,c=1,h=8,w=8,r=2,s=2,pad=2"),
              HasSubstr("pool2d: pad=2 must be smaller than the window"));
  EXPECT_THAT(Error("pool2d:n=1,c=1,h=2,w=8,r=4,s=1"), HasSubstr("output height is not positive"));
}

TEST(WorkloadSpecTest, HostileSizesAreRejected) {
  EXPECT_THAT(Error("matmul:m=2000000,n=1,k=1"),
              HasSubstr("key 'm' of matmul is 2000000, above the limit 1048576"));
  EXPECT_THAT(Error("matmul:m=1048576,n=1048576,k=1"), HasSubstr("matmul: tensor C"));
  EXPECT_THAT(Error("conv2d:n=1024,c=1024,h=1024,w=1024,k=1,r=1,s=1"), HasSubstr("tensor X"));
  EXPECT_THAT(Error("softmax:m=1048576,n=4096"), HasSubstr("softmax: tensor X"));
  EXPECT_TRUE(ParseWorkloadSpec("matmul:m=1048576,n=2048,k=1").ok());
}

TEST(WorkloadTest, MatmulTensorsArgsAndFlops) {
  absl::StatusOr<Workload> w = MakeWorkload("matmul:m=4,n=8,k=2,epilogue=bias_relu");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->args.size(), 4u);
  EXPECT_EQ(w->args[0]->name, "A");
  EXPECT_EQ(w->args[1]->name, "B");
  EXPECT_EQ(w->args[2]->name, "bias");
  EXPECT_EQ(w->output()->name, "C");
  EXPECT_EQ(w->args[0]->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(w->args[1]->shape, (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(w->args[2]->shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(w->output()->shape, (std::vector<int64_t>{4, 8}));
  ASSERT_NE(w->Find("matmul"), nullptr);
  EXPECT_TRUE((*w->Find("matmul"))->is_reduction());
  EXPECT_EQ(w->Find("nope"), nullptr);
  EXPECT_DOUBLE_EQ(w->flops, 2.0 * 4 * 8 * 2 + 2.0 * 4 * 8);
}

TEST(WorkloadTest, TensorsAreTopologicallyOrderedWithUniqueNames) {
  for (const char* text :
       {"matmul:m=4,n=8,k=2", "batch_matmul:b=2,m=4,n=8,k=2,epilogue=relu",
        "conv2d:n=1,c=4,h=6,w=6,k=4,r=3,s=3,pad=1,epilogue=bias",
        "conv2d:n=1,c=4,h=6,w=6,k=8,r=3,s=3,pad=1,groups=4,layout=nhwc",
        "pool2d:n=1,c=2,h=6,w=6,r=3,s=3,pad=1", "softmax:m=3,n=5", "layer_norm:m=3,n=5"}) {
    SCOPED_TRACE(text);
    absl::StatusOr<Workload> w = MakeWorkload(text);
    ASSERT_TRUE(w.ok()) << w.status();
    std::set<std::string> seen;
    for (const Tensor& t : w->tensors) {
      EXPECT_TRUE(seen.insert(t->name).second) << "duplicate tensor " << t->name;
      if (t->is_placeholder()) continue;
      for (const std::string& read : ReadTensors(t->body)) {
        EXPECT_TRUE(seen.count(read)) << t->name << " reads " << read << " before it is defined";
      }
    }
    for (const Tensor& a : w->args) EXPECT_TRUE(seen.count(a->name)) << a->name;
    EXPECT_EQ(w->tensors.back()->name, w->output()->name);
    EXPECT_GT(w->flops, 0);
  }
}

TEST(WorkloadTest, ConvShapesFollowTheContract) {
  absl::StatusOr<Workload> w =
      MakeWorkload("conv2d:n=2,c=4,h=7,w=9,k=6,r=3,s=2,stride=2,pad=1,dilation=2,groups=2");
  ASSERT_TRUE(w.ok()) << w.status();
  // oh = (7 + 2 - 2*2 - 1) / 2 + 1 = 3, ow = (9 + 2 - 2*1 - 1) / 2 + 1 = 5.
  EXPECT_EQ(w->args[0]->shape, (std::vector<int64_t>{2, 4, 7, 9}));
  EXPECT_EQ(w->args[1]->shape, (std::vector<int64_t>{6, 2, 3, 2}));
  EXPECT_EQ(w->output()->shape, (std::vector<int64_t>{2, 6, 3, 5}));
  ASSERT_NE(w->Find("pad"), nullptr);
  EXPECT_EQ((*w->Find("pad"))->tag, "pad");

  absl::StatusOr<Workload> v = MakeWorkload(
      "conv2d:n=2,c=4,h=7,w=9,k=6,r=3,s=2,stride=2,pad=1,dilation=2,groups=2,"
      "layout=nhwc,epilogue=bias");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->args[0]->shape, (std::vector<int64_t>{2, 7, 9, 4}));
  EXPECT_EQ(v->args[1]->shape, (std::vector<int64_t>{3, 2, 2, 6}));
  EXPECT_EQ(v->args[2]->shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(v->output()->shape, (std::vector<int64_t>{2, 3, 5, 6}));
}

TEST(WorkloadTest, BlockedLayoutsHaveTheirShapesAndRefuseBlocksThatDoNotDivide) {
  absl::StatusOr<Workload> w = MakeWorkload(
      "conv2d:n=2,c=32,h=7,w=9,k=48,r=3,s=3,pad=1,layout=nchw16c,kblock=8,epilogue=bias_res");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->args[0]->shape, (std::vector<int64_t>{2, 2, 7, 9, 16}));
  EXPECT_EQ(w->args[1]->shape, (std::vector<int64_t>{6, 2, 3, 3, 16, 8}));
  EXPECT_EQ(w->args[2]->shape, (std::vector<int64_t>{48}));             // bias
  EXPECT_EQ(w->args[3]->shape, (std::vector<int64_t>{2, 6, 7, 9, 8}));  // res
  EXPECT_EQ(w->output()->shape, (std::vector<int64_t>{2, 6, 7, 9, 8}));
  // kblock defaults to the layout's block and is then left out of the canonical form.
  EXPECT_EQ(Canonical("conv2d:n=1,c=16,h=4,w=4,k=16,r=1,s=1,layout=nchw8c,kblock=8"),
            Canonical("conv2d:n=1,c=16,h=4,w=4,k=16,r=1,s=1,layout=nchw8c"));
  EXPECT_EQ(Canonical("conv2d:n=1,c=16,h=4,w=4,k=16,r=1,s=1,layout=nchw8c"),
            "conv2d:c=16,dilation=1,epilogue=none,groups=1,h=4,k=16,layout=nchw8c,n=1,pad=0,r=1,"
            "s=1,stride=1,w=4");
  absl::StatusOr<Workload> dw =
      MakeWorkload("conv2d:n=1,c=32,h=8,w=8,k=32,r=3,s=3,pad=1,groups=32,layout=nchw16c");
  ASSERT_TRUE(dw.ok()) << dw.status();
  EXPECT_EQ(dw->args[1]->shape, (std::vector<int64_t>{2, 3, 3, 16}));
  absl::StatusOr<Workload> pool =
      MakeWorkload("pool2d:n=1,c=16,h=8,w=8,r=2,s=2,stride=2,layout=nchw8c");
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ(pool->output()->shape, (std::vector<int64_t>{1, 2, 4, 4, 8}));

  EXPECT_THAT(Error("conv2d:n=1,c=40,h=8,w=8,k=16,r=3,s=3,layout=nchw16c"),
              HasSubstr("c=40 is not a multiple of the block 16 of layout nchw16c"));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=40,r=3,s=3,layout=nchw16c"),
              HasSubstr("k=40 is not a multiple of the output block 16"));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nhwc,kblock=8"),
              HasSubstr("kblock needs a blocked layout"));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,groups=16,kblock=8"),
              HasSubstr("kblock needs a blocked layout"));
  EXPECT_THAT(Error("conv2d:n=1,c=3,h=8,w=8,k=12,r=3,s=3,kblock=8"),
              HasSubstr("k=12 is not a multiple of the output block 8"));
  // Plain input, blocked output (a first layer): X [n, c, h, w], W as one block of c channels.
  absl::StatusOr<Workload> plain_in =
      MakeWorkload("conv2d:n=1,c=3,h=8,w=8,k=16,r=3,s=3,pad=1,stride=2,kblock=8");
  ASSERT_TRUE(plain_in.ok()) << plain_in.status();
  EXPECT_EQ(plain_in->args[0]->shape, (std::vector<int64_t>{1, 3, 8, 8}));
  EXPECT_EQ(plain_in->args[1]->shape, (std::vector<int64_t>{2, 1, 3, 3, 3, 8}));
  EXPECT_EQ(plain_in->output()->shape, (std::vector<int64_t>{1, 2, 4, 4, 8}));
  // Grouped: the blocks lie within the groups; each output block reads its group's blocks.
  absl::StatusOr<Workload> grouped =
      MakeWorkload("conv2d:n=1,c=32,h=8,w=8,k=48,r=3,s=3,pad=1,groups=2,layout=nchw8c,kblock=8");
  ASSERT_TRUE(grouped.ok()) << grouped.status();
  EXPECT_EQ(grouped->args[1]->shape, (std::vector<int64_t>{6, 2, 3, 3, 8, 8}));
  EXPECT_EQ(grouped->output()->shape, (std::vector<int64_t>{1, 6, 8, 8, 8}));
  // An input block that holds several whole groups: each output block reads its group's lanes
  // (weights in blocks of the group's channels).
  absl::StatusOr<Workload> spanning =
      MakeWorkload("conv2d:n=1,c=24,h=8,w=8,k=24,r=3,s=3,pad=1,groups=3,layout=nchw24c,kblock=8");
  ASSERT_TRUE(spanning.ok()) << spanning.status();
  EXPECT_EQ(spanning->args[0]->shape, (std::vector<int64_t>{1, 1, 8, 8, 24}));
  EXPECT_EQ(spanning->args[1]->shape, (std::vector<int64_t>{3, 1, 3, 3, 8, 8}));
  EXPECT_EQ(spanning->output()->shape, (std::vector<int64_t>{1, 3, 8, 8, 8}));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,groups=4,layout=nchw8c"),
              HasSubstr("its output blocks divide the 4 output channels of a group and its "
                        "input blocks the 4 input channels or a multiple of them"));
  EXPECT_THAT(Error("conv2d:n=1,c=24,h=8,w=8,k=24,r=3,s=3,groups=3,layout=nchw12c,kblock=8"),
              HasSubstr("input blocks the 8 input channels or a multiple of them"));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,groups=16,layout=nchw8c,kblock=4"),
              HasSubstr("a blocked grouped convolution is depthwise"));
  EXPECT_THAT(Error("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw12c"), HasSubstr("layout"));
  EXPECT_THAT(Error("pool2d:n=1,c=12,h=8,w=8,r=2,s=2,layout=nchw8c"),
              HasSubstr("c=12 is not a multiple of the block 8"));
}

// A matmul whose B comes in column panels of bpanel columns: B [n/p, k, p], the output and a
// residual [m, n/p, p] (the memory of [m, n]), the bias [n]; the key is left out otherwise so
// that existing records keep their keys.
TEST(WorkloadTest, PanelMatmulShapesAndErrors) {
  absl::StatusOr<Workload> w = MakeWorkload("matmul:m=5,n=48,k=7,bpanel=16,epilogue=bias_res");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->args[0]->shape, (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(w->args[1]->shape, (std::vector<int64_t>{3, 7, 16}));
  EXPECT_EQ(w->args[2]->shape, (std::vector<int64_t>{48}));
  EXPECT_EQ(w->args[3]->shape, (std::vector<int64_t>{5, 3, 16}));
  EXPECT_EQ(w->output()->shape, (std::vector<int64_t>{5, 3, 16}));
  EXPECT_DOUBLE_EQ(w->flops, 2.0 * 5 * 48 * 7 + 2.0 * 5 * 48);
  EXPECT_EQ(Canonical("matmul:m=2,n=4,k=3"), "matmul:epilogue=none,k=3,m=2,n=4");
  EXPECT_EQ(Canonical("matmul:m=2,n=4,k=3,bpanel=2"), "matmul:bpanel=2,epilogue=none,k=3,m=2,n=4");
  EXPECT_THAT(Error("matmul:m=2,n=40,k=3,bpanel=16"), HasSubstr("bpanel 16 does not divide n=40"));
  EXPECT_THAT(Error("matmul:m=2,n=32,k=3,bpanel=16,transpose_b=1"),
              HasSubstr("bpanel needs transpose_b=0"));
  EXPECT_THAT(Error("batch_matmul:b=2,m=2,n=32,k=3,bpanel=16,bcast=b"),
              HasSubstr("bpanel needs bcast=none"));
  // A batch_matmul's panels are per batch: B [b, n/p, k, p], the output [b, m, n/p, p].
  absl::StatusOr<Workload> bw = MakeWorkload("batch_matmul:b=4,m=5,n=32,k=3,bpanel=16");
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_EQ(bw->args[1]->shape, (std::vector<int64_t>{4, 2, 3, 16}));
  EXPECT_EQ(bw->output()->shape, (std::vector<int64_t>{4, 5, 2, 16}));
}

// The Winograd transforms: V [t, t, n, th, tw, c/x, x] (t = m + 2) from a blocked input, Y
// [n, k/x, th, m, tw, m, x] (the memory of [n, k/x, oh, ow, x]) from M shaped like V.
TEST(WorkloadTest, WinogradShapesAndErrors) {
  absl::StatusOr<Workload> in =
      MakeWorkload("winograd_in:n=2,c=16,h=9,w=5,m=4,pad=1x0x0x1,layout=nchw8c");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(in->args[0]->shape, (std::vector<int64_t>{2, 2, 9, 5, 8}));
  EXPECT_EQ(in->output()->shape, (std::vector<int64_t>{6, 6, 2, 2, 1, 2, 8}));
  absl::StatusOr<Workload> out =
      MakeWorkload("winograd_out:n=1,k=8,oh=4,ow=6,m=2,layout=nchw4c,epilogue=bias_res");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->args[0]->shape, (std::vector<int64_t>{4, 4, 1, 2, 3, 2, 4}));
  EXPECT_EQ(out->args[1]->shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(out->args[2]->shape, (std::vector<int64_t>{1, 2, 2, 2, 3, 2, 4}));
  EXPECT_EQ(out->output()->shape, (std::vector<int64_t>{1, 2, 2, 2, 3, 2, 4}));
  EXPECT_EQ(Canonical("winograd_in:n=1,c=8,h=8,w=8,layout=nchw8c"),
            "winograd_in:c=8,h=8,layout=nchw8c,m=4,n=1,pad=1,w=8");
  EXPECT_THAT(Error("winograd_in:n=1,c=8,h=7,w=6,layout=nchw8c"),
              HasSubstr("output 7x6 is not a whole number of 4x4 tiles"));
  EXPECT_THAT(Error("winograd_in:n=1,c=8,h=6,w=6,layout=nchw"), HasSubstr("is not blocked"));
  EXPECT_THAT(Error("winograd_out:n=1,k=12,oh=4,ow=4,layout=nchw8c"),
              HasSubstr("k=12 is not a multiple of the block 8"));
  EXPECT_THAT(Error("winograd_out:n=1,k=8,oh=4,ow=4,m=3,layout=nchw8c"), HasSubstr("m"));
}

// sepconv2d: X, the depthwise weights and its epilogue's tensors (dw_bias), the 1x1's weights
// and its epilogue's tensors, Y at the depthwise output's extents; errors name the part.
TEST(WorkloadTest, SeparableConvShapesAndErrors) {
  absl::StatusOr<Workload> w = MakeWorkload(
      "sepconv2d:n=1,c=16,h=9,w=7,k=12,r=3,s=3,stride=2,pad=1,layout=nchw8c,kblock=4,"
      "dw_epilogue=bias_hswish,epilogue=bias_res");
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::string> names;
  for (const Tensor& t : w->args) names.push_back(t->name);
  EXPECT_EQ(names, (std::vector<std::string>{"X", "DW", "dw_bias", "W", "bias", "res", "Y"}));
  EXPECT_EQ(w->args[1]->shape, (std::vector<int64_t>{2, 3, 3, 8}));
  EXPECT_EQ(w->args[2]->shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(w->args[3]->shape, (std::vector<int64_t>{3, 2, 1, 1, 8, 4}));
  EXPECT_EQ(w->output()->shape, (std::vector<int64_t>{1, 3, 5, 4, 4}));
  EXPECT_EQ(Canonical("sepconv2d:n=1,c=8,h=4,w=4,k=8,r=3,s=3,pad=1,layout=nchw8c,kblock=8"),
            "sepconv2d:c=8,dilation=1,dw_epilogue=none,epilogue=none,h=4,k=8,layout=nchw8c,n=1,"
            "pad=1,r=3,s=3,stride=1,w=4");
  EXPECT_THAT(Error("sepconv2d:n=1,c=8,h=4,w=4,k=8,r=3,s=3,layout=nchw"),
              HasSubstr("needs a blocked layout"));
  EXPECT_THAT(Error("sepconv2d:n=1,c=8,h=4,w=4,k=8,r=3,s=3,layout=nchw8c,dw_epilogue=bias_res"),
              HasSubstr("per-channel steps only"));
  EXPECT_THAT(Error("sepconv2d:n=1,c=12,h=4,w=4,k=8,r=3,s=3,layout=nchw8c"),
              HasSubstr("depthwise part: conv2d: c=12 is not a multiple of the block 8"));
  EXPECT_THAT(Error("sepconv2d:n=1,c=8,h=4,w=4,k=12,r=3,s=3,layout=nchw8c"),
              HasSubstr("1x1 part: conv2d: k=12 is not a multiple of the output block 8"));
  EXPECT_THAT(Error("sepconv2d:n=1,c=8,h=2,w=4,k=8,r=3,s=3,layout=nchw8c"),
              HasSubstr("output height is not positive"));
}

TEST(WorkloadTest, MakeWorkloadRevalidatesHandBuiltSpecs) {
  WorkloadSpec spec;
  spec.op = "matmul";
  spec.params = {{"m", "4"}, {"n", "4"}};
  EXPECT_FALSE(MakeWorkload(spec).ok());
  spec.params["k"] = "2";
  absl::StatusOr<Workload> w = MakeWorkload(spec);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->canonical, "matmul:epilogue=none,k=2,m=4,n=4");
  EXPECT_EQ(w->spec.Int("k"), 2);
  EXPECT_EQ(w->spec.Str("epilogue"), "none");
}

}  // namespace
}  // namespace lathe::ir

namespace lathe::ir {
namespace {

std::string Canon(const std::string& text) {
  absl::StatusOr<WorkloadSpec> s = ParseWorkloadSpec(text);
  return s.ok() ? s->ToString() : std::string(s.status().message());
}

TEST(WorkloadSpecModelTest, PerAxisStridesPadsAndEpiloguesHaveOneCanonicalForm) {
  // Old spellings keep their canonical form (and so their database keys).
  EXPECT_EQ(Canon("conv2d:n=1,c=8,h=8,w=8,k=8,r=3,s=3,stride=2x2,pad=1x1x1x1,dilation=1x1"),
            "conv2d:c=8,dilation=1,epilogue=none,groups=1,h=8,k=8,layout=nchw,n=1,pad=1,r=3,s=3,"
            "stride=2,w=8");
  EXPECT_EQ(Canon("conv2d:n=1,c=8,h=8,w=8,k=8,r=3,s=3,stride=2x1,pad=0x1x0x1,epilogue=bias_relu"),
            "conv2d:c=8,dilation=1,epilogue=bias_relu,groups=1,h=8,k=8,layout=nchw,n=1,pad=0x1,"
            "r=3,s=3,stride=2x1,w=8");
  EXPECT_EQ(Canon("conv2d:n=1,c=8,h=8,w=8,k=8,r=3,s=3,pad=0x1x1x1,epilogue=bias_clip0.0:6.00"),
            "conv2d:c=8,dilation=1,epilogue=bias_clip0:6,groups=1,h=8,k=8,layout=nchw,n=1,"
            "pad=0x1x1x1,r=3,s=3,stride=1,w=8");
  // Keys added later are left out while they hold their default.
  EXPECT_EQ(Canon("pool2d:n=1,c=8,h=8,w=8,r=2,s=2,count_include_pad=1"),
            "pool2d:c=8,h=8,kind=max,layout=nchw,n=1,pad=0,r=2,s=2,stride=1,w=8");
  EXPECT_EQ(Canon("matmul:m=2,n=3,k=4,transpose_b=0,transpose_a=1"),
            "matmul:epilogue=none,k=4,m=2,n=3,transpose_a=1");
  EXPECT_EQ(Canon("softmax:m=2,n=3,inner=1"), "softmax:m=2,n=3");
  EXPECT_EQ(Canon("matmul:m=2,n=3,k=4,epilogue=hsig0.200000003:0.5_mul0.1666666667"),
            "matmul:epilogue=hsig0.200000003:0.5_mul0.166666672,k=4,m=2,n=3");
  // resize's layout (added later) is left out while plain.
  const std::string resize = "resize:c=8,coord=asymmetric,h=4,mode=nearest,n=1,nearest=floor,";
  EXPECT_EQ(Canon(resize + "oh=8,ow=8,w=4,layout=nchw"), resize + "oh=8,ow=8,w=4");
  EXPECT_EQ(Canon(resize + "oh=8,ow=8,w=4,layout=nchw4c"),
            "resize:c=8,coord=asymmetric,h=4,layout=nchw4c,mode=nearest,n=1,nearest=floor,oh=8,"
            "ow=8,w=4");
  // The per-channel affine after an activation: scale and shift tensors.
  absl::StatusOr<Workload> w =
      MakeWorkload("conv2d:n=1,c=4,h=3,w=3,k=8,r=1,s=1,epilogue=bias_hswish_scale_shift");
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->args.size(), 6u);
  EXPECT_EQ(w->args[4]->name, "shift");
  EXPECT_EQ(w->args[4]->shape, std::vector<int64_t>{8});
}

TEST(WorkloadSpecModelTest, BadModelSpecsAreNamed) {
  EXPECT_THAT(Canon("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,pad=1x2x3"),
              HasSubstr("key 'pad' of conv2d must be a non-negative integer, got '1x2x3'"));
  EXPECT_THAT(Canon("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,epilogue=res_res"),
              HasSubstr("has the tensor step 'res' twice"));
  EXPECT_THAT(Canon("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,epilogue=clip1"),
              HasSubstr("clip takes 2 constants"));
  EXPECT_THAT(Canon("conv2d:n=1,c=1,h=3,w=3,k=1,r=1,s=1,epilogue=shift_relu_shift"),
              HasSubstr("has the tensor step 'shift' twice"));
  EXPECT_THAT(Canon("resize:n=1,c=6,h=2,w=2,oh=4,ow=4,layout=nchw4c"),
              HasSubstr("c=6 is not a multiple of the block 4"));
  EXPECT_THAT(Canon("ewise:a=2x3,b=4,binary=add"), HasSubstr("do not broadcast"));
  EXPECT_THAT(Canon("ewise:a=2x3,b=3"), HasSubstr("'b' and 'binary' go together"));
  EXPECT_THAT(Canon("ewise:a=2x3,binary=add"), HasSubstr("'b' and 'binary' go together"));
  // Upsampled b: one factor >= 1 per dimension of b, b * factors broadcasting against a.
  EXPECT_THAT(Canon("ewise:a=4x6,b=2x3,binary=add,upsample=2x2"),
              HasSubstr("ewise:a=4x6,b=2x3,binary=add,epilogue=none,upsample=2x2"));
  EXPECT_THAT(Canon("ewise:a=4x6,upsample=2x2"), HasSubstr("'upsample' needs 'b'"));
  EXPECT_THAT(Canon("ewise:a=4x6,b=2x3,binary=add,upsample=2"), HasSubstr("one factor per"));
  EXPECT_THAT(Canon("ewise:a=4x6,b=2x3,binary=add,upsample=2x0"),
              HasSubstr("key 'upsample' of ewise must be a shape"));
  EXPECT_THAT(Canon("ewise:a=4x6,b=2x3,binary=add,upsample=3x2"), HasSubstr("do not broadcast"));
  // A coarser residual (resup): integer factors, ewise outputs of rank 4 or more only.
  EXPECT_THAT(Canon("ewise:a=1x2x4x6,b=1x2x1x1,binary=mul,epilogue=res_resup2:3"),
              HasSubstr("epilogue=res_resup2:3"));
  EXPECT_THAT(Canon("ewise:a=1x2x4x6,epilogue=resup2"), HasSubstr("resup takes 2 constants"));
  EXPECT_THAT(Canon("ewise:a=1x2x4x6,epilogue=resup2:0.5"),
              HasSubstr("resup's factors are integers from 1 to 65536"));
  EXPECT_THAT(Canon("ewise:a=4x6,epilogue=resup2:2"), HasSubstr("the output needs 4 or more"));
  EXPECT_THAT(Canon("conv2d:n=1,c=1,h=4,w=4,k=1,r=1,s=1,epilogue=resup2:2"),
              HasSubstr("resup is read by ewise kernels only, not conv2d"));
  EXPECT_THAT(Canon("transpose:shape=2x3,perm=0x0"), HasSubstr("is not a permutation"));
  EXPECT_THAT(Canon("slice:shape=4,begin=2,size=3"), HasSubstr("reads past the extent 4"));
  EXPECT_THAT(Canon("concat:axis=1,inputs=2x3+3x3"), HasSubstr("differ outside the axis 1"));
  EXPECT_THAT(Canon("reduce:shape=2x3,axes=2"), HasSubstr("must be increasing dimensions"));
}

}  // namespace
}  // namespace lathe::ir
