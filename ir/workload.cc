#include "ir/workload.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/epilogue.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir {
namespace {

// Limits that keep hostile specs from allocating terabytes or overflowing index arithmetic.
constexpr int64_t kMaxExtent = int64_t{1} << 20;
constexpr double kMaxElements = 2147483648.0;  // 2^31 per tensor, intermediates included

enum class KeyKind : uint8_t {
  kPositive,
  kNonNegative,
  kChoice,
  kPositiveFloat,
  kPair,       // stride, dilation: N or HxW, positive
  kPads,       // N, HxW or TxLxBxR, non-negative
  kShape,      // AxBx..., positive, rank 1..8
  kIndices,    // AxBx..., non-negative (axes, permutations, offsets)
  kShapeList,  // shapes joined by '+'
  kEpilogue,   // an epilogue expression (ir/epilogue.h)
  kLayout,     // nchw, nhwc or nchw{x}c (channels in blocks of x)
};

struct KeyDef {
  const char* name;
  KeyKind kind;
  const char* default_value;  // nullptr: required (unless optional)
  std::vector<std::string> choices = {};
  // Keys added after records existed: left out of the canonical form while they hold their
  // default, so that the keys of older records never change.
  bool omit_default = false;
  bool optional = false;  // no default; absent means "not given"
};

struct OpDef {
  const char* name;
  std::vector<KeyDef> keys;  // in the order they are listed in messages
};

const std::vector<std::string> kLayouts = {"nchw", "nhwc"};
const std::vector<std::string> kBools = {"0", "1"};

const std::vector<OpDef>& OpDefs() {
  static const std::vector<OpDef>* defs = new std::vector<OpDef>{
      {"matmul",
       {{"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"epilogue", KeyKind::kEpilogue, "none"},
        {"transpose_a", KeyKind::kChoice, "0", kBools, true},
        {"transpose_b", KeyKind::kChoice, "0", kBools, true},
        {"bpanel", KeyKind::kPositive, nullptr, {}, false, true}}},
      {"batch_matmul",
       {{"b", KeyKind::kPositive, nullptr},
        {"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"epilogue", KeyKind::kEpilogue, "none"},
        {"transpose_a", KeyKind::kChoice, "0", kBools, true},
        {"transpose_b", KeyKind::kChoice, "0", kBools, true},
        {"bcast", KeyKind::kChoice, "none", {"none", "a", "b"}, true},
        {"bpanel", KeyKind::kPositive, nullptr, {}, false, true}}},
      {"conv2d",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"r", KeyKind::kPositive, nullptr},
        {"s", KeyKind::kPositive, nullptr},
        {"stride", KeyKind::kPair, "1"},
        {"pad", KeyKind::kPads, "0"},
        {"dilation", KeyKind::kPair, "1"},
        {"groups", KeyKind::kPositive, "1"},
        {"layout", KeyKind::kLayout, "nchw"},
        {"epilogue", KeyKind::kEpilogue, "none"},
        {"kblock", KeyKind::kPositive, nullptr, {}, false, true}}},
      {"conv2d_transpose",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"r", KeyKind::kPositive, nullptr},
        {"s", KeyKind::kPositive, nullptr},
        {"stride", KeyKind::kPair, "1"},
        {"pad", KeyKind::kPads, "0"},
        {"dilation", KeyKind::kPair, "1"},
        {"output_padding", KeyKind::kPads, "0"},
        {"groups", KeyKind::kPositive, "1"},
        {"epilogue", KeyKind::kEpilogue, "none"}}},
      {"pool2d",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"r", KeyKind::kPositive, nullptr},
        {"s", KeyKind::kPositive, nullptr},
        {"stride", KeyKind::kPair, "1"},
        {"pad", KeyKind::kPads, "0"},
        {"kind", KeyKind::kChoice, "max", {"max", "avg"}},
        {"layout", KeyKind::kLayout, "nchw"},
        {"count_include_pad", KeyKind::kChoice, "1", kBools, true}}},
      {"softmax",
       {{"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"inner", KeyKind::kPositive, "1", {}, true}}},
      {"layer_norm",
       {{"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"eps", KeyKind::kPositiveFloat, "1e-05"}}},
      {"ewise",
       {{"a", KeyKind::kShape, nullptr},
        {"b", KeyKind::kShape, nullptr, {}, false, true},
        {"binary",
         KeyKind::kChoice,
         nullptr,
         {"add", "sub", "mul", "div", "max", "min", "pow"},
         false,
         true},
        {"epilogue", KeyKind::kEpilogue, "none"}}},
      {"transpose", {{"shape", KeyKind::kShape, nullptr}, {"perm", KeyKind::kIndices, nullptr}}},
      {"slice",
       {{"shape", KeyKind::kShape, nullptr},
        {"begin", KeyKind::kIndices, nullptr},
        {"size", KeyKind::kShape, nullptr},
        {"step", KeyKind::kShape, nullptr, {}, false, true}}},
      {"concat",
       {{"axis", KeyKind::kNonNegative, nullptr}, {"inputs", KeyKind::kShapeList, nullptr}}},
      {"resize",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"oh", KeyKind::kPositive, nullptr},
        {"ow", KeyKind::kPositive, nullptr},
        {"mode", KeyKind::kChoice, "nearest", {"nearest", "linear"}},
        {"coord",
         KeyKind::kChoice,
         "half_pixel",
         {"half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"}},
        {"nearest",
         KeyKind::kChoice,
         "round_prefer_floor",
         {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}},
        {"layout", KeyKind::kLayout, "nchw", {}, true}}},
      {"reduce",
       {{"shape", KeyKind::kShape, nullptr},
        {"axes", KeyKind::kIndices, nullptr},
        {"kind", KeyKind::kChoice, "mean", {"mean", "sum", "max", "min"}}}},
      {"winograd_in",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"m", KeyKind::kChoice, "4", {"2", "4"}},
        {"pad", KeyKind::kPads, "1"},
        {"layout", KeyKind::kLayout, nullptr}}},
      {"winograd_out",
       {{"n", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"oh", KeyKind::kPositive, nullptr},
        {"ow", KeyKind::kPositive, nullptr},
        {"m", KeyKind::kChoice, "4", {"2", "4"}},
        {"layout", KeyKind::kLayout, nullptr},
        {"epilogue", KeyKind::kEpilogue, "none"}}},
  };
  return *defs;
}

