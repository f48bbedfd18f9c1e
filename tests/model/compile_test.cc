// The compiler's passes on hand-built graphs (BatchNorm folding, epilogue fusion, activation
// patterns, layer norm recognition), checked by the kernels they produce and by running the
// fused and the unfused program on the same inputs; and import errors on real files.
#include "model/compile.h"

#include <fstream>

#include "codegen/cpu_kernel.h"
#include "gmock/gmock.h"
#include "graph_builder.h"
#include "gtest/gtest.h"
#include "model/executor.h"
#include "model/infer.h"
#include "model/onnx_import.h"
#include "model/plan.h"
#include "model/tasks.h"

namespace lathe::model {
namespace {

using ::testing::HasSubstr;

TEST(CompileTest, ConvBatchNormHardSwishResidualBecomeOneKernel) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 4, 6, 5});
  std::string r = b.Input("r", {1, 8, 6, 5});
  std::string y = b.Op("Conv", {x, b.Const("w", {8, 4, 3, 3}), b.Const("b", {8})},
                       {{"pads", Ints({1, 1, 1, 1})}});
  y = b.Op("BatchNormalization", {y, b.Const("g", {8}, 0.5, 1.5), b.Const("beta", {8}),
                                  b.Const("mean", {8}), b.Const("var", {8}, 0.5, 2)});
  // hard-swish spelled x * Clip(x + 3, 0, 6) / 6, as PP-OCR det does.
  std::string t = b.Op("Add", {y, b.Scalar("three", 3)});
  t = b.Op("Clip", {t, b.Scalar("zero", 0), b.Scalar("six", 6)});
  y = b.Op("Div", {b.Op("Mul", {y, t}), b.Scalar("six2", 6)});
  y = b.Op("Add", {y, r});
  Graph g = b.Finish(y);
  absl::StatusOr<Program> fused = CompileGraph(g);
  ASSERT_TRUE(fused.ok()) << fused.status();
  ASSERT_EQ(fused->kernels.size(), 1u);
  EXPECT_EQ(fused->kernels[0].spec,
            "conv2d:c=4,dilation=1,epilogue=bias_hswish_res,groups=1,h=6,k=8,layout=nchw,n=1,"
            "pad=1,r=3,s=3,stride=1,w=5");
  CompileOptions off;
  off.fuse = false;
  absl::StatusOr<Program> plain = CompileGraph(g, off);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(plain->kernels.size(), 4u);
  ExpectClose(RunProgram(*fused), RunProgram(*plain));
}

TEST(CompileTest, GeluSwishAndMatmulBiasFuse) {
  GraphBuilder b;
  std::string x = b.Input("x", {2, 7, 16});
  std::string y = b.Op("MatMul", {x, b.Const("w", {16, 12})});
  y = b.Op("Add", {y, b.Const("bias", {12})});
  // GELU as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt(2))).
  std::string e = b.Op("Erf", {b.Op("Div", {y, b.Scalar("s2", 1.41421356f)})});
  e = b.Op("Add", {e, b.Scalar("one", 1)});
  y = b.Op("Mul", {b.Op("Mul", {y, e}), b.Scalar("half", 0.5f)});
  std::string s = b.Op("Sigmoid", {y});
  y = b.Op("Mul", {y, s});  // swish
  Graph g = b.Finish(y);
  absl::StatusOr<Program> p = CompileGraph(g);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->kernels.size(), 1u);
  EXPECT_EQ(p->kernels[0].spec, "matmul:epilogue=bias_gelu_swish,k=16,m=14,n=12");
  CompileOptions off;
  off.fuse = false;
  ExpectClose(RunProgram(*p), RunProgram(*CompileGraph(g, off)));
  std::vector<Task> tasks = ExtractTasks(*p);
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].weight, 1);
  EXPECT_DOUBLE_EQ(tasks[0].flop_share, 1.0);
}

