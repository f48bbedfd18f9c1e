#include "model/fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/infer.h"

namespace lathe::model {
namespace {

#define LATHE_TRY_ASSIGN(lhs, expr)              \
  do {                                           \
    auto _v = (expr);                            \
    if (!_v.ok()) return std::move(_v).status(); \
    lhs = *std::move(_v);                        \
  } while (0)

std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// Calls fn(flat_out, multi_index) for every element of `shape`.
void ForEach(const std::vector<int64_t>& shape,
             const std::function<void(int64_t, const std::vector<int64_t>&)>& fn) {
  const int64_t total = NumElements(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t f = 0; f < total; ++f) {
    fn(f, idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t BroadcastFlat(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  const size_t off = idx.size() - shape.size();
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + (shape[d] == 1 ? 0 : idx[off + d]);
  return f;
}

ConstData MakeData(bool is_int, int64_t count) {
  ConstData d;
  d.is_int = is_int;
  if (is_int) {
    d.i.resize(count);
  } else {
    d.f.resize(count);
  }
  return d;
}

void Set(ConstData& d, int64_t k, double v) {
  if (d.is_int) {
    d.i[k] = ConstData::SaturatingInt64(v);
  } else {
    d.f[k] = static_cast<float>(v);
  }
}

// Copies element `from` of `src` to element `to` of `dst` (same element type).
void CopyElem(const ConstData& src, int64_t from, ConstData& dst, int64_t to) {
  if (src.is_int) {
    dst.i[to] = src.i[from];
  } else {
    dst.f[to] = src.f[from];
  }
}

absl::StatusOr<ConstData> ConstantAttr(const Node& n, std::vector<int64_t>* shape) {
  if (const Attr* a = n.attr("value")) {
    if (a->kind != Attr::kTensor) return Unsupported(n, "attribute 'value' must be a tensor");
    *shape = a->tensor_shape;
    return a->tensor;
  }
  ConstData d;
  if (const Attr* a = n.attr("value_float")) {
    d.f = {a->f};
  } else if (const Attr* a = n.attr("value_floats")) {
    d.f = a->floats;
    *shape = {static_cast<int64_t>(d.f.size())};
  } else if (const Attr* a = n.attr("value_int")) {
    d.is_int = true;
    d.i = {a->i};
  } else if (const Attr* a = n.attr("value_ints")) {
    d.is_int = true;
    d.i = a->ints;
    *shape = {static_cast<int64_t>(d.i.size())};
  } else {
    return Unsupported(n, "a Constant needs value, value_float(s) or value_int(s)");
  }
  return d;
}

double Binary(const std::string& op, double a, double b, bool is_int) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return is_int ? std::trunc(a / b) : a / b;
  if (op == "Pow") return std::pow(a, b);
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "Mod") return std::fmod(a, b);
  return 0;
}

double Unary(const std::string& op, double a) {
  if (op == "Sqrt") return std::sqrt(a);
  if (op == "Neg") return -a;
  if (op == "Abs") return std::fabs(a);
  if (op == "Floor") return std::floor(a);
  if (op == "Ceil") return std::ceil(a);
  if (op == "Reciprocal") return 1.0 / a;
  if (op == "Exp") return std::exp(a);
  if (op == "Relu") return std::max(a, 0.0);
  if (op == "Not") return a == 0;
  return a;  // Identity, Cast
}

const std::set<std::string>& FoldableOps() {
  static const std::set<std::string>* ops = new std::set<std::string>{"Add",
                                                                      "Sub",
                                                                      "Mul",
                                                                      "Div",
                                                                      "Pow",
                                                                      "Max",
                                                                      "Min",
                                                                      "Equal",
                                                                      "Less",
                                                                      "Greater",
                                                                      "Mod",
                                                                      "Sqrt",
                                                                      "Neg",
                                                                      "Abs",
                                                                      "Floor",
                                                                      "Ceil",
                                                                      "Reciprocal",
                                                                      "Exp",
                                                                      "Relu",
                                                                      "Not",
                                                                      "Identity",
                                                                      "Cast",
                                                                      "Gather",
                                                                      "Slice",
                                                                      "Concat",
                                                                      "Unsqueeze",
                                                                      "Squeeze",
                                                                      "Reshape",
                                                                      "Flatten",
                                                                      "Transpose",
                                                                      "ConstantOfShape",
                                                                      "Range",
                                                                      "Expand",
                                                                      "Where",
                                                                      "ReduceProd",
                                                                      "Dropout"};
  return *ops;
}

}  // namespace

bool IsFoldableOp(const std::string& op) {
  return op == "Constant" || op == "Shape" || FoldableOps().count(op) > 0;
}

absl::StatusOr<std::vector<int64_t>> ReshapeShape(const Graph& g, const Node& n,
                                                  const std::vector<int64_t>& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> out;
  if (n.op == "Flatten") {
    int64_t axis = n.Int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis > rank) return Unsupported(n, "axis out of range");
    int64_t a = 1, b = 1;
    for (int64_t d = 0; d < rank; ++d) (d < axis ? a : b) *= in[d];
    return std::vector<int64_t>{a, b};
  }
  if (n.op == "Reshape") {
    std::optional<std::vector<int64_t>> shape;
    LATHE_TRY_ASSIGN(shape, IntsInput(g, n, 1));
    if (!shape) return Unsupported(n, "needs a shape input");
    const bool allowzero = n.Int("allowzero", 0) != 0;
    int64_t infer = -1;
    for (size_t d = 0; d < shape->size(); ++d) {
      int64_t v = (*shape)[d];
      if (v == 0 && !allowzero) {
        if (d >= in.size()) return Unsupported(n, "shape 0 refers past the input rank");
        v = in[d];
      }
      if (v == -1) {
        if (infer >= 0) return Unsupported(n, "more than one -1 in the shape");
        infer = static_cast<int64_t>(d);
        out.push_back(1);
        continue;
      }
      if (v < 0) return Unsupported(n, absl::StrCat("negative extent ", v, " in the shape"));
      out.push_back(v);
    }
    absl::StatusOr<int64_t> known = CheckedNumElements(out);
    if (!known.ok()) return Unsupported(n, std::string(known.status().message()));
    const int64_t total = NumElements(in);
    if (infer >= 0) {
      if (*known == 0 || total % *known != 0) return Unsupported(n, "cannot infer the -1 extent");
      out[infer] = total / *known;
    }
    if (NumElements(out) != total) {
      return Unsupported(n, absl::StrCat("cannot reshape ", ShapeText(in), " to ", ShapeText(out)));
    }
    return out;
  }
  std::vector<int64_t> axes = n.Ints("axes");
  std::optional<std::vector<int64_t>> in_axes;
  LATHE_TRY_ASSIGN(in_axes, IntsInput(g, n, 1));
  if (in_axes) axes = *in_axes;
  if (n.op == "Squeeze") {
    std::set<int64_t> drop;
    for (int64_t a : axes) {
      int64_t na = 0;
      LATHE_TRY_ASSIGN(na, NormAxis(n, a, rank));
      if (in[na] != 1) return Unsupported(n, absl::StrCat("cannot squeeze extent ", in[na]));
      drop.insert(na);
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (axes.empty() ? in[d] != 1 : !drop.count(d)) out.push_back(in[d]);
    }
    return out;
  }
  if (n.op == "Unsqueeze") {
    const int64_t out_rank = rank + static_cast<int64_t>(axes.size());
    std::set<int64_t> add;
    for (int64_t a : axes) {
      int64_t na = 0;
      LATHE_TRY_ASSIGN(na, NormAxis(n, a, out_rank));
      if (!add.insert(na).second) {
        return Unsupported(n, absl::StrCat("axis ", a, " is named twice"));
      }
    }
    size_t k = 0;
    for (int64_t d = 0; d < out_rank; ++d) out.push_back(add.count(d) ? 1 : in[k++]);
    return out;
  }
  return Unsupported(n, "is not a reshape");
}

absl::StatusOr<std::vector<SliceSpec>> SliceSpecs(const Graph& g, const Node& n,
                                                  const std::vector<int64_t>& in) {
  const int64_t rank = static_cast<int64_t>(in.size());
  SliceSpec full;
  full.begin.assign(rank, 0);
  full.size = in;
  full.step.assign(rank, 1);
  if (n.op == "Split") {
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", 0), rank));
    std::vector<int64_t> split = n.Ints("split");
    std::optional<std::vector<int64_t>> in_split;
    LATHE_TRY_ASSIGN(in_split, IntsInput(g, n, 1));
    if (in_split) split = *in_split;
    const int64_t parts = static_cast<int64_t>(n.outputs.size());
    if (parts == 0) return Unsupported(n, "has no outputs");
    if (!split.empty() && static_cast<int64_t>(split.size()) != parts) {
      return Unsupported(n, absl::StrCat(split.size(), " split sizes for ", parts, " outputs"));
    }
    if (split.empty()) {
      if (in[axis] % parts != 0) return Unsupported(n, "uneven split without split sizes");
      split.assign(parts, in[axis] / parts);
    }
    std::vector<SliceSpec> out;
    int64_t off = 0;
    for (int64_t s : split) {
      if (s < 0 || s > in[axis] - off) {
        return Unsupported(n, "split sizes do not add up to the extent");
      }
      SliceSpec sp = full;
      sp.begin[axis] = off;
      sp.size[axis] = s;
      off += s;
      out.push_back(sp);
    }
    if (off != in[axis]) return Unsupported(n, "split sizes do not add up to the extent");
    return out;
  }
  std::vector<int64_t> starts, ends, axes, steps;
  if (g.opset < 10 && n.attr("starts")) {
    starts = n.Ints("starts");
    ends = n.Ints("ends");
    axes = n.Ints("axes");
  } else {
    std::optional<std::vector<int64_t>> v;
    LATHE_TRY_ASSIGN(v, IntsInput(g, n, 1));
    if (v) starts = *v;
    LATHE_TRY_ASSIGN(v, IntsInput(g, n, 2));
    if (v) ends = *v;
    LATHE_TRY_ASSIGN(v, IntsInput(g, n, 3));
    if (v) axes = *v;
    LATHE_TRY_ASSIGN(v, IntsInput(g, n, 4));
    if (v) steps = *v;
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return Unsupported(n, "starts, ends, axes and steps differ in length");
  }
  SliceSpec sp = full;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = 0;
    LATHE_TRY_ASSIGN(a, NormAxis(n, axes[i], rank));
    const int64_t e = in[a], step = steps[i];
    if (step <= 0) return Unsupported(n, "only positive slice steps are supported");
    int64_t b = starts[i] < 0 ? starts[i] + e : starts[i];
    int64_t en = ends[i] < 0 ? ends[i] + e : ends[i];
    b = std::clamp<int64_t>(b, 0, e);
    en = std::clamp<int64_t>(en, 0, e);
    const int64_t size = en > b ? (en - b - 1) / step + 1 : 0;
    if (size == 0) {
      return Unsupported(n, absl::StrCat("an empty slice is not supported (axis ", a, ", extent ",
                                         e, ", start ", starts[i], ", end ", ends[i], ")"));
    }
    sp.begin[a] = b;
    sp.size[a] = size;
    sp.step[a] = step;
  }
  return std::vector<SliceSpec>{sp};
}