const OpDef* FindOp(const std::string& name) {
  for (const OpDef& def : OpDefs()) {
    if (name == def.name) return &def;
  }
  return nullptr;
}

const KeyDef* FindKey(const OpDef& op, const std::string& key) {
  for (const KeyDef& k : op.keys) {
    if (key == k.name) return &k;
  }
  return nullptr;
}

std::string ExpectedKeys(const OpDef& op) {
  std::vector<std::string> names;
  for (const KeyDef& k : op.keys) names.push_back(k.name);
  names.push_back("dtype");
  return absl::StrJoin(names, ", ");
}

// Strict non-negative decimal integer (digits only, at most 18 of them).
bool ParseUnsigned(absl::string_view text, int64_t* v) {
  bool digits = !text.empty() && text.size() <= 18;
  for (char ch : text) digits = digits && ch >= '0' && ch <= '9';
  return digits && absl::SimpleAtoi(text, v);
}

// Parses "AxBx..." of non-negative integers (positive when `positive`), each within
// kMaxExtent, with `min_rank`..`max_rank` entries. False on anything else.
bool ParseDimsText(absl::string_view text, bool positive, size_t min_rank, size_t max_rank,
                   std::vector<int64_t>* out) {
  out->clear();
  for (absl::string_view part : absl::StrSplit(text, 'x')) {
    int64_t v = 0;
    if (!ParseUnsigned(part, &v) || (positive && v == 0) || v > kMaxExtent) return false;
    out->push_back(v);
  }
  return out->size() >= min_rank && out->size() <= max_rank;
}

