#include "model/infer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/fold.h"
#include "model/validate.h"

namespace lathe::model {
namespace {

#define LATHE_TRY_ASSIGN(lhs, expr)              \
  do {                                           \
    auto _v = (expr);                            \
    if (!_v.ok()) return std::move(_v).status(); \
    lhs = *std::move(_v);                        \
  } while (0)

const std::set<std::string>& UnaryOps() {
  static const std::set<std::string>* ops = new std::set<std::string>{
      "Relu",      "Sigmoid", "Tanh",       "Exp",     "Log",         "Sqrt",
      "Abs",       "Neg",     "Reciprocal", "Erf",     "HardSigmoid", "HardSwish",
      "LeakyRelu", "Clip",    "Identity",   "Dropout", "Softmax",     "Floor",
      "Ceil",      "Elu",     "Softplus",   "Cast"};
  return *ops;
}

const std::set<std::string>& BinaryOps() {
  static const std::set<std::string>* ops =
      new std::set<std::string>{"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};
  return *ops;
}

}  // namespace

absl::Status CheckPerm(const Node& n, const std::vector<int64_t>& perm, size_t rank) {
  if (perm.size() != rank) {
    return Unsupported(
        n, absl::StrCat("perm names ", perm.size(), " axes for an input of rank ", rank));
  }
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[p]) {
      return Unsupported(
          n, absl::StrCat("perm ", ShapeText(perm), " is not a permutation of ", rank, " axes"));
    }
    seen[p] = true;
  }
  return absl::OkStatus();
}

bool IsInferredOp(const std::string& op) {
  static const std::set<std::string>* ops = new std::set<std::string>{"BatchNormalization",
                                                                      "LRN",
                                                                      "Conv",
                                                                      "ConvTranspose",
                                                                      "MaxPool",
                                                                      "AveragePool",
                                                                      "GlobalAveragePool",
                                                                      "GlobalMaxPool",
                                                                      "Gemm",
                                                                      "MatMul",
                                                                      "LayerNormalization",
                                                                      "ReduceMean",
                                                                      "ReduceSum",
                                                                      "ReduceMax",
                                                                      "ReduceMin",
                                                                      "Transpose",
                                                                      "Reshape",
                                                                      "Flatten",
                                                                      "Squeeze",
                                                                      "Unsqueeze",
                                                                      "Concat",
                                                                      "Slice",
                                                                      "Split",
                                                                      "Resize",
                                                                      "Upsample"};
  return UnaryOps().count(op) || BinaryOps().count(op) || ops->count(op);
}

absl::StatusOr<int64_t> NormAxis(const Node& n, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    return Unsupported(n, absl::StrCat("axis ", axis, " is outside a tensor of rank ", rank));
  }
  return a;
}