TEST(CompileTest, DecomposedLayerNormIsRecognised) {
  GraphBuilder b;
  std::string x = b.Input("x", {1, 5, 24});
  Attr last = Ints({-1});
  std::string m = b.Op("ReduceMean", {x}, {{"axes", last}});
  std::string d = b.Op("Sub", {x, m});
  std::string v = b.Op("ReduceMean", {b.Op("Pow", {d, b.Scalar("two", 2)})}, {{"axes", last}});
  std::string s = b.Op("Sqrt", {b.Op("Add", {v, b.Scalar("eps", 1e-5f)})});
  std::string y = b.Op("Div", {d, s});
  y = b.Op("Add", {b.Op("Mul", {y, b.Const("gamma", {24})}), b.Const("beta", {24})});
  Graph g = b.Finish(y);
  absl::StatusOr<Program> p = CompileGraph(g);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->kernels.size(), 1u);
  EXPECT_EQ(p->kernels[0].spec, "layer_norm:eps=9.99999975e-06,m=5,n=24");
  CompileOptions off;
  off.fuse = false;
  ExpectClose(RunProgram(*p), RunProgram(*CompileGraph(g, off)));
}

TEST(CompileTest, ReshapesAreViewsAndTheArenaIsReused) {
  GraphBuilder c;
  std::string x2 = c.Input("x", {1, 8, 4, 4});
  std::string a = c.Op("Relu", {x2});
  std::string t = c.Op("Transpose", {c.Op("Exp", {a})}, {{"perm", Ints({0, 1, 3, 2})}});
  std::string s = c.Op("Transpose", {c.Op("Neg", {t})}, {{"perm", Ints({0, 1, 3, 2})}});
  Graph g2 = c.Finish(s);
  absl::StatusOr<Program> p = CompileGraph(g2);
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<Plan> plan = MakePlan(*p);
  ASSERT_TRUE(plan.ok());
  // relu_exp fused, transpose, neg, transpose: four steps, and at most two intermediates
  // live at once (128 floats each, on a 64-byte line: 512 bytes of arena).
  EXPECT_EQ(plan->steps.size(), 4u);
  EXPECT_LE(plan->arena_bytes, 2 * 512);
  // Every arena value starts where the measurement child puts a kernel's buffers when it
  // times a record.
  int arena_refs = 0;
  for (const PlanStep& step : plan->steps) {
    for (const BufferRef& r : step.args) {
      if (r.kind != BufferRef::kArena) continue;
      ++arena_refs;
      EXPECT_EQ(r.offset % 64, static_cast<int64_t>(codegen::kTimedBufferOffset)) << r.offset;
    }
  }
  EXPECT_GT(arena_refs, 0);
}

TEST(ImportTest, BadFilesShapesAndOpsAreNamed) {
  const std::string node = "/usr/share/libonnx-testdata/data/node";
  std::ifstream probe(node + "/test_relu/model.onnx");
  if (!probe) GTEST_SKIP() << "libonnx-testdata is not installed";
  const std::string bad = ::testing::TempDir() + "/bad.onnx";
  std::ofstream(bad) << "this is not a protobuf";
  EXPECT_THAT(std::string(ImportOnnx(bad, {}).status().message()), HasSubstr("not an ONNX model"));
  EXPECT_THAT(std::string(ImportOnnx(bad + ".missing", {}).status().message()),
              HasSubstr("cannot read model file"));
  absl::StatusOr<Graph> wrong = ImportOnnx(node + "/test_relu/model.onnx", {{"x", {3, 4, 6}}});
  EXPECT_TRUE(absl::IsInvalidArgument(wrong.status()));
  EXPECT_THAT(std::string(wrong.status().message()),
              HasSubstr("does not match the model's [3,4,5]"));
  EXPECT_THAT(
      std::string(
          ImportOnnx(node + "/test_relu/model.onnx", {{"y", {3, 4, 5}}}).status().message()),
      HasSubstr("--input names 'y', which is not an input of the model"));
  absl::StatusOr<Graph> lsm = ImportOnnx(node + "/test_logsoftmax_axis_0/model.onnx", {});
  EXPECT_TRUE(absl::IsInvalidArgument(lsm.status()));
  EXPECT_EQ(lsm.status().message(),
            "node 'LogSoftmax_0' (LogSoftmax): operator LogSoftmax is not supported");
  EXPECT_FALSE(ParseInputShapes({"x=1x0x3"}).ok());
  EXPECT_FALSE(ParseInputShapes({"x"}).ok());
  EXPECT_EQ(ParseInputShapes({"x=1x3x224x224"})->at(0).shape,
            (std::vector<int64_t>{1, 3, 224, 224}));
}

}  // namespace
}  // namespace lathe::model