// Validates one value and returns its canonical text.
absl::StatusOr<std::string> CanonicalValue(const OpDef& op, const KeyDef& key,
                                           const std::string& value) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("key '", key.name, "' of ", op.name, " must be ",
                                                   what, ", got '", value, "'"));
  };
  std::vector<int64_t> dims;
  switch (key.kind) {
    case KeyKind::kPositive:
    case KeyKind::kNonNegative: {
      const bool positive = key.kind == KeyKind::kPositive;
      const char* what = positive ? "a positive integer" : "a non-negative integer";
      int64_t v = 0;
      if (!ParseUnsigned(value, &v) || (positive && v == 0)) return bad(what);
      if (v > kMaxExtent) {
        return absl::InvalidArgumentError(absl::StrCat("key '", key.name, "' of ", op.name, " is ",
                                                       v, ", above the limit ", kMaxExtent));
      }
      return absl::StrCat(v);
    }
    case KeyKind::kPair:
      if (!ParseDimsText(value, true, 1, 2, &dims)) {
        return bad("a positive integer (or HxW) of at most " + std::to_string(kMaxExtent));
      }
      if (dims.size() == 2 && dims[0] == dims[1]) dims.resize(1);
      return absl::StrJoin(dims, "x");
    case KeyKind::kPads:
      if (!ParseDimsText(value, false, 1, 4, &dims) || dims.size() == 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key '", key.name, "' of ", op.name, " must be a non-negative integer, got '", value,
            "' (or HxW, TxLxBxR: top, left, bottom, right)"));
      }
      if (dims.size() == 2) dims = {dims[0], dims[1], dims[0], dims[1]};
      if (dims.size() == 4 && dims[0] == dims[2] && dims[1] == dims[3]) dims.resize(2);
      if (dims.size() == 2 && dims[0] == dims[1]) dims.resize(1);
      return absl::StrJoin(dims, "x");
    case KeyKind::kShape:
      if (!ParseDimsText(value, true, 1, 8, &dims)) {
        return bad("a shape of 1 to 8 positive extents joined by 'x' (e.g. 1x3x224x224)");
      }
      return absl::StrJoin(dims, "x");
    case KeyKind::kIndices:
      if (!ParseDimsText(value, false, 1, 8, &dims)) {
        return bad("1 to 8 non-negative integers joined by 'x'");
      }
      return absl::StrJoin(dims, "x");
    case KeyKind::kShapeList: {
      std::vector<std::string> parts;
      for (absl::string_view part : absl::StrSplit(value, '+')) {
        if (!ParseDimsText(part, true, 1, 8, &dims)) {
          return bad("shapes joined by '+' (e.g. 1x8x4x4+1x16x4x4)");
        }
        parts.push_back(absl::StrJoin(dims, "x"));
      }
      if (parts.size() > 64) return bad("at most 64 shapes");
      return absl::StrJoin(parts, "+");
    }
    case KeyKind::kEpilogue: {
      absl::StatusOr<EpilogueExpr> e = ParseEpilogueExpr(value);
      if (!e.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("key '", key.name, "' of ", op.name, ": ", e.status().message()));
      }
      return e->ToString();
    }
    case KeyKind::kChoice:
      for (const std::string& c : key.choices) {
        if (value == c) return value;
      }
      return bad("one of " + absl::StrJoin(key.choices, ", "));
    case KeyKind::kLayout: {
      absl::StatusOr<int64_t> block = internal::LayoutBlock(value);
      if (!block.ok()) return bad("nchw, nhwc or nchw{x}c with a block x of 1..1024");
      return *block > 0 ? absl::StrCat("nchw", *block, "c") : value;
    }
    case KeyKind::kPositiveFloat: {
      double v = 0;
      if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key '", key.name, "' of ", op.name, " must be a positive number, got '", value, "'"));
      }
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.9g", v);
      return std::string(buf);
    }
  }
  return absl::InternalError("unhandled key kind");
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Rejects any tensor (arguments and intermediates) above kMaxElements.
absl::Status CheckSizes(const std::string& op,
                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
  for (const auto& [name, shape] : shapes) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    if (n > kMaxElements) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": tensor ", name, " of shape ", ShapeString(shape), " has more than ",
                       static_cast<int64_t>(kMaxElements), " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status Invalid(const std::string& op, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", msg));
}