absl::StatusOr<ResizeSpec> ResizeSpecOf(const Graph& g, const Node& n,
                                        const std::vector<int64_t>& in) {
  if (in.size() != 4) return Unsupported(n, "only 4-d (NCHW) inputs are supported");
  ResizeSpec r;
  r.mode = n.Str("mode", "nearest");
  if (r.mode != "nearest" && r.mode != "linear") {
    return Unsupported(n, "mode '" + r.mode + "' is not supported (nearest, linear are)");
  }
  r.coord =
      n.Str("coordinate_transformation_mode", n.op == "Upsample" ? "asymmetric" : "half_pixel");
  r.nearest = n.Str("nearest_mode", n.op == "Upsample" ? "floor" : "round_prefer_floor");
  if (n.op == "Upsample" && r.nearest == "round_prefer_floor") r.nearest = "floor";
  for (const char* c : {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}) {
    if (r.coord == c) goto coord_ok;
  }
  return Unsupported(n, "coordinate_transformation_mode '" + r.coord + "' is not supported");
coord_ok:
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  auto floats_of = [&](size_t i) -> absl::StatusOr<std::vector<float>> {
    std::vector<float> out;
    if (i >= n.inputs.size() || n.inputs[i].empty()) return out;
    const ConstData* c = g.Const(n.inputs[i]);
    if (!c) return Unsupported(n, "scales must be a constant");
    for (int64_t k = 0; k < c->size(); ++k) out.push_back(static_cast<float>(c->at(k)));
    return out;
  };
  if (n.op == "Upsample") {
    if (n.attr("scales")) {
      scales = n.attr("scales")->floats;
    } else {
      LATHE_TRY_ASSIGN(scales, floats_of(1));
    }
  } else {
    const size_t scales_at = g.opset >= 11 ? 2 : 1;
    LATHE_TRY_ASSIGN(scales, floats_of(scales_at));
    if (g.opset >= 11) {
      std::optional<std::vector<int64_t>> s;
      LATHE_TRY_ASSIGN(s, IntsInput(g, n, 3));
      if (s) sizes = *s;
    }
  }
  if (!sizes.empty()) {
    if (sizes.size() != 4 || sizes[0] != in[0] || sizes[1] != in[1]) {
      return Unsupported(n, "only the two spatial dimensions may be resized");
    }
    r.oh = sizes[2];
    r.ow = sizes[3];
  } else {
    if (scales.size() != 4 || scales[0] != 1 || scales[1] != 1) {
      return Unsupported(n, "scales must be given for 4 dimensions, 1 for batch and channels");
    }
    const double oh = std::floor(in[2] * static_cast<double>(scales[2]));
    const double ow = std::floor(in[3] * static_cast<double>(scales[3]));
    // Written so that NaN fails too.
    if (!(oh >= 1 && oh <= kMaxTensorElements && ow >= 1 && ow <= kMaxTensorElements)) {
      return Unsupported(n, absl::StrCat("scales ", scales[2], " and ", scales[3],
                                         " give no valid output extent"));
    }
    r.oh = static_cast<int64_t>(oh);
    r.ow = static_cast<int64_t>(ow);
  }
  if (r.oh <= 0 || r.ow <= 0) return Unsupported(n, "the output extent is not positive");
  if (n.Int("exclude_outside", 0) != 0 || n.Int("antialias", 0) != 0) {
    return Unsupported(n, "exclude_outside and antialias are not supported");
  }
  return r;
}

