#include "ir/op_registry.h"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "ir/ops.h"
#include "ir/reference.h"
#include "ir/workload.h"

namespace lathe::ir {
namespace {

using ::testing::HasSubstr;

double Product(const std::vector<int64_t>& shape) {
  double n = 1;
  for (int64_t d : shape) n *= static_cast<double>(d);
  return n;
}

// The FLOP count of a built workload as the builders counted it before the table did, from
// the shapes of its tensors: an independent check of the table's formulas.
double FlopsFromTensors(const Workload& w) {
  const WorkloadSpec& s = w.spec;
  const double out = Product(w.output()->shape);
  const double in = Product(w.args[0]->shape);
  auto epi = [&] { return ParseEpilogueExpr(s.Str("epilogue"))->FlopsPerElement(); };
  if (IsOp(s.op, OpKind::kMatmul) || IsOp(s.op, OpKind::kBatchMatmul)) {
    return 2.0 * out * static_cast<double>(s.Int("k")) + out * epi();
  }
  if (IsOp(s.op, OpKind::kConv2d)) {
    const int64_t cpg = s.Int("c") / s.Int("groups");
    return 2.0 * out * static_cast<double>(cpg * s.Int("r") * s.Int("s")) + out * epi();
  }
  if (IsOp(s.op, OpKind::kConv2dTranspose)) {
    return 2.0 * in * static_cast<double>(s.Int("k") / s.Int("groups") * s.Int("r") * s.Int("s")) +
           out * epi();
  }
  if (IsOp(s.op, OpKind::kPool2d)) {
    return out * static_cast<double>(s.Int("r") * s.Int("s")) * (s.Str("kind") == "max" ? 1 : 2);
  }
  if (IsOp(s.op, OpKind::kSoftmax)) return 7.0 * in;
  if (IsOp(s.op, OpKind::kLayerNorm)) return 12.0 * in;
  if (IsOp(s.op, OpKind::kEwise)) return out * ((s.params.count("b") ? 1.0 : 0.0) + epi());
  if (IsOp(s.op, OpKind::kResize)) return s.Str("mode") == "linear" ? 9.0 * out : 0.0;
  if (IsOp(s.op, OpKind::kReduce)) return in * (s.Str("kind") == "mean" ? 2.0 : 1.0);
  if (IsOp(s.op, OpKind::kWinogradIn)) return 2.0 * out * static_cast<double>(s.Int("m") + 2);
  if (IsOp(s.op, OpKind::kWinogradOut)) {
    const double t = static_cast<double>(s.Int("m") + 2);
    return 2.0 * out * t * t / static_cast<double>(s.Int("m")) + out * epi();
  }
  if (IsOp(s.op, OpKind::kSepConv2d)) {
    // The depthwise map (the 1x1's input: channels c at the output's extents), then the 1x1.
    const double mid = out / static_cast<double>(s.Int("k")) * static_cast<double>(s.Int("c"));
    const double dw_epi = ParseEpilogueExpr(s.Str("dw_epilogue"))->FlopsPerElement();
    return 2.0 * mid * static_cast<double>(s.Int("r") * s.Int("s")) + mid * dw_epi +
           2.0 * out * static_cast<double>(s.Int("c")) + out * epi();
  }
  return 0.0;  // transpose, slice, concat: data movement
}

TEST(OpRegistryTest, RowsAreInOpKindOrderWithUniqueNames) {
  std::set<std::string> names;
  for (size_t i = 0; i < OpTable().size(); ++i) {
    const OpInfo& op = OpTable()[i];
    EXPECT_EQ(static_cast<size_t>(op.kind), i) << op.name;
    EXPECT_EQ(&GetOp(op.kind), &op);
    EXPECT_EQ(FindOp(op.name), &op);
    EXPECT_TRUE(IsOp(op.name, op.kind));
    EXPECT_TRUE(names.insert(op.name).second) << "duplicate op " << op.name;
    std::set<std::string> keys;
    for (const KeyDef& k : op.keys) {
      EXPECT_TRUE(keys.insert(k.name).second) << op.name << " lists key " << k.name << " twice";
      EXPECT_NE(std::string(k.name), "dtype") << "dtype is every op's key, not a row's";
      EXPECT_EQ(op.FindKey(k.name), &k);
      EXPECT_EQ(k.kind == KeyKind::kChoice, !k.choices.empty()) << op.name << "." << k.name;
      EXPECT_FALSE(k.optional && k.default_value != nullptr) << op.name << "." << k.name;
      EXPECT_FALSE(k.omit_default && k.default_value == nullptr) << op.name << "." << k.name;
    }
    EXPECT_TRUE(op.check_shapes && op.flops && op.build && op.reference) << op.name;
  }
  EXPECT_EQ(names.size(), 16u);
  EXPECT_EQ(FindOp("warp"), nullptr);
  EXPECT_TRUE(OpTakesKey("conv2d", "kblock"));
  EXPECT_FALSE(OpTakesKey("conv2d", "bpanel"));
  EXPECT_FALSE(OpTakesKey("warp", "m"));
}

// Every op's example: spec -> parse -> canonical -> parse gives the same canonical form, the
// workload builds, its FLOPs are the table's, and its reference runs.
TEST(OpRegistryTest, EveryOpRoundTripsSpecParseCanonical) {
  for (const OpInfo& op : OpTable()) {
    SCOPED_TRACE(op.example);
    absl::StatusOr<WorkloadSpec> spec = ParseWorkloadSpec(op.example);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->op, op.name);
    const std::string canonical = spec->ToString();
    absl::StatusOr<WorkloadSpec> again = ParseWorkloadSpec(canonical);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->ToString(), canonical);
    // Every key with a default is in the canonical form unless it is left out at its default.
    for (const KeyDef& k : op.keys) {
      const bool present = spec->params.count(k.name) != 0;
      const bool always = (k.default_value == nullptr && !k.optional) ||
                          (k.default_value != nullptr && !k.omit_default);
      EXPECT_TRUE(present || !always) << k.name;
    }
    absl::StatusOr<Workload> w = MakeWorkload(canonical);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->canonical, canonical);
    absl::StatusOr<double> flops = WorkloadFlops(w->spec);
    ASSERT_TRUE(flops.ok()) << flops.status();
    EXPECT_DOUBLE_EQ(w->flops, *flops);
    EXPECT_DOUBLE_EQ(w->flops, FlopsFromTensors(*w));
    std::vector<std::vector<float>> args;
    for (const Tensor& t : w->args) {
      args.emplace_back(static_cast<size_t>(Product(t->shape)), 0.5f);
    }
    EXPECT_TRUE(ComputeReference(*w, args).ok());
  }
}