// Output extents of a window: "(h=.., r=.., pad=.., dilation=.., stride=..)" for messages.
std::string WindowText(const WorkloadSpec& spec, const char* extent, int64_t e, const char* win,
                       int64_t r) {
  std::string out = absl::StrCat("(", extent, "=", e, ", ", win, "=", r, ", pad=", spec.Str("pad"));
  if (spec.params.count("dilation")) absl::StrAppend(&out, ", dilation=", spec.Str("dilation"));
  absl::StrAppend(&out, ", stride=", spec.Str("stride"), ")");
  return out;
}

// Shape checks of the elementwise and data-movement ops.
absl::Status ValidateDataShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  if (op == "ewise") {
    if (spec.params.count("b") != spec.params.count("binary")) {
      return Invalid(op, "keys 'b' and 'binary' go together");
    }
    absl::StatusOr<EwiseParams> p = GetEwiseParams(spec);
    if (!p.ok()) return p.status();
    const size_t rank = std::max(p->a.size(), p->b.size());
    for (size_t i = 0; i < rank && !p->b.empty(); ++i) {
      const int64_t da = i < rank - p->a.size() ? 1 : p->a[i - (rank - p->a.size())];
      const int64_t db = i < rank - p->b.size() ? 1 : p->b[i - (rank - p->b.size())];
      if (da != db && da != 1 && db != 1) {
        return Invalid(op, absl::StrCat("shapes a=", spec.Str("a"), " and b=", spec.Str("b"),
                                        " do not broadcast"));
      }
    }
    return CheckSizes(op, {{"Y", p->out_shape()}});
  }
  if (op == "transpose") {
    absl::StatusOr<TransposeParams> p = GetTransposeParams(spec);
    if (!p.ok()) return p.status();
    std::vector<int64_t> sorted = p->perm;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted.size() != p->shape.size() || sorted[i] != static_cast<int64_t>(i)) {
        return Invalid(op, absl::StrCat("perm=", spec.Str("perm"), " is not a permutation of the ",
                                        p->shape.size(), " dimensions"));
      }
    }
    return CheckSizes(op, {{"X", p->shape}});
  }
  if (op == "slice") {
    absl::StatusOr<SliceParams> p = GetSliceParams(spec);
    if (!p.ok()) return p.status();
    const size_t rank = p->shape.size();
    if (p->begin.size() != rank || p->size.size() != rank || p->step.size() != rank) {
      return Invalid(op, "begin, size and step need one entry per dimension of shape");
    }
    for (size_t d = 0; d < rank; ++d) {
      if (p->begin[d] + (p->size[d] - 1) * p->step[d] >= p->shape[d]) {
        return Invalid(op,
                       absl::StrCat("dimension ", d, ": begin ", p->begin[d], ", size ", p->size[d],
                                    ", step ", p->step[d], " reads past the extent ", p->shape[d]));
      }
    }
    return CheckSizes(op, {{"X", p->shape}});
  }
  if (op == "concat") {
    absl::StatusOr<ConcatParams> p = GetConcatParams(spec);
    if (!p.ok()) return p.status();
    const auto& first = p->inputs.front();
    if (p->axis >= static_cast<int64_t>(first.size())) {
      return Invalid(op, absl::StrCat("axis ", p->axis, " is not below the rank ", first.size()));
    }
    for (const auto& in : p->inputs) {
      bool ok = in.size() == first.size();
      for (size_t d = 0; ok && d < in.size(); ++d) {
        ok = static_cast<int64_t>(d) == p->axis || in[d] == first[d];
      }
      if (!ok) {
        return Invalid(
            op, absl::StrCat("inputs ", spec.Str("inputs"), " differ outside the axis ", p->axis));
      }
    }
    return CheckSizes(op, {{"Y", p->out_shape()}});
  }
  if (op == "resize") {
    absl::StatusOr<ResizeParams> p = GetResizeParams(spec);
    if (!p.ok()) return p.status();
    const auto layout = spec.params.find("layout");
    if (p->block > 0) {
      if (p->c % p->block != 0) {
        return Invalid(op, absl::StrCat("c=", p->c, " is not a multiple of the block ", p->block,
                                        " of layout ", layout->second));
      }
    } else if (layout != spec.params.end() && layout->second == "nhwc") {
      return Invalid(op, "layout nhwc is not supported (nchw or nchw{x}c)");
    }
    return CheckSizes(op, {{"X", {p->n, p->c, p->h, p->w}}, {"Y", {p->n, p->c, p->oh, p->ow}}});
  }
  if (op == "winograd_in" || op == "winograd_out") {
    absl::StatusOr<WinogradParams> p = GetWinogradParams(spec);
    if (!p.ok()) return p.status();
    const char* chan = p->output_side ? "k" : "c";
    if (p->block <= 0) {
      return Invalid(op, absl::StrCat("layout ", spec.Str("layout"), " is not blocked (nchw{x}c)"));
    }
    if (p->c % p->block != 0) {
      return Invalid(op, absl::StrCat(chan, "=", p->c, " is not a multiple of the block ", p->block,
                                      " of layout ", spec.Str("layout")));
    }
    if (p->oh() < 1 || p->ow() < 1 || p->oh() % p->m != 0 || p->ow() % p->m != 0) {
      return Invalid(op, absl::StrCat("output ", p->oh(), "x", p->ow(),
                                      " is not a whole number of ", p->m, "x", p->m, " tiles"));
    }
    const int64_t t = p->t();
    return CheckSizes(op, {{"V", {t * t, p->tiles(), p->c}}});
  }
  if (op == "reduce") {
    absl::StatusOr<ReduceParams> p = GetReduceParams(spec);
    if (!p.ok()) return p.status();
    for (size_t i = 0; i < p->axes.size(); ++i) {
      if (p->axes[i] >= static_cast<int64_t>(p->shape.size()) ||
          (i > 0 && p->axes[i] <= p->axes[i - 1])) {
        return Invalid(
            op, absl::StrCat("axes=", spec.Str("axes"), " must be increasing dimensions of shape"));
      }
    }
    return CheckSizes(op, {{"X", p->shape}});
  }
  return absl::OkStatus();
}

