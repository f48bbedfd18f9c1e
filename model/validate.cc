#include "model/validate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/fold.h"
#include "model/infer.h"

namespace lathe::model {
namespace {

// The attribute `key` when it is present: it must be a list of ints (the checker has already
// matched attribute types to the schema; a hand-built graph may not have).
absl::StatusOr<const Attr*> IntsAttr(const Node& n, const std::string& key) {
  const Attr* a = n.attr(key);
  if (a == nullptr) return a;
  if (a->kind != Attr::kInts) {
    return Unsupported(n, absl::StrCat("attribute '", key, "' must be a list of integers"));
  }
  return a;
}

// A present list attribute must have `want` values, each in [lo, hi]; `what` names one value
// in messages ("stride", "pad").
absl::Status CheckList(const Node& n, const std::string& key, size_t want, const char* what,
                       int64_t lo, int64_t hi) {
  absl::StatusOr<const Attr*> a = IntsAttr(n, key);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return absl::OkStatus();
  const std::vector<int64_t>& v = (*a)->ints;
  if (v.size() != want) {
    return Unsupported(n, absl::StrCat("attribute '", key, "' has ", v.size(), " value(s), ", want,
                                       " expected (lathe supports 2-d windows)"));
  }
  for (int64_t x : v) {
    if (x < lo) {
      return Unsupported(
          n, absl::StrCat(what, " ", x, " in attribute '", key, "' (must be >= ", lo, ")"));
    }
    if (x > hi) {
      return Unsupported(
          n, absl::StrCat(what, " ", x, " in attribute '", key, "' (must be <= ", hi, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInt(const Node& n, const std::string& key, int64_t lo, int64_t hi) {
  const Attr* a = n.attr(key);
  if (a == nullptr) return absl::OkStatus();
  if (a->kind != Attr::kInt) {
    return Unsupported(n, absl::StrCat("attribute '", key, "' must be an integer"));
  }
  if (a->i < lo || a->i > hi) {
    return Unsupported(
        n, absl::StrCat("attribute '", key, "' is ", a->i, " (must be in [", lo, ", ", hi, "])"));
  }
  return absl::OkStatus();
}

// Conv, ConvTranspose, MaxPool and AveragePool: the window attributes lathe's 2-d windows
// and libonnx's shape inference compute with.
absl::Status CheckWindow(const Node& n) {
  const bool pool = n.op == "MaxPool" || n.op == "AveragePool";
  if (absl::Status s = CheckList(n, "kernel_shape", 2, "kernel extent", 1, kMaxWindowAttr);
      !s.ok()) {
    return s;
  }
  if (pool && n.attr("kernel_shape") == nullptr) {
    return Unsupported(n, "attribute 'kernel_shape' is required");
  }
  if (absl::Status s = CheckList(n, "strides", 2, "stride", 1, kMaxWindowAttr); !s.ok()) return s;
  if (absl::Status s = CheckList(n, "dilations", 2, "dilation", 1, kMaxWindowAttr); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckList(n, "pads", 4, "pad", 0, kMaxWindowAttr); !s.ok()) return s;
  if (!pool) {
    if (absl::Status s = CheckInt(n, "group", 1, kMaxTensorElements); !s.ok()) return s;
  }
  if (n.op == "ConvTranspose") {
    if (absl::Status s = CheckList(n, "output_padding", 2, "output padding", 0, kMaxWindowAttr);
        !s.ok()) {
      return s;
    }
    // ONNX: each output padding is smaller than the stride or the dilation of its axis.
    const std::vector<int64_t> op_pad = n.Ints("output_padding", {0, 0});
    const std::vector<int64_t> strides = n.Ints("strides", {1, 1});
    const std::vector<int64_t> dil = n.Ints("dilations", {1, 1});
    for (int a = 0; a < 2; ++a) {
      if (op_pad[a] >= std::max(strides[a], dil[a])) {
        return Unsupported(n, absl::StrCat("output padding ", op_pad[a],
                                           " in attribute "
                                           "'output_padding' (must be smaller than the stride ",
                                           strides[a], " or the dilation ", dil[a], ")"));
      }
    }
    if (absl::Status s = CheckList(n, "output_shape", 2, "output extent", 1, kMaxTensorElements);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A list of axes (or a perm) must not name one axis twice; `perm` must also hold exactly
// 0..size-1.
absl::Status CheckAxes(const Node& n, const std::string& key, bool perm) {
  absl::StatusOr<const Attr*> a = IntsAttr(n, key);
  if (!a.ok()) return a.status();
  if (*a == nullptr) return absl::OkStatus();
  const std::vector<int64_t>& v = (*a)->ints;
  std::set<int64_t> seen;
  for (int64_t x : v) {
    if (perm && (x < 0 || x >= static_cast<int64_t>(v.size()))) {
      return Unsupported(n, absl::StrCat("perm value ", x, " is outside [0, ", v.size(),
                                         ") (perm must be a permutation of the axes)"));
    }
    if (!seen.insert(x).second) {
      return Unsupported(n, absl::StrCat("axis ", x, " appears twice in attribute '", key, "'"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateNode(const Node& n) {
  const std::string& op = n.op;
  if (!IsInferredOp(op) && !IsFoldableOp(op)) {
    return Unsupported(n, "operator " + op + " is not supported");
  }
  if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" || op == "AveragePool") {
    return CheckWindow(n);
  }
  if (op == "Transpose") return CheckAxes(n, "perm", /*perm=*/true);
  if (op == "Squeeze" || op == "Unsqueeze" || op == "ReduceMean" || op == "ReduceSum" ||
      op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
    return CheckAxes(n, "axes", /*perm=*/false);
  }
  if (op == "Split") {
    absl::StatusOr<const Attr*> a = IntsAttr(n, "split");
    if (!a.ok()) return a.status();
    for (int64_t s : *a ? (*a)->ints : std::vector<int64_t>{}) {
      if (s < 0) {
        return Unsupported(n,
                           absl::StrCat("split size ", s, " in attribute 'split' (must be >= 0)"));
      }
    }
    if (n.outputs.empty()) return Unsupported(n, "has no outputs");
    return absl::OkStatus();
  }
  if (op == "LRN") return CheckInt(n, "size", 1, kMaxWindowAttr);
  if (op == "Upsample") {
    if (const Attr* a = n.attr("scales")) {
      for (float s : a->floats) {
        if (!std::isfinite(s) || s <= 0 || s > kMaxWindowAttr) {
          return Unsupported(n, absl::StrCat("scale ", s, " in attribute 'scales' (must be in (0, ",
                                             kMaxWindowAttr, "])"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNodes(const Graph& g) {
  for (const Node& n : g.nodes) {
    if (absl::Status s = ValidateNode(n); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace lathe::model