TEST(OpRegistryTest, RequiredKeysAreRequiredAndDefaultsFillIn) {
  for (const OpInfo& op : OpTable()) {
    absl::StatusOr<WorkloadSpec> spec = ParseWorkloadSpec(op.example);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const KeyDef& k : op.keys) {
      if (!spec->params.count(k.name)) continue;
      WorkloadSpec without = *spec;
      without.params.erase(k.name);
      SCOPED_TRACE(without.ToString());
      absl::StatusOr<WorkloadSpec> parsed = ParseWorkloadSpec(without.ToString());
      if (k.default_value == nullptr && !k.optional) {
        ASSERT_FALSE(parsed.ok());
        EXPECT_THAT(parsed.status().message(),
                    HasSubstr(std::string("missing key '") + k.name + "' for " + op.name));
      } else if (k.default_value != nullptr && parsed.ok() && !k.omit_default) {
        EXPECT_EQ(parsed->params.at(k.name), k.default_value);
      }
    }
  }
}

TEST(OpRegistryTest, TableFlopsMatchTheTensorsOfMoreShapes) {
  for (const char* text : {
           "matmul:m=64,n=64,k=32,bpanel=32,epilogue=bias_relu",
           "matmul:m=5,n=48,k=7,transpose_b=1",
           "batch_matmul:b=3,m=4,n=8,k=16,bcast=b,epilogue=relu",
           "batch_matmul:b=36,m=4,n=32,k=16,bpanel=16",
           "conv2d:n=1,c=16,h=8,w=8,k=32,r=3,s=3,pad=1,layout=nchw8c,kblock=16",
           "conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,pad=1,groups=16,layout=nchw8c",
           "conv2d:n=1,c=32,h=8,w=8,k=16,r=3,s=3,pad=1,groups=2,layout=nchw8c,epilogue=bias",
           "conv2d:n=1,c=24,h=8,w=8,k=24,r=3,s=3,pad=1,groups=3,layout=nchw24c,kblock=8",
           "conv2d:n=1,c=4,h=6,w=6,k=8,r=3,s=3,pad=1,groups=4,layout=nhwc,epilogue=bias",
           "conv2d_transpose:n=1,c=4,h=5,w=5,k=6,r=3,s=3,stride=2,pad=1,groups=2,epilogue=relu",
           "pool2d:n=1,c=16,h=8,w=8,r=2,s=2,stride=2,layout=nchw8c",
           "pool2d:n=1,c=2,h=8,w=8,r=3,s=3,pad=1,kind=avg,count_include_pad=0",
           "softmax:m=4,n=8,inner=3",
           "ewise:a=2x3x4,epilogue=bias_hswish",
           "resize:n=1,c=8,h=4,w=4,oh=8,ow=8,layout=nchw4c,mode=linear",
           "reduce:shape=2x3x4,axes=1x2",
           "winograd_in:n=1,c=16,h=16,w=16,layout=nchw8c",
           "winograd_out:n=1,k=16,oh=16,ow=16,m=4,layout=nchw8c,epilogue=bias_relu",
       }) {
    SCOPED_TRACE(text);
    absl::StatusOr<Workload> w = MakeWorkload(text);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_GE(w->flops, 0);
    EXPECT_DOUBLE_EQ(w->flops, FlopsFromTensors(*w));
    EXPECT_DOUBLE_EQ(*WorkloadFlops(w->spec), w->flops);
  }
  EXPECT_DOUBLE_EQ(*WorkloadFlops(*ParseWorkloadSpec("matmul:m=4,n=8,k=2,epilogue=bias")),
                   2.0 * 4 * 8 * 2 + 4 * 8);
  WorkloadSpec unknown;
  unknown.op = "warp";
  EXPECT_THAT(WorkloadFlops(unknown).status().message(), HasSubstr("unknown op 'warp'"));
}

TEST(OpRegistryTest, KblockAtTheLayoutBlockIsLeftOut) {
  EXPECT_EQ(ParseWorkloadSpec("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw8c,kblock=8")
                ->params.count("kblock"),
            0u);
  EXPECT_EQ(ParseWorkloadSpec("conv2d:n=1,c=16,h=8,w=8,k=16,r=3,s=3,layout=nchw8c,kblock=16")
                ->params.at("kblock"),
            "16");
}

}  // namespace
}  // namespace lathe::ir