// Shape checks that need several keys at once.
absl::Status ValidateShapes(const WorkloadSpec& spec) {
  if (spec.op == "matmul" || spec.op == "batch_matmul") {
    absl::StatusOr<MatmulParams> p = GetMatmulParams(spec);
    if (!p.ok()) return p.status();
    std::vector<int64_t> lead =
        p->batch > 0 ? std::vector<int64_t>{p->batch} : std::vector<int64_t>{};
    auto with = [&](int64_t a, int64_t b) {
      std::vector<int64_t> s = lead;
      s.push_back(a);
      s.push_back(b);
      return s;
    };
    return CheckSizes(spec.op,
                      {{"A", with(p->m, p->k)}, {"B", with(p->k, p->n)}, {"C", with(p->m, p->n)}});
  }
  if (spec.op == "conv2d" || spec.op == "conv2d_transpose") {
    const std::string& op = spec.op;
    const bool transposed = op == "conv2d_transpose";
    Conv2dParams p;
    ConvTransposeParams t;
    int64_t oh = 0, ow = 0;
    if (transposed) {
      absl::StatusOr<ConvTransposeParams> q = GetConvTransposeParams(spec);
      if (!q.ok()) return q.status();
      t = *q;
      static_cast<Window2d&>(p) = t;
      p.n = t.n, p.c = t.c, p.h = t.h, p.w = t.w, p.k = t.k, p.r = t.r, p.s = t.s;
      p.groups = t.groups;
      oh = t.oh(), ow = t.ow();
    } else {
      absl::StatusOr<Conv2dParams> q = GetConv2dParams(spec);
      if (!q.ok()) return q.status();
      p = *q;
      oh = p.oh(), ow = p.ow();
    }
    if (p.c % p.groups != 0) {
      return Invalid(op, absl::StrCat("c=", p.c, " is not divisible by groups=", p.groups));
    }
    if (p.k % p.groups != 0) {
      return Invalid(op, absl::StrCat("k=", p.k, " is not divisible by groups=", p.groups));
    }
    if (transposed) {
      if (t.output_padding_h >= t.stride_h && t.output_padding_h >= t.dilation_h) {
        return Invalid(op, "output_padding must be smaller than the stride or the dilation");
      }
      if (oh <= 0 || ow <= 0) {
        return Invalid(op, absl::StrCat("output extents ", oh, "x", ow, " are not positive"));
      }
      return CheckSizes(op, {{"X", {p.n, p.c, p.h, p.w}},
                             {"W", {p.c, p.k / p.groups, p.r, p.s}},
                             {"Y", {p.n, p.k, oh, ow}}});
    }
    // Checked on the numerator: C++ division truncates towards zero.
    if (p.h + p.pad_t + p.pad_b - p.dilation_h * (p.r - 1) - 1 < 0) {
      return Invalid(op, "output height is not positive " + WindowText(spec, "h", p.h, "r", p.r));
    }
    if (p.w + p.pad_l + p.pad_r - p.dilation_w * (p.s - 1) - 1 < 0) {
      return Invalid(op, "output width is not positive " + WindowText(spec, "w", p.w, "s", p.s));
    }
    const int64_t ph = p.h + p.pad_t + p.pad_b, pw = p.w + p.pad_l + p.pad_r;
    const int64_t cpg = p.c / p.groups;
    if (p.blocked()) {
      const int64_t x = p.cblock, y = p.kblock;
      const std::string layout = spec.Str("layout");
      if (p.c % x != 0) {
        return Invalid(op,
                       absl::StrCat("c=", p.c, " is not a multiple of the block ", x, " of layout ",
                                    layout, "; choose a block that divides the channels"));
      }
      if (p.k % y != 0) {
        return Invalid(op, absl::StrCat("k=", p.k, " is not a multiple of the output block ", y,
                                        "; choose a kblock that divides the output channels"));
      }
      if (p.groups > 1 && !(p.depthwise() && x == y)) {
        return Invalid(op, absl::StrCat("groups=", p.groups, " in layout ", layout,
                                        ": a blocked grouped convolution must be depthwise "
                                        "(groups = c = k) with kblock equal to the block"));
      }
      if (p.depthwise()) {
        return CheckSizes(op, {{"X", {p.n, p.c / x, p.h, p.w, x}},
                               {"pad", {p.n, p.c / x, ph, pw, x}},
                               {"W", {p.k / y, p.r, p.s, y}},
                               {"Y", {p.n, p.k / y, oh, ow, y}}});
      }
      return CheckSizes(op, {{"X", {p.n, p.c / x, p.h, p.w, x}},
                             {"pad", {p.n, p.c / x, ph, pw, x}},
                             {"W", {p.k / y, p.c / x, p.r, p.s, x, y}},
                             {"Y", {p.n, p.k / y, oh, ow, y}}});
    }
    if (p.nhwc) {
      return CheckSizes(op, {{"X", {p.n, p.h, p.w, p.c}},
                             {"pad", {p.n, ph, pw, p.c}},
                             {"W", {p.r, p.s, cpg, p.k}},
                             {"Y", {p.n, oh, ow, p.k}}});
    }
    return CheckSizes(op, {{"X", {p.n, p.c, p.h, p.w}},
                           {"pad", {p.n, p.c, ph, pw}},
                           {"W", {p.k, cpg, p.r, p.s}},
                           {"Y", {p.n, p.k, oh, ow}}});
  }
  if (spec.op == "pool2d") {
    absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
    if (!p.ok()) return p.status();
    // Every window then overlaps the input, so a max pool never yields -inf.
    if (std::max(p->pad_t, p->pad_b) >= p->r || std::max(p->pad_l, p->pad_r) >= p->s) {
      return absl::InvalidArgumentError(absl::StrCat("pool2d: pad=", spec.Str("pad"),
                                                     " must be smaller than the window (r=", p->r,
                                                     ", s=", p->s, ")"));
    }
    if (p->h + p->pad_t + p->pad_b < p->r) {
      return Invalid("pool2d",
                     "output height is not positive " + WindowText(spec, "h", p->h, "r", p->r));
    }
    if (p->w + p->pad_l + p->pad_r < p->s) {
      return Invalid("pool2d",
                     "output width is not positive " + WindowText(spec, "w", p->w, "s", p->s));
    }
    const int64_t ph = p->h + p->pad_t + p->pad_b, pw = p->w + p->pad_l + p->pad_r;
    if (p->block > 0) {
      if (p->c % p->block != 0) {
        return Invalid("pool2d", absl::StrCat("c=", p->c, " is not a multiple of the block ",
                                              p->block, " of layout ", spec.Str("layout")));
      }
      const int64_t b = p->block;
      return CheckSizes("pool2d", {{"X", {p->n, p->c / b, p->h, p->w, b}},
                                   {"pad", {p->n, p->c / b, ph, pw, b}},
                                   {"Y", {p->n, p->c / b, p->oh(), p->ow(), b}}});
    }
    if (p->nhwc) {
      return CheckSizes("pool2d", {{"X", {p->n, p->h, p->w, p->c}},
                                   {"pad", {p->n, ph, pw, p->c}},
                                   {"Y", {p->n, p->oh(), p->ow(), p->c}}});
    }
    return CheckSizes("pool2d", {{"X", {p->n, p->c, p->h, p->w}},
                                 {"pad", {p->n, p->c, ph, pw}},
                                 {"Y", {p->n, p->c, p->oh(), p->ow()}}});
  }
  if (spec.op == "softmax") {
    absl::StatusOr<SoftmaxParams> p = GetSoftmaxParams(spec);
    if (!p.ok()) return p.status();
    return CheckSizes(spec.op, {{"X", {p->m, p->n, p->inner}}});
  }
  if (spec.op == "layer_norm") {
    return CheckSizes(spec.op, {{"X", {spec.Int("m"), spec.Int("n")}}});
  }
  return ValidateDataShapes(spec);
}

