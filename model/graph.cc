#include "model/graph.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lathe::model {

int64_t ConstData::SaturatingInt64(double v) {
  if (std::isnan(v)) return 0;
  // 2^63 is exactly representable; every double below it converts without overflow.
  if (v >= 9223372036854775808.0) return std::numeric_limits<int64_t>::max();
  if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

int64_t Node::Int(const std::string& key, int64_t fallback) const {
  const Attr* a = attr(key);
  return a && a->kind == Attr::kInt ? a->i : fallback;
}

float Node::Float(const std::string& key, float fallback) const {
  const Attr* a = attr(key);
  if (a && a->kind == Attr::kFloat) return a->f;
  if (a && a->kind == Attr::kInt) return static_cast<float>(a->i);
  return fallback;
}

std::string Node::Str(const std::string& key, const std::string& fallback) const {
  const Attr* a = attr(key);
  return a && a->kind == Attr::kString ? a->s : fallback;
}

std::vector<int64_t> Node::Ints(const std::string& key, std::vector<int64_t> fallback) const {
  const Attr* a = attr(key);
  return a && a->kind == Attr::kInts ? a->ints : fallback;
}

Value* Graph::Find(const std::string& name) {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

const Value* Graph::Find(const std::string& name) const {
  auto it = values.find(name);
  return it == values.end() ? nullptr : &it->second;
}

const ConstData* Graph::Const(const std::string& name) const {
  const Value* v = Find(name);
  return v && v->constant ? &*v->constant : nullptr;
}

std::string Graph::AddConst(const std::string& hint, std::vector<int64_t> shape, ConstData data) {
  std::string name = hint;
  for (int k = 1; values.count(name); ++k) name = absl::StrCat(hint, ".", k);
  Value v;
  v.name = name;
  v.shape = std::move(shape);
  v.is_int = data.is_int;
  v.constant = std::move(data);
  values[name] = std::move(v);
  return name;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  // An empty extent makes the product 0 however large the others are (a hostile model's
  // [0, 2^62] overflowed on the way, found by fuzz_onnx_import); otherwise the product
  // saturates at INT64_MAX, above every cap its callers check it against.
  // CheckedNumElements is the form that says why.
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

absl::StatusOr<int64_t> CheckedNumElements(const std::vector<int64_t>& shape) {
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeText(shape), " has a negative extent"));
    }
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    // n <= kMaxTensorElements here, so the test cannot overflow.
    if (d > kMaxTensorElements / n) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeText(shape), " has more than ", kMaxTensorElements,
                       " (2^31) elements, the most lathe accepts in one tensor"));
    }
    n *= d;
  }
  return n;
}

absl::Status Unsupported(const Node& node, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' (", node.op, "): ", what));
}

}  // namespace lathe::model
