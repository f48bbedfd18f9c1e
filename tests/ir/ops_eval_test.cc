// Checks the compute definitions of ir/ops.cc against the naive reference, independently of
// the compiler: a tiny interpreter evaluates every compute tensor element by element from its
// definition (Expr trees, reduce axes) and the output is compared with ComputeReference.
// Reads outside a tensor's shape are test failures, so every body must guard its accesses.
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "ir/check.h"
#include "ir/ops.h"
#include "ir/reference.h"
#include "ir/workload.h"

namespace lathe::ir {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Counts an error of the interpreter and reports the first few of each tensor through gtest (a
// bad index expression would otherwise report every element).
#define LATHE_INTERP_FAIL(stream)                       \
  do {                                                  \
    ++errors_;                                          \
    if (++tensor_errors_ <= 3) ADD_FAILURE() << stream; \
  } while (0)

// Evaluates compute tensors in double precision. Integers and booleans are carried as exact
// doubles (the test shapes are tiny).
class Interpreter {
 public:
  void SetInput(const Tensor& t, const std::vector<float>& data) {
    values_[t->name] = {t, std::vector<double>(data.begin(), data.end())};
  }

  // Evaluates `t` from already evaluated tensors; reports failures through gtest.
  void EvaluateTensor(const Tensor& t) {
    for (size_t d = 0; d < t->axes.size(); ++d) {
      EXPECT_EQ(t->axes[d]->extent, t->shape[d]) << t->name << " axis " << d;
      EXPECT_FALSE(t->axes[d]->reduce) << t->name << " spatial axis " << d << " marked reduce";
    }
    ASSERT_EQ(t->axes.size(), t->shape.size()) << t->name;
    for (const IterVar& r : t->reduce_axes()) {
      EXPECT_TRUE(r->reduce) << t->name << " reduce axis not marked reduce";
    }
    int64_t total = 1;
    for (int64_t d : t->shape) total *= d;
    std::vector<double> out(total);
    std::vector<int64_t> idx(t->shape.size(), 0);
    current_ = t->name;
    tensor_errors_ = 0;
    for (int64_t flat = 0; flat < total; ++flat) {
      int64_t rem = flat;
      for (size_t d = t->shape.size(); d-- > 0;) {
        idx[d] = rem % t->shape[d];
        rem /= t->shape[d];
        vars_[t->axes[d]->var.get()] = idx[d];
      }
      out[flat] = Eval(t->body);
    }
    values_[t->name] = {t, std::move(out)};
  }

  int errors() const { return errors_; }

  const std::vector<double>* Values(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second.second;
  }

 private:
  double Eval(const Expr& e) {
    const std::vector<Expr>& ops = e->operands;
    const bool is_int = !ops.empty() && ops[0]->type.is_int();
    switch (e->kind) {
      case ExprKind::kIntImm:
        return static_cast<double>(e->int_value);
      case ExprKind::kFloatImm:
        return e->float_value;
      case ExprKind::kVar: {
        auto it = vars_.find(e.get());
        if (it == vars_.end()) {
          LATHE_INTERP_FAIL(current_ << ": unbound variable " << e->name);
          return std::nan("");
        }
        return static_cast<double>(it->second);
      }
      case ExprKind::kAdd:
        return Eval(ops[0]) + Eval(ops[1]);
      case ExprKind::kSub:
        return Eval(ops[0]) - Eval(ops[1]);
      case ExprKind::kMul:
        return Eval(ops[0]) * Eval(ops[1]);
      case ExprKind::kDiv: {
        const double a = Eval(ops[0]), b = Eval(ops[1]);
        if (!is_int) return a / b;
        if (b == 0) {
          LATHE_INTERP_FAIL(current_ << ": integer division by zero");
          return 0;
        }
        return static_cast<double>(FloorDiv(static_cast<int64_t>(a), static_cast<int64_t>(b)));
      }
      case ExprKind::kMod: {
        const int64_t a = static_cast<int64_t>(Eval(ops[0]));
        const int64_t b = static_cast<int64_t>(Eval(ops[1]));
        if (b == 0) {
          LATHE_INTERP_FAIL(current_ << ": modulo by zero");
          return 0;
        }
        return static_cast<double>(a - FloorDiv(a, b) * b);
      }
      case ExprKind::kMin:
        return std::min(Eval(ops[0]), Eval(ops[1]));
      case ExprKind::kMax:
        return std::max(Eval(ops[0]), Eval(ops[1]));
      case ExprKind::kEQ:
        return Eval(ops[0]) == Eval(ops[1]);
      case ExprKind::kNE:
        return Eval(ops[0]) != Eval(ops[1]);
      case ExprKind::kLT:
        return Eval(ops[0]) < Eval(ops[1]);
      case ExprKind::kLE:
        return Eval(ops[0]) <= Eval(ops[1]);
      case ExprKind::kGT:
        return Eval(ops[0]) > Eval(ops[1]);
      case ExprKind::kGE:
        return Eval(ops[0]) >= Eval(ops[1]);
      case ExprKind::kAnd:
        return Eval(ops[0]) != 0 && Eval(ops[1]) != 0;
      case ExprKind::kOr:
        return Eval(ops[0]) != 0 || Eval(ops[1]) != 0;
      case ExprKind::kNot:
        return Eval(ops[0]) == 0;
      case ExprKind::kSelect:  // only the chosen side is evaluated
        return Eval(ops[0]) != 0 ? Eval(ops[1]) : Eval(ops[2]);
      case ExprKind::kCast: {
        const double v = Eval(ops[0]);
        if (e->type.is_int()) return std::floor(v);
        if (e->type.is_bool()) return v != 0;
        return static_cast<float>(v);
      }
      case ExprKind::kCall: {
        const double v = Eval(ops[0]);
        if (e->name == "exp") return std::exp(v);
        if (e->name == "sqrt") return std::sqrt(v);
        if (e->name == "log") return std::log(v);
        if (e->name == "tanh") return std::tanh(v);
        if (e->name == "abs") return std::fabs(v);
        LATHE_INTERP_FAIL(current_ << ": unknown function " << e->name);
        return std::nan("");
      }
      case ExprKind::kTensorRead:
        return ReadTensor(e);
      case ExprKind::kReduce:
        return EvalReduce(e);
      default:
        LATHE_INTERP_FAIL(current_ << ": unexpected " << ExprKindName(e->kind)
                                   << " in a compute definition");
        return std::nan("");
    }
  }

  double ReadTensor(const Expr& e) {
    auto it = values_.find(e->name);
    if (it == values_.end()) {
      LATHE_INTERP_FAIL(current_ << " reads " << e->name << " before it is computed");
      return std::nan("");
    }
    const Tensor& t = it->second.first;
    if (e->operands.size() != t->shape.size()) {
      LATHE_INTERP_FAIL(current_ << " reads " << e->name << " with " << e->operands.size()
                                 << " indices, rank " << t->shape.size());
      return std::nan("");
    }
    std::vector<int64_t> idx;
    int64_t flat = 0;
    bool in_bounds = true;
    for (size_t d = 0; d < t->shape.size(); ++d) {
      const int64_t i = static_cast<int64_t>(Eval(e->operands[d]));
      idx.push_back(i);
      in_bounds = in_bounds && i >= 0 && i < t->shape[d];
      flat = flat * t->shape[d] + i;
    }
    if (!in_bounds) {
      LATHE_INTERP_FAIL(current_ << " reads " << e->name << "[" << absl::StrJoin(idx, ",")
                                 << "] outside its shape [" << absl::StrJoin(t->shape, ",") << "]");
      return std::nan("");
    }
    return it->second.second[flat];
  }

  double EvalReduce(const Expr& e) {
    const Expr& source = e->operands[0];
    const Expr condition = e->operands.size() > 1 ? e->operands[1] : nullptr;
    double acc = e->reduce_op == ReduceOp::kSum   ? 0.0
                 : e->reduce_op == ReduceOp::kMax ? -std::numeric_limits<double>::infinity()
                                                  : std::numeric_limits<double>::infinity();
    const std::vector<IterVar>& axes = e->reduce_axes;
    std::vector<int64_t> idx(axes.size(), 0);
    int64_t total = 1;
    for (const IterVar& a : axes) total *= a->extent;
    for (int64_t flat = 0; flat < total; ++flat) {
      int64_t rem = flat;
      for (size_t d = axes.size(); d-- > 0;) {
        vars_[axes[d]->var.get()] = rem % axes[d]->extent;
        rem /= axes[d]->extent;
      }
      if (condition && Eval(condition) == 0) continue;
      const double v = Eval(source);
      switch (e->reduce_op) {
        case ReduceOp::kSum:
          acc += v;
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
      }
    }
    for (const IterVar& a : axes) vars_.erase(a->var.get());
    return acc;
  }

  std::map<std::string, std::pair<Tensor, std::vector<double>>> values_;
  std::unordered_map<const ExprNode*, int64_t> vars_;
  std::string current_;
  int errors_ = 0;
  int tensor_errors_ = 0;
};

// Evaluates the workload's definition and compares it with the reference.
void CheckAgainstReference(const std::string& spec) {
  SCOPED_TRACE(spec);
  absl::StatusOr<Workload> w = MakeWorkload(spec);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<std::vector<float>> args = AllocateArgs(*w);
  FillRandomInputs(args, 1234);
  ASSERT_TRUE(ComputeReference(*w, args).ok());

  Interpreter interp;
  for (size_t i = 0; i + 1 < w->args.size(); ++i) {
    ASSERT_TRUE(w->args[i]->is_placeholder()) << w->args[i]->name;
    interp.SetInput(w->args[i], args[i]);
  }
  for (const Tensor& t : w->tensors) {
    if (t->is_placeholder()) {
      ASSERT_NE(interp.Values(t->name), nullptr) << "placeholder " << t->name << " is no argument";
      continue;
    }
    interp.EvaluateTensor(t);
    if (interp.errors() > 0) return;
  }
  const std::vector<double>* out = interp.Values(w->output()->name);
  ASSERT_NE(out, nullptr);
  std::vector<float> got(out->begin(), out->end());
  absl::Status s = CheckOutput(got, args.back(), w->output()->shape, 1e-5);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(OpsEvalTest, Matmul) {
  for (const char* e : {"none", "bias", "relu", "bias_relu"}) {
    CheckAgainstReference(absl::StrCat("matmul:m=5,n=7,k=3,epilogue=", e));
    CheckAgainstReference(absl::StrCat("batch_matmul:b=2,m=3,n=4,k=5,epilogue=", e));
  }
  CheckAgainstReference("matmul:m=1,n=1,k=1");
}

TEST(OpsEvalTest, Conv2d) {
  for (const char* layout : {"nchw", "nhwc"}) {
    for (const char* shape : {
             "n=1,c=3,h=5,w=6,k=4,r=3,s=3",
             "n=2,c=3,h=5,w=6,k=4,r=3,s=3,pad=1",
             "n=1,c=2,h=7,w=6,k=3,r=3,s=2,pad=2,stride=2",
             "n=1,c=2,h=7,w=7,k=2,r=2,s=3,pad=1,stride=2,dilation=2",
             "n=1,c=4,h=5,w=5,k=6,r=3,s=3,pad=1,groups=2",
             "n=1,c=4,h=5,w=5,k=8,r=3,s=3,pad=1,stride=2,groups=4",  // depthwise, multiplier 2
             "n=1,c=1,h=1,w=1,k=1,r=1,s=1",
         }) {
      for (const char* e : {"none", "bias_relu"}) {
        CheckAgainstReference(absl::StrCat("conv2d:", shape, ",layout=", layout, ",epilogue=", e));
      }
    }
    CheckAgainstReference(
        absl::StrCat("conv2d:n=1,c=2,h=4,w=4,k=2,r=3,s=3,pad=1,layout=", layout, ",epilogue=bias"));
    CheckAgainstReference(
        absl::StrCat("conv2d:n=1,c=2,h=4,w=4,k=2,r=3,s=3,pad=1,layout=", layout, ",epilogue=relu"));
  }
}

TEST(OpsEvalTest, Pool2d) {
  for (const char* layout : {"nchw", "nhwc"}) {
    for (const char* kind : {"max", "avg"}) {
      for (const char* shape :
           {"n=1,c=2,h=5,w=6,r=2,s=2", "n=2,c=3,h=5,w=6,r=3,s=3,pad=1",
            "n=1,c=2,h=7,w=6,r=3,s=2,pad=1,stride=2", "n=1,c=1,h=4,w=4,r=4,s=4,pad=3"}) {
        CheckAgainstReference(absl::StrCat("pool2d:", shape, ",kind=", kind, ",layout=", layout));
      }
    }
  }
}

TEST(OpsEvalTest, SoftmaxAndLayerNorm) {
  CheckAgainstReference("softmax:m=3,n=7");
  CheckAgainstReference("softmax:m=1,n=1");
  CheckAgainstReference("layer_norm:m=3,n=8");
  CheckAgainstReference("layer_norm:m=2,n=5,eps=0.1");
}

// What real models bring: per-axis strides, asymmetric pads, expression epilogues with a
// residual input, transposed and broadcast matmuls, and the elementwise and data-movement ops.
TEST(OpsEvalTest, ModelOps) {
  for (const char* spec : {
           "conv2d:n=1,c=2,h=7,w=6,k=3,r=3,s=3,stride=2x1,pad=1,epilogue=bias_hswish",
           "conv2d:n=1,c=2,h=5,w=8,k=2,r=1,s=3,stride=1x2,pad=0x1x0x1,epilogue=bias_clip0:6_res",
           "conv2d:n=1,c=4,h=6,w=5,k=4,r=3,s=3,pad=1x1x0x2,groups=4,dilation=2x1,"
           "epilogue=scale_bias_hsig0.2:0.5",
           "conv2d:n=1,c=3,h=4,w=4,k=2,r=1,s=1,epilogue=bias_gelu",
           "conv2d:n=1,c=4,h=5,w=6,k=6,r=3,s=2,stride=2x1,pad=1,layout=nchw2c,kblock=3,"
           "epilogue=bias_res",
           "conv2d:n=1,c=4,h=6,w=5,k=4,r=3,s=3,pad=1,groups=4,dilation=2,layout=nchw2c",
           "pool2d:n=1,c=4,h=7,w=6,r=3,s=2,stride=2,pad=1,kind=avg,layout=nchw2c",
           "conv2d:n=1,c=3,h=4,w=4,k=2,r=1,s=1,epilogue=swish_mul0.5_add-1_div3",
           "conv2d_transpose:n=1,c=3,h=3,w=4,k=2,r=2,s=2,stride=2,epilogue=bias_sigmoid",
           "conv2d_transpose:n=1,c=4,h=3,w=3,k=4,r=3,s=3,stride=2,pad=1,output_padding=1,groups=2",
           "conv2d_transpose:n=1,c=4,h=3,w=2,k=6,r=2,s=2,stride=2,groups=2,epilogue=bias",
           "conv2d_transpose:n=1,c=2,h=3,w=3,k=2,r=2,s=2,stride=1",
           "matmul:m=5,n=7,k=3,transpose_b=1,epilogue=bias_res",
           "matmul:m=5,n=7,k=3,transpose_a=1,epilogue=mul0.125",
           "batch_matmul:b=3,m=4,n=5,k=6,transpose_b=1,bcast=b",
           "batch_matmul:b=2,m=4,n=5,k=6,bcast=a,epilogue=tanh",
           "pool2d:n=1,c=2,h=7,w=6,r=3,s=2,stride=3x2,pad=1x0x0x1,kind=avg,count_include_pad=0",
           "pool2d:n=1,c=2,h=7,w=6,r=2,s=2,stride=2,pad=0x0x1x1,kind=max",
           "pool2d:n=1,c=3,h=5,w=4,r=5,s=4,kind=avg",
           "softmax:m=2,n=5,inner=3",
           "ewise:a=2x3x4x5,b=1x3x1x1,binary=mul",
           "ewise:a=3x1,b=4,binary=sub,epilogue=abs_sqrt",
           "ewise:a=2x3x4,epilogue=scale_bias_relu",
           "ewise:a=2x3x4,b=2x3x4,binary=add,epilogue=erf_res",
           "ewise:a=1x2x4x6,b=1x2x2x3,binary=sub,upsample=1x1x2x2",
           "conv2d:n=1,c=3,h=7,w=6,k=8,r=3,s=3,pad=1,stride=2,kblock=4,epilogue=bias_relu",
           "ewise:a=1x3x6x4x2,b=1x3x2x1x2,binary=mul,upsample=1x1x3x4x1,epilogue=relu",
           "ewise:a=1x3x6x4x2,b=1x3x1x1x2,binary=mul,epilogue=res_resup2:2_relu",
           "ewise:a=1x2x5x7,epilogue=resup3:2",
           "transpose:shape=2x3x4,perm=2x0x1",
           "slice:shape=4x7,begin=1x2,size=2x3,step=2x2",
           "concat:axis=1,inputs=2x3x2+2x1x2+2x2x2",
           "resize:n=1,c=2,h=3,w=4,oh=6,ow=8,mode=nearest,coord=asymmetric,nearest=floor",
           "resize:n=1,c=1,h=3,w=4,oh=5,ow=7,mode=nearest",
           "resize:n=1,c=1,h=3,w=4,oh=7,ow=9,mode=linear,coord=align_corners",
           "resize:n=1,c=2,h=4,w=3,oh=8,ow=5,mode=linear",
           "resize:n=1,c=4,h=3,w=4,oh=6,ow=8,mode=nearest,coord=asymmetric,nearest=floor,"
           "layout=nchw2c",
           "resize:n=2,c=6,h=3,w=4,oh=5,ow=7,mode=linear,layout=nchw3c",
           "conv2d:n=1,c=3,h=4,w=4,k=2,r=1,s=1,epilogue=bias_hswish_scale_shift",
           "conv2d:n=1,c=4,h=5,w=4,k=4,r=3,s=3,pad=1,groups=4,layout=nchw2c,"
           "epilogue=bias_relu_scale_shift",
           "ewise:a=2x3x4,epilogue=relu_scale_shift",
           "reduce:shape=2x3x4,axes=2,kind=mean",
           "reduce:shape=2x3x4,axes=0x2,kind=max",
       }) {
    CheckAgainstReference(spec);
  }
}

TEST(OpsEvalTest, InterpreterCatchesOutOfBoundsReads) {
  // The harness itself must flag an unguarded read, or the tests above prove nothing.
  Tensor x = Placeholder("X", {4});
  Tensor bad = Compute("shifted", {4},
                       [&](const std::vector<Expr>& i) { return Read(x, {Add(i[0], IntImm(1))}); },
                       "injective", {"i"});
  Interpreter interp;
  interp.SetInput(x, {1, 2, 3, 4});
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    interp.EvaluateTensor(bad);
  }
  ASSERT_EQ(failures.size(), 1);
  EXPECT_NE(std::string(failures.GetTestPartResult(0).message()).find("outside its shape"),
            std::string::npos);
}

}  // namespace
}  // namespace lathe::ir