[[noreturn]] void Fatal(const std::string& message) {
  std::fprintf(stderr, "lathe: internal error: %s\n", message.c_str());
  std::abort();
}

}  // namespace

int64_t WorkloadSpec::Int(const std::string& key) const {
  int64_t v = 0;
  if (!absl::SimpleAtoi(Str(key), &v)) {
    Fatal(absl::StrCat("key '", key, "' of ", op, " is not an integer: '", Str(key), "'"));
  }
  return v;
}

const std::string& WorkloadSpec::Str(const std::string& key) const {
  auto it = params.find(key);
  if (it == params.end()) Fatal(absl::StrCat("missing key '", key, "' for ", op));
  return it->second;
}

std::string WorkloadSpec::ToString() const {
  std::string out = absl::StrCat(op, ":");
  bool first = true;
  for (const auto& [key, value] : params) {  // std::map: sorted by key
    absl::StrAppend(&out, first ? "" : ",", key, "=", value);
    first = false;
  }
  return out;
}

absl::StatusOr<WorkloadSpec> ParseWorkloadSpec(const std::string& text) {
  if (text.empty()) return absl::InvalidArgumentError("empty workload spec");
  for (char ch : text) {
    if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f') {
      return absl::InvalidArgumentError(
          absl::StrCat("workload spec '", text, "' contains whitespace"));
    }
  }
  const size_t colon = text.find(':');
  WorkloadSpec spec;
  spec.op = text.substr(0, colon);
  const OpDef* op = FindOp(spec.op);
  if (op == nullptr) {
    std::vector<std::string> names;
    for (const OpDef& def : OpDefs()) names.push_back(def.name);
    return absl::InvalidArgumentError(absl::StrCat("unknown op '", spec.op, "' (expected one of ",
                                                   absl::StrJoin(names, ", "), ")"));
  }

  if (colon != std::string::npos) {
    const std::string rest = text.substr(colon + 1);
    for (absl::string_view entry : absl::StrSplit(rest, ',')) {
      if (entry.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("empty entry in workload spec '", text, "'"));
      }
      const size_t eq = entry.find('=');
      if (eq == absl::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat("malformed entry '", entry, "' for op ",
                                                       op->name, " (expected key=value)"));
      }
      const std::string key(entry.substr(0, eq));
      const std::string value(entry.substr(eq + 1));
      if (key.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("malformed entry '", entry, "' for op ", op->name, " (empty key)"));
      }
      if (key == "dtype") {
        if (value.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("empty value for key 'dtype' of ", op->name));
        }
        if (value != "float32") {
          return absl::InvalidArgumentError(absl::StrCat("unsupported dtype '", value, "' for op ",
                                                         op->name, " (only float32 is supported)"));
        }
        if (spec.params.count("dtype") != 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("duplicate key 'dtype' for op ", op->name));
        }
        spec.params["dtype"] = value;  // dropped below: float32 is implied
        continue;
      }
      const KeyDef* def = FindKey(*op, key);
      if (def == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "' for op ", op->name,
                                                       " (expected one of ", ExpectedKeys(*op),
                                                       ")"));
      }
      if (spec.params.count(key) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate key '", key, "' for op ", op->name));
      }
      if (value.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("empty value for key '", key, "' of ", op->name));
      }
      absl::StatusOr<std::string> canonical = CanonicalValue(*op, *def, value);
      if (!canonical.ok()) return canonical.status();
      spec.params[key] = *std::move(canonical);
    }
  }
  spec.params.erase("dtype");

  for (const KeyDef& def : op->keys) {
    auto it = spec.params.find(def.name);
    if (it != spec.params.end()) {
      if (def.omit_default && it->second == def.default_value) spec.params.erase(it);
      continue;
    }
    if (def.optional || def.omit_default) continue;
    if (def.default_value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing key '", def.name, "' for ", op->name));
    }
    spec.params[def.name] = def.default_value;
  }
  // A blocked conv's kblock equal to its layout's block is its default: one canonical form.
  if (auto kb = spec.params.find("kblock"); kb != spec.params.end() && spec.op == "conv2d") {
    auto layout = spec.params.find("layout");
    absl::StatusOr<int64_t> block = layout == spec.params.end()
                                        ? absl::StatusOr<int64_t>(0)
                                        : internal::LayoutBlock(layout->second);
    if (block.ok() && *block > 0 && kb->second == absl::StrCat(*block)) spec.params.erase(kb);
  }
  if (absl::Status s = ValidateShapes(spec); !s.ok()) return s;
  return spec;
}