absl::StatusOr<std::vector<int64_t>> Broadcast(const Node& n, const std::vector<int64_t>& a,
                                               const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return Unsupported(
          n, absl::StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not broadcast"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

absl::StatusOr<std::optional<std::vector<int64_t>>> IntsInput(const Graph& g, const Node& n,
                                                              size_t i) {
  if (i >= n.inputs.size() || n.inputs[i].empty()) return std::optional<std::vector<int64_t>>();
  const ConstData* c = g.Const(n.inputs[i]);
  if (c == nullptr) {
    return Unsupported(n, absl::StrCat("input ", i, " ('", n.inputs[i],
                                       "') must be a constant (it is computed at run time)"));
  }
  std::vector<int64_t> v;
  for (int64_t k = 0; k < c->size(); ++k) v.push_back(c->IntAt(k));
  return std::optional<std::vector<int64_t>>(std::move(v));
}

absl::StatusOr<Window> WindowOf(const Node& n, const std::vector<int64_t>& in,
                                const std::vector<int64_t>& kernel) {
  Window w;
  std::vector<int64_t> strides = n.Ints("strides", {1, 1});
  std::vector<int64_t> dil = n.Ints("dilations", {1, 1});
  std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dil.size() != 2 || pads.size() != 4) {
    return Unsupported(n, "only 2-d windows are supported (strides, dilations, pads)");
  }
  if (in.size() != 2 || kernel.size() != 2) {
    return Unsupported(n, "only 2-d windows are supported (kernel)");
  }
  // ValidateNode has checked these for graphs from files; hand-built ones meet them here.
  for (int a = 0; a < 2; ++a) {
    if (strides[a] < 1 || dil[a] < 1 || kernel[a] < 1) {
      return Unsupported(n, "strides, dilations and kernel extents must be >= 1");
    }
  }
  for (int64_t p : pads) {
    if (p < 0) return Unsupported(n, "pads must be >= 0");
  }
  w.stride_h = strides[0], w.stride_w = strides[1];
  w.dil_h = dil[0], w.dil_w = dil[1];
  w.pad_t = pads[0], w.pad_l = pads[1], w.pad_b = pads[2], w.pad_r = pads[3];
  const std::string auto_pad = n.Str("auto_pad", "NOTSET");
  const bool transposed = n.op == "ConvTranspose";
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (transposed) return Unsupported(n, "auto_pad " + auto_pad + " is not supported");
    int64_t* lo[2] = {&w.pad_t, &w.pad_l};
    int64_t* hi[2] = {&w.pad_b, &w.pad_r};
    const int64_t stride[2] = {w.stride_h, w.stride_w}, d[2] = {w.dil_h, w.dil_w};
    for (int a = 0; a < 2; ++a) {
      const int64_t out = (in[a] + stride[a] - 1) / stride[a];
      const int64_t total =
          std::max<int64_t>(0, (out - 1) * stride[a] + d[a] * (kernel[a] - 1) + 1 - in[a]);
      *lo[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      *hi[a] = total - *lo[a];
    }
  } else if (auto_pad == "VALID") {
    w.pad_t = w.pad_l = w.pad_b = w.pad_r = 0;
  } else if (auto_pad != "NOTSET") {
    return Unsupported(n, "unknown auto_pad '" + auto_pad + "'");
  }
  if (n.Int("ceil_mode", 0) != 0) {
    // The extra bottom/right padding that makes floor division give the ceiling.
    int64_t* hi[2] = {&w.pad_b, &w.pad_r};
    const int64_t lo[2] = {w.pad_t, w.pad_l}, stride[2] = {w.stride_h, w.stride_w};
    for (int a = 0; a < 2; ++a) {
      const int64_t span = in[a] + lo[a] + *hi[a] - kernel[a];
      int64_t out = (span + stride[a] - 1) / stride[a] + 1;
      // The last window must start inside the input or the left padding (ONNX, PyTorch).
      if ((out - 1) * stride[a] >= in[a] + lo[a]) --out;
      *hi[a] += std::max<int64_t>(0, (out - 1) * stride[a] + kernel[a] - (in[a] + lo[a] + *hi[a]));
    }
  }
  return w;
}

absl::Status InferNode(Graph& g, Node& n, std::vector<Node>* kept_nodes);

absl::Status InferAndFold(Graph& g) {
  if (absl::Status s = ValidateNodes(g); !s.ok()) return s;
  int64_t model_constants = 0;
  for (const auto& [name, v] : g.values) {
    if (v.constant) model_constants += v.constant->size();
  }
  // How many elements folding may still create (see kFoldBudget).
  int64_t budget = kFoldBudget + 2 * model_constants;
  std::vector<Node> kept;
  for (Node& n : g.nodes) {
    for (const std::string& o : n.outputs) {
      // An output name that is already a value (an input, an initializer, an earlier output)
      // would let this node change what earlier nodes were inferred against.
      if (!o.empty() && g.Find(o) != nullptr) {
        return Unsupported(n, "output '" + o + "' is already defined earlier in the graph");
      }
    }
    if (absl::Status s = InferNode(g, n, &kept); !s.ok()) return s;
    for (const std::string& o : n.outputs) {
      const Value* v = o.empty() ? nullptr : g.Find(o);
      if (v == nullptr) continue;
      absl::StatusOr<int64_t> count = CheckedNumElements(v->shape);
      if (!count.ok()) {
        return Unsupported(n, absl::StrCat("output '", o, "': ", count.status().message()));
      }
      if (v->constant) {
        if (v->constant->size() != *count) {
          return absl::InternalError(absl::StrCat("node '", n.name, "' (", n.op, "): folding made ",
                                                  v->constant->size(), " values for output '", o,
                                                  "' of shape ", ShapeText(v->shape)));
        }
        budget -= *count;
        if (budget < 0) {
          return Unsupported(n,
                             absl::StrCat("constant folding would create more than ", kFoldBudget,
                                          " elements beyond twice the model's "
                                          "own constants (a bound against inflated models)"));
        }
        continue;
      }
      if (*count == 0) {
        return Unsupported(n, "output '" + o + "' is empty (shape " + ShapeText(v->shape) +
                                  "); empty tensors are not supported");
      }
    }
  }
  g.nodes = std::move(kept);
  return absl::OkStatus();
}

absl::Status InferNode(Graph& g, Node& n, std::vector<Node>* kept_nodes) {
  std::vector<Node>& kept = *kept_nodes;
  {
    std::vector<const Value*> ins;
    for (const std::string& name : n.inputs) {
      if (name.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      const Value* v = g.Find(name);
      if (v == nullptr) {
        return Unsupported(n, "input '" + name + "' is produced by no earlier node");
      }
      ins.push_back(v);
    }
    // Constant folding: constants in, constants out.
    absl::StatusOr<bool> folded = TryFold(g, n);
    if (!folded.ok()) return folded.status();
    if (*folded) return absl::OkStatus();

    auto in_shape = [&](size_t i) -> const std::vector<int64_t>& { return ins[i]->shape; };
    auto set_out = [&](size_t i, std::vector<int64_t> shape, bool is_int = false) {
      if (i >= n.outputs.size() || n.outputs[i].empty()) return;
      Value v;
      v.name = n.outputs[i];
      v.shape = std::move(shape);
      v.is_int = is_int;
      g.values[v.name] = std::move(v);
    };
    if (ins.empty() || ins[0] == nullptr) return Unsupported(n, "has no input");
    for (size_t i = 0; i < ins.size(); ++i) {
      if (ins[i] && ins[i]->is_int && !ins[i]->constant) {
        return Unsupported(n, absl::StrCat("input '", n.inputs[i],
                                           "' is an integer tensor computed at run time, which "
                                           "is not supported (only float32 data flows)"));
      }
    }
    const std::string& op = n.op;
    // The inputs that the kernels read without looking (weights, statistics, B of a matmul)
    // must be there, and sized as the op says.
    auto need = [&](size_t count, const char* what) -> absl::Status {
      for (size_t i = 0; i < count; ++i) {
        if (i >= ins.size() || ins[i] == nullptr) {
          return Unsupported(n, absl::StrCat("needs ", count, " inputs (", what, ")"));
        }
      }
      return absl::OkStatus();
    };
    auto sized = [&](size_t i, int64_t count, const char* what) -> absl::Status {
      if (i < ins.size() && ins[i] && NumElements(in_shape(i)) != count) {
        return Unsupported(n, absl::StrCat(what, " '", n.inputs[i], "' has shape ",
                                           ShapeText(in_shape(i)), ", not ", count, " elements"));
      }
      return absl::OkStatus();
    };
    if (op == "BatchNormalization") {
      if (absl::Status s = need(5, "X, scale, B, mean, var"); !s.ok()) return s;
      if (in_shape(0).size() < 2) return Unsupported(n, "needs an input of rank 2 or more");
      for (size_t i = 1; i < 5; ++i) {
        if (absl::Status s = sized(i, in_shape(0)[1], "statistic"); !s.ok()) return s;
      }
    } else if (op == "Gemm" || op == "MatMul" || op == "Conv" || op == "ConvTranspose" ||
               op == "LayerNormalization") {
      if (absl::Status s = need(2, "data and weights"); !s.ok()) return s;
    }
    if (op == "Cast") {
      const int64_t to = n.Int("to", 1);
      if (to != 1) {
        return Unsupported(n, absl::StrCat("a cast of run-time data to element type ", to,
                                           " is not supported (only float32)"));
      }
      set_out(0, in_shape(0));
    } else if (UnaryOps().count(op) || op == "BatchNormalization" || op == "LRN") {
      if (op == "Softmax") {
        absl::StatusOr<int64_t> axis = NormAxis(n, n.Int("axis", g.opset >= 13 ? -1 : 1),
                                                static_cast<int64_t>(in_shape(0).size()));
        if (!axis.ok()) return axis.status();
      }
      set_out(0, in_shape(0));
    } else if (BinaryOps().count(op)) {
      if (ins.size() != 2 || !ins[1]) return Unsupported(n, "needs two inputs");
      std::vector<int64_t> out;
      LATHE_TRY_ASSIGN(out, Broadcast(n, in_shape(0), in_shape(1)));
      set_out(0, out);
    } else if (op == "Conv" || op == "ConvTranspose") {
      const std::vector<int64_t>& x = in_shape(0);
      if (ins.size() < 2 || !ins[1]) return Unsupported(n, "needs a weight input");
      const std::vector<int64_t>& wt = in_shape(1);
      if (x.size() != 4 || wt.size() != 4) {
        return Unsupported(n, absl::StrCat("only 2-d convolutions (4-d tensors) are supported, "
                                           "got input ",
                                           ShapeText(x)));
      }
      Window w;
      LATHE_TRY_ASSIGN(w, WindowOf(n, {x[2], x[3]}, {wt[2], wt[3]}));
      const int64_t groups = n.Int("group", 1);
      if (groups < 1 || x[1] % groups != 0) {
        return Unsupported(
            n, absl::StrCat("group ", groups, " does not divide the ", x[1], " input channels"));
      }
      if (const Attr* k = n.attr("kernel_shape");
          k && k->ints != std::vector<int64_t>{wt[2], wt[3]}) {
        return Unsupported(n, absl::StrCat("attribute 'kernel_shape' ", ShapeText(k->ints),
                                           " does not match the weight ", ShapeText(wt)));
      }
      if (op == "Conv") {
        if (wt[0] % groups != 0) {
          return Unsupported(n, absl::StrCat("group ", groups, " does not divide the ", wt[0],
                                             " output channels"));
        }
        if (wt[1] * groups != x[1]) {
          return Unsupported(n, absl::StrCat("weight ", ShapeText(wt), " does not match input ",
                                             ShapeText(x), " with group ", groups));
        }
        const int64_t oh = (x[2] + w.pad_t + w.pad_b - w.dil_h * (wt[2] - 1) - 1) / w.stride_h + 1;
        const int64_t ow = (x[3] + w.pad_l + w.pad_r - w.dil_w * (wt[3] - 1) - 1) / w.stride_w + 1;
        if (oh <= 0 || ow <= 0) return Unsupported(n, "output extent is not positive");
        if (absl::Status s = sized(2, wt[0], "bias"); !s.ok()) return s;
        set_out(0, {x[0], wt[0], oh, ow});
      } else {
        if (wt[0] != x[1]) {
          return Unsupported(
              n, absl::StrCat("weight ", ShapeText(wt), " does not match input ", ShapeText(x)));
        }
        if (n.attr("output_shape"))
          return Unsupported(n, "attribute output_shape is not supported");
        std::vector<int64_t> op_pad = n.Ints("output_padding", {0, 0});
        if (op_pad.size() != 2) return Unsupported(n, "output_padding must have 2 values");
        const int64_t oh =
            (x[2] - 1) * w.stride_h - w.pad_t - w.pad_b + w.dil_h * (wt[2] - 1) + op_pad[0] + 1;
        const int64_t ow =
            (x[3] - 1) * w.stride_w - w.pad_l - w.pad_r + w.dil_w * (wt[3] - 1) + op_pad[1] + 1;
        if (absl::Status s = sized(2, wt[1] * groups, "bias"); !s.ok()) return s;
        set_out(0, {x[0], wt[1] * groups, oh, ow});
      }
    } else if (op == "MaxPool" || op == "AveragePool") {
      const std::vector<int64_t>& x = in_shape(0);
      std::vector<int64_t> k = n.Ints("kernel_shape");
      if (x.size() != 4 || k.size() != 2) return Unsupported(n, "only 2-d pooling is supported");
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) {
        return Unsupported(n, "the Indices output is not supported");
      }
      Window w;
      LATHE_TRY_ASSIGN(w, WindowOf(n, {x[2], x[3]}, k));
      if (w.dil_h != 1 || w.dil_w != 1) return Unsupported(n, "dilated pooling is not supported");
      set_out(0, {x[0], x[1], (x[2] + w.pad_t + w.pad_b - k[0]) / w.stride_h + 1,
                  (x[3] + w.pad_l + w.pad_r - k[1]) / w.stride_w + 1});
    } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
      const std::vector<int64_t>& x = in_shape(0);
      if (x.size() != 4) return Unsupported(n, "only 4-d inputs are supported");
      set_out(0, {x[0], x[1], 1, 1});
    } else if (op == "Gemm") {
      std::vector<int64_t> a = in_shape(0), b = in_shape(1);
      if (a.size() != 2 || b.size() != 2) return Unsupported(n, "needs 2-d inputs");
      const int64_t m = n.Int("transA", 0) ? a[1] : a[0];
      const int64_t nn = n.Int("transB", 0) ? b[0] : b[1];
      if ((n.Int("transA", 0) ? a[0] : a[1]) != (n.Int("transB", 0) ? b[1] : b[0])) {
        return Unsupported(
            n, absl::StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not multiply"));
      }
      set_out(0, {m, nn});
    } else if (op == "MatMul") {
      std::vector<int64_t> a = in_shape(0), b = in_shape(1);
      if (a.size() < 2 || b.size() < 2) {
        return Unsupported(n, "1-d matmul operands are not supported");
      }
      if (a.back() != b[b.size() - 2]) {
        return Unsupported(
            n, absl::StrCat("shapes ", ShapeText(a), " and ", ShapeText(b), " do not multiply"));
      }
      std::vector<int64_t> ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
      std::vector<int64_t> out;
      LATHE_TRY_ASSIGN(out, Broadcast(n, ba, bb));
      out.push_back(a[a.size() - 2]);
      out.push_back(b.back());
      set_out(0, out);
    } else if (op == "LayerNormalization") {
      set_out(0, in_shape(0));
      for (size_t i = 1; i < n.outputs.size(); ++i) {
        if (!n.outputs[i].empty()) return Unsupported(n, "only the first output is supported");
      }
    } else if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin") {
      const std::vector<int64_t>& x = in_shape(0);
      std::vector<int64_t> axes = n.Ints("axes");
      std::optional<std::vector<int64_t>> in_axes;
      LATHE_TRY_ASSIGN(in_axes, IntsInput(g, n, 1));
      if (in_axes) axes = *in_axes;
      std::vector<int64_t> out;
      std::set<int64_t> red;
      if (axes.empty() && !n.Int("noop_with_empty_axes", 0)) {
        for (size_t d = 0; d < x.size(); ++d) red.insert(static_cast<int64_t>(d));
      }
      for (int64_t a : axes) {
        int64_t na = 0;
        LATHE_TRY_ASSIGN(na, NormAxis(n, a, static_cast<int64_t>(x.size())));
        red.insert(na);
      }
      const bool keep = n.Int("keepdims", 1) != 0;
      for (size_t d = 0; d < x.size(); ++d) {
        if (!red.count(static_cast<int64_t>(d))) {
          out.push_back(x[d]);
        } else if (keep) {
          out.push_back(1);
        }
      }
      set_out(0, out);
    } else if (op == "Transpose") {
      const std::vector<int64_t>& x = in_shape(0);
      std::vector<int64_t> perm = n.Ints("perm");
      if (perm.empty()) {
        for (size_t d = x.size(); d-- > 0;) perm.push_back(static_cast<int64_t>(d));
      }
      if (absl::Status s = CheckPerm(n, perm, x.size()); !s.ok()) return s;
      std::vector<int64_t> out;
      for (int64_t p : perm) out.push_back(x[p]);
      set_out(0, out);
    } else if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      std::vector<int64_t> out;
      LATHE_TRY_ASSIGN(out, ReshapeShape(g, n, in_shape(0)));
      set_out(0, out);
    } else if (op == "Concat") {
      std::vector<int64_t> out = in_shape(0);
      int64_t axis = 0;
      LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", 0), static_cast<int64_t>(out.size())));
      for (size_t i = 1; i < ins.size(); ++i) {
        if (!ins[i]) continue;
        const std::vector<int64_t>& s = in_shape(i);
        bool ok = s.size() == out.size();
        for (size_t d = 0; ok && d < s.size(); ++d)
          ok = static_cast<int64_t>(d) == axis || s[d] == out[d];
        if (!ok) {
          return Unsupported(n, absl::StrCat("input shapes ", ShapeText(in_shape(0)), " and ",
                                             ShapeText(s), " differ outside axis ", axis));
        }
        out[axis] += s[axis];
      }
      set_out(0, out);
    } else if (op == "Slice" || op == "Split") {
      std::vector<SliceSpec> outs;
      LATHE_TRY_ASSIGN(outs, SliceSpecs(g, n, in_shape(0)));
      for (size_t i = 0; i < outs.size(); ++i) set_out(i, outs[i].size);
    } else if (op == "Resize" || op == "Upsample") {
      ResizeSpec r;
      LATHE_TRY_ASSIGN(r, ResizeSpecOf(g, n, in_shape(0)));
      set_out(0, {in_shape(0)[0], in_shape(0)[1], r.oh, r.ow});
    } else {
      return Unsupported(n, "operator " + op + " is not supported");
    }
    kept.push_back(n);
  }
  return absl::OkStatus();
}

}  // namespace lathe::model