absl::StatusOr<bool> TryFold(Graph& g, const Node& n) {
  if (IsFoldableOp(n.op) && (n.outputs.empty() || n.outputs[0].empty())) {
    return Unsupported(n, "has no output");
  }
  auto set = [&](size_t i, std::vector<int64_t> shape, ConstData d) {
    Value v;
    v.name = n.outputs[i];
    v.shape = std::move(shape);
    v.is_int = d.is_int;
    v.constant = std::move(d);
    g.values[v.name] = std::move(v);
  };
  if (n.op == "Constant") {
    std::vector<int64_t> shape;
    ConstData d;
    LATHE_TRY_ASSIGN(d, ConstantAttr(n, &shape));
    set(0, shape, std::move(d));
    return true;
  }
  if (n.op == "Shape") {
    const Value* v = n.inputs.empty() ? nullptr : g.Find(n.inputs[0]);
    if (!v) return Unsupported(n, "input is produced by no earlier node");
    ConstData d;
    d.is_int = true;
    d.i = v->shape;
    const int64_t rank = static_cast<int64_t>(d.i.size());
    int64_t start = n.Int("start", 0), end = n.Int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    d.i = std::vector<int64_t>(d.i.begin() + start, d.i.begin() + end);
    const int64_t count = static_cast<int64_t>(d.i.size());
    set(0, {count}, std::move(d));
    return true;
  }
  if (!FoldableOps().count(n.op)) return false;
  // The element count of a folded output of `shape`, checked before anything is allocated:
  // above `cap`, an op that a kernel can compute is left unfolded (nullopt), any other is
  // refused.
  auto fold_count = [&](const std::vector<int64_t>& shape,
                        int64_t cap) -> absl::StatusOr<std::optional<int64_t>> {
    absl::StatusOr<int64_t> count = CheckedNumElements(shape);
    if (!count.ok()) return Unsupported(n, std::string(count.status().message()));
    if (*count <= cap) return std::optional<int64_t>(*count);
    if (IsInferredOp(n.op)) return std::optional<int64_t>();
    return Unsupported(
        n, absl::StrCat("folding would create ", *count, " elements (shape ", ShapeText(shape),
                        "), more than the ", cap, " lathe folds in one tensor"));
  };
  std::vector<const Value*> ins;
  for (const std::string& name : n.inputs) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    const Value* v = g.Find(name);
    if (!v || !v->constant) return false;
    ins.push_back(v);
  }
  if (ins.empty() || !ins[0]) return false;
  const Value& x = *ins[0];
  const ConstData& xd = *x.constant;
  const std::string& op = n.op;
  if (op == "Cast") {
    const int64_t to = n.Int("to", 1);
    const bool to_float = to == 1 || to == 11 || to == 10;
    ConstData d = MakeData(!to_float, xd.size());
    for (int64_t k = 0; k < xd.size(); ++k) {
      double v = xd.at(k);
      if (!to_float && !xd.is_int) v = std::trunc(v);
      if (to == 9) v = v != 0;
      Set(d, k, v);
    }
    set(0, x.shape, std::move(d));
    return true;
  }
  if (op == "Identity" || op == "Dropout" || op == "Reshape" || op == "Flatten" ||
      op == "Squeeze" || op == "Unsqueeze") {
    std::vector<int64_t> shape = x.shape;
    if (op != "Identity" && op != "Dropout") LATHE_TRY_ASSIGN(shape, ReshapeShape(g, n, x.shape));
    set(0, shape, xd);
    return true;
  }
  if (op == "Sqrt" || op == "Neg" || op == "Abs" || op == "Floor" || op == "Ceil" ||
      op == "Reciprocal" || op == "Exp" || op == "Relu" || op == "Not") {
    ConstData d = MakeData(xd.is_int, xd.size());
    for (int64_t k = 0; k < xd.size(); ++k) Set(d, k, Unary(op, xd.at(k)));
    set(0, x.shape, std::move(d));
    return true;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" ||
      op == "Min" || op == "Equal" || op == "Less" || op == "Greater" || op == "Mod") {
    if (ins.size() < 2 || !ins[1]) return false;
    const Value& y = *ins[1];
    std::vector<int64_t> out;
    LATHE_TRY_ASSIGN(out, Broadcast(n, x.shape, y.shape));
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxFoldElements));
    if (!count) return false;
    const bool cmp = op == "Equal" || op == "Less" || op == "Greater";
    const bool is_int = cmp || (xd.is_int && y.constant->is_int);
    ConstData d = MakeData(is_int, *count);
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      Set(d, f,
          Binary(op, xd.at(BroadcastFlat(x.shape, idx)),
                 y.constant->at(BroadcastFlat(y.shape, idx)), is_int));
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "Where") {
    if (ins.size() < 3 || !ins[1] || !ins[2]) return false;
    std::vector<int64_t> out;
    LATHE_TRY_ASSIGN(out, Broadcast(n, x.shape, ins[1]->shape));
    LATHE_TRY_ASSIGN(out, Broadcast(n, out, ins[2]->shape));
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxFoldElements));
    if (!count) return false;
    const bool is_int = ins[1]->constant->is_int && ins[2]->constant->is_int;
    ConstData d = MakeData(is_int, NumElements(out));
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      const bool c = xd.at(BroadcastFlat(x.shape, idx)) != 0;
      const Value& s = c ? *ins[1] : *ins[2];
      Set(d, f, s.constant->at(BroadcastFlat(s.shape, idx)));
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "Gather") {
    if (ins.size() < 2 || !ins[1]) return false;
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", 0), rank));
    const Value& ind = *ins[1];
    std::vector<int64_t> out(x.shape.begin(), x.shape.begin() + axis);
    out.insert(out.end(), ind.shape.begin(), ind.shape.end());
    out.insert(out.end(), x.shape.begin() + axis + 1, x.shape.end());
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxFoldElements));
    if (!count) return false;
    const int64_t extent = x.shape[axis];
    for (int64_t k = 0; k < ind.constant->size(); ++k) {
      const int64_t j = ind.constant->IntAt(k);
      if (j < -extent || j >= extent) {
        return Unsupported(n, absl::StrCat("index ", j, " is outside an axis of extent ", extent));
      }
    }
    ConstData d = MakeData(xd.is_int, NumElements(out));
    const std::vector<int64_t> xs = Strides(x.shape);
    const size_t ir = ind.shape.size();
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      int64_t src = 0;
      for (int64_t dd = 0; dd < axis; ++dd) src += idx[dd] * xs[dd];
      int64_t flat_i = 0;
      for (size_t k = 0; k < ir; ++k) flat_i = flat_i * ind.shape[k] + idx[axis + k];
      int64_t j = ind.constant->IntAt(flat_i);
      if (j < 0) j += extent;
      src += j * xs[axis];
      for (int64_t dd = axis + 1; dd < rank; ++dd) src += idx[dd - 1 + ir] * xs[dd];
      CopyElem(xd, src, d, f);
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "Slice") {
    std::vector<SliceSpec> sp;
    LATHE_TRY_ASSIGN(sp, SliceSpecs(g, n, x.shape));
    ConstData d = MakeData(xd.is_int, NumElements(sp[0].size));
    const std::vector<int64_t> xs = Strides(x.shape);
    ForEach(sp[0].size, [&](int64_t f, const std::vector<int64_t>& idx) {
      int64_t src = 0;
      for (size_t dd = 0; dd < idx.size(); ++dd) {
        src += (sp[0].begin[dd] + idx[dd] * sp[0].step[dd]) * xs[dd];
      }
      CopyElem(xd, src, d, f);
    });
    set(0, sp[0].size, std::move(d));
    return true;
  }
  if (op == "Concat") {
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    int64_t axis = 0;
    LATHE_TRY_ASSIGN(axis, NormAxis(n, n.Int("axis", 0), rank));
    std::vector<int64_t> out = x.shape;
    out[axis] = 0;
    bool is_int = true;
    for (const Value* v : ins) {
      if (!v) continue;
      bool same = v->shape.size() == x.shape.size();
      for (int64_t dd = 0; same && dd < rank; ++dd) same = dd == axis || v->shape[dd] == out[dd];
      if (!same) {
        return Unsupported(n, absl::StrCat("input shapes ", ShapeText(x.shape), " and ",
                                           ShapeText(v->shape), " differ outside axis ", axis));
      }
      out[axis] += v->shape[axis];  // each at most 2^31, and there are fewer than 2^31 inputs
      is_int = is_int && v->constant->is_int;
    }
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxFoldElements));
    if (!count) return false;
    ConstData d = MakeData(is_int, NumElements(out));
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      std::vector<int64_t> i2 = idx;
      size_t k = 0;
      while (!ins[k] || i2[axis] >= ins[k]->shape[axis]) {
        if (ins[k]) i2[axis] -= ins[k]->shape[axis];
        ++k;
      }
      int64_t src = 0;
      for (size_t dd = 0; dd < i2.size(); ++dd) src = src * ins[k]->shape[dd] + i2[dd];
      Set(d, f, ins[k]->constant->at(src));
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "Transpose") {
    std::vector<int64_t> perm = n.Ints("perm");
    if (perm.empty()) {
      for (size_t dd = x.shape.size(); dd-- > 0;) perm.push_back(static_cast<int64_t>(dd));
    }
    if (absl::Status s = CheckPerm(n, perm, x.shape.size()); !s.ok()) return s;
    std::vector<int64_t> out;
    for (int64_t p : perm) out.push_back(x.shape[p]);
    ConstData d = MakeData(xd.is_int, NumElements(out));
    const std::vector<int64_t> xs = Strides(x.shape);
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      int64_t src = 0;
      for (size_t dd = 0; dd < idx.size(); ++dd) src += idx[dd] * xs[perm[dd]];
      CopyElem(xd, src, d, f);
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "ConstantOfShape") {
    std::vector<int64_t> out;
    for (int64_t k = 0; k < xd.size(); ++k) out.push_back(xd.IntAt(k));
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxGeneratedElements));
    ConstData fill;
    fill.f = {0.0f};
    if (const Attr* a = n.attr("value")) fill = a->tensor;
    if (fill.size() != 1) return Unsupported(n, "attribute 'value' must hold one element");
    ConstData d = MakeData(fill.is_int, NumElements(out));
    for (int64_t k = 0; k < NumElements(out); ++k) Set(d, k, fill.at(0));
    set(0, out, std::move(d));
    return true;
  }
  if (op == "Range") {
    if (ins.size() < 3 || !ins[1] || !ins[2]) return false;
    if (xd.size() != 1 || ins[1]->constant->size() != 1 || ins[2]->constant->size() != 1) {
      return Unsupported(n, "start, limit and delta must be scalars");
    }
    const double start = xd.at(0), limit = ins[1]->constant->at(0), delta = ins[2]->constant->at(0);
    if (delta == 0) return Unsupported(n, "delta is 0");
    if (!std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) {
      return Unsupported(n, "start, limit and delta must be finite");
    }
    const double elements = std::max(0.0, std::ceil((limit - start) / delta));
    if (!(elements <= kMaxGeneratedElements)) {
      return Unsupported(
          n, absl::StrCat("a Range of ", elements, " elements (from ", start, " to ", limit, " by ",
                          delta, ") is more than the ", kMaxGeneratedElements, " lathe folds"));
    }
    const int64_t count = static_cast<int64_t>(elements);
    ConstData d = MakeData(xd.is_int, count);
    for (int64_t k = 0; k < count; ++k) Set(d, k, start + k * delta);
    set(0, {count}, std::move(d));
    return true;
  }
  if (op == "Expand") {
    if (ins.size() < 2 || !ins[1]) return false;
    std::vector<int64_t> target;
    for (int64_t k = 0; k < ins[1]->constant->size(); ++k) {
      target.push_back(ins[1]->constant->IntAt(k));
    }
    std::vector<int64_t> out;
    LATHE_TRY_ASSIGN(out, Broadcast(n, x.shape, target));
    std::optional<int64_t> count;
    LATHE_TRY_ASSIGN(count, fold_count(out, kMaxGeneratedElements));
    ConstData d = MakeData(xd.is_int, NumElements(out));
    ForEach(out, [&](int64_t f, const std::vector<int64_t>& idx) {
      CopyElem(xd, BroadcastFlat(x.shape, idx), d, f);
    });
    set(0, out, std::move(d));
    return true;
  }
  if (op == "ReduceProd") {
    if (n.attr("axes") || n.Int("keepdims", 1) != 0 || x.shape.size() != 1) return false;
    double p = 1;
    for (int64_t k = 0; k < xd.size(); ++k) p *= xd.at(k);
    ConstData d = MakeData(xd.is_int, 1);
    Set(d, 0, p);
    set(0, {}, std::move(d));
    return true;
  }
  return false;
}

}  // namespace lathe::model