const Tensor* Workload::Find(const std::string& name) const {
  for (const Tensor& t : tensors) {
    if (t->name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<Workload> MakeWorkload(const WorkloadSpec& spec) {
  // Re-validated so that hand-built specs get the same checks and canonical form.
  absl::StatusOr<WorkloadSpec> canonical = ParseWorkloadSpec(spec.ToString());
  if (!canonical.ok()) return canonical.status();
  absl::StatusOr<OpDefinition> def = BuildOp(*canonical);
  if (!def.ok()) return def.status();
  Workload w;
  w.spec = *std::move(canonical);
  w.canonical = w.spec.ToString();
  w.key = WorkloadKey(w.canonical);
  w.args = std::move(def->args);
  w.tensors = std::move(def->tensors);
  w.flops = def->flops;
  return w;
}

absl::StatusOr<Workload> MakeWorkload(const std::string& spec_text) {
  absl::StatusOr<WorkloadSpec> spec = ParseWorkloadSpec(spec_text);
  if (!spec.ok()) return spec.status();
  return MakeWorkload(*spec);
}

std::string WorkloadKey(const std::string& canonical) { return Fnv1a64Hex(canonical); }

std::string Fnv1a64Hex(std::string_view bytes) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char ch : bytes) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf);
}

}  // namespace lathe::ir
