#include "ir/workload.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/ops.h"

namespace lathe::ir {
namespace {

// Limits that keep hostile specs from allocating terabytes or overflowing index arithmetic.
constexpr int64_t kMaxExtent = int64_t{1} << 20;
constexpr double kMaxElements = 2147483648.0;  // 2^31 per tensor, intermediates included

enum class KeyKind : uint8_t { kPositive, kNonNegative, kChoice, kPositiveFloat };

struct KeyDef {
  const char* name;
  KeyKind kind;
  const char* default_value;  // nullptr: required
  std::vector<std::string> choices = {};
};

struct OpDef {
  const char* name;
  std::vector<KeyDef> keys;  // in the order they are listed in messages
};

const std::vector<std::string> kEpilogues = {"none", "bias", "relu", "bias_relu"};
const std::vector<std::string> kLayouts = {"nchw", "nhwc"};

const std::vector<OpDef>& OpDefs() {
  static const std::vector<OpDef>* defs = new std::vector<OpDef>{
      {"matmul",
       {{"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"epilogue", KeyKind::kChoice, "none", kEpilogues}}},
      {"batch_matmul",
       {{"b", KeyKind::kPositive, nullptr},
        {"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"epilogue", KeyKind::kChoice, "none", kEpilogues}}},
      {"conv2d",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"k", KeyKind::kPositive, nullptr},
        {"r", KeyKind::kPositive, nullptr},
        {"s", KeyKind::kPositive, nullptr},
        {"stride", KeyKind::kPositive, "1"},
        {"pad", KeyKind::kNonNegative, "0"},
        {"dilation", KeyKind::kPositive, "1"},
        {"groups", KeyKind::kPositive, "1"},
        {"layout", KeyKind::kChoice, "nchw", kLayouts},
        {"epilogue", KeyKind::kChoice, "none", kEpilogues}}},
      {"pool2d",
       {{"n", KeyKind::kPositive, nullptr},
        {"c", KeyKind::kPositive, nullptr},
        {"h", KeyKind::kPositive, nullptr},
        {"w", KeyKind::kPositive, nullptr},
        {"r", KeyKind::kPositive, nullptr},
        {"s", KeyKind::kPositive, nullptr},
        {"stride", KeyKind::kPositive, "1"},
        {"pad", KeyKind::kNonNegative, "0"},
        {"kind", KeyKind::kChoice, "max", {"max", "avg"}},
        {"layout", KeyKind::kChoice, "nchw", kLayouts}}},
      {"softmax", {{"m", KeyKind::kPositive, nullptr}, {"n", KeyKind::kPositive, nullptr}}},
      {"layer_norm",
       {{"m", KeyKind::kPositive, nullptr},
        {"n", KeyKind::kPositive, nullptr},
        {"eps", KeyKind::kPositiveFloat, "1e-05"}}},
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

// Validates one value and returns its canonical text.
absl::StatusOr<std::string> CanonicalValue(const OpDef& op, const KeyDef& key,
                                           const std::string& value) {
  switch (key.kind) {
    case KeyKind::kPositive:
    case KeyKind::kNonNegative: {
      const bool positive = key.kind == KeyKind::kPositive;
      const char* what = positive ? "a positive integer" : "a non-negative integer";
      bool digits = !value.empty() && value.size() <= 18;
      for (char ch : value) digits = digits && ch >= '0' && ch <= '9';
      int64_t v = 0;
      if (!digits || !absl::SimpleAtoi(value, &v) || (positive && v == 0)) {
        return absl::InvalidArgumentError(absl::StrCat("key '", key.name, "' of ", op.name,
                                                       " must be ", what, ", got '", value, "'"));
      }
      if (v > kMaxExtent) {
        return absl::InvalidArgumentError(absl::StrCat("key '", key.name, "' of ", op.name, " is ",
                                                       v, ", above the limit ", kMaxExtent));
      }
      return absl::StrCat(v);
    }
    case KeyKind::kChoice:
      for (const std::string& c : key.choices) {
        if (value == c) return value;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("key '", key.name, "' of ", op.name, " must be one of ",
                       absl::StrJoin(key.choices, ", "), ", got '", value, "'"));
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
  if (spec.op == "conv2d") {
    absl::StatusOr<Conv2dParams> p = GetConv2dParams(spec);
    if (!p.ok()) return p.status();
    if (p->c % p->groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv2d: c=", p->c, " is not divisible by groups=", p->groups));
    }
    if (p->k % p->groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv2d: k=", p->k, " is not divisible by groups=", p->groups));
    }
    // Checked on the numerator: C++ division truncates towards zero.
    if (p->h + 2 * p->pad - p->dilation * (p->r - 1) - 1 < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv2d: output height is not positive (h=", p->h, ", r=", p->r,
                       ", pad=", p->pad, ", dilation=", p->dilation, ", stride=", p->stride, ")"));
    }
    if (p->w + 2 * p->pad - p->dilation * (p->s - 1) - 1 < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("conv2d: output width is not positive (w=", p->w, ", s=", p->s,
                       ", pad=", p->pad, ", dilation=", p->dilation, ", stride=", p->stride, ")"));
    }
    const int64_t ph = p->h + 2 * p->pad, pw = p->w + 2 * p->pad;
    const int64_t cpg = p->c / p->groups;
    if (p->nhwc) {
      return CheckSizes("conv2d", {{"X", {p->n, p->h, p->w, p->c}},
                                   {"pad", {p->n, ph, pw, p->c}},
                                   {"W", {p->r, p->s, cpg, p->k}},
                                   {"Y", {p->n, p->oh(), p->ow(), p->k}}});
    }
    return CheckSizes("conv2d", {{"X", {p->n, p->c, p->h, p->w}},
                                 {"pad", {p->n, p->c, ph, pw}},
                                 {"W", {p->k, cpg, p->r, p->s}},
                                 {"Y", {p->n, p->k, p->oh(), p->ow()}}});
  }
  if (spec.op == "pool2d") {
    absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
    if (!p.ok()) return p.status();
    // Every window then overlaps the input, so a max pool never yields -inf.
    if (p->pad >= p->r || p->pad >= p->s) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pool2d: pad=", p->pad, " must be smaller than the window (r=", p->r, ", s=", p->s, ")"));
    }
    if (p->h + 2 * p->pad < p->r) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool2d: output height is not positive (h=", p->h, ", r=", p->r,
                       ", pad=", p->pad, ", stride=", p->stride, ")"));
    }
    if (p->w + 2 * p->pad < p->s) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool2d: output width is not positive (w=", p->w, ", s=", p->s,
                       ", pad=", p->pad, ", stride=", p->stride, ")"));
    }
    const int64_t ph = p->h + 2 * p->pad, pw = p->w + 2 * p->pad;
    if (p->nhwc) {
      return CheckSizes("pool2d", {{"X", {p->n, p->h, p->w, p->c}},
                                   {"pad", {p->n, ph, pw, p->c}},
                                   {"Y", {p->n, p->oh(), p->ow(), p->c}}});
    }
    return CheckSizes("pool2d", {{"X", {p->n, p->c, p->h, p->w}},
                                 {"pad", {p->n, p->c, ph, pw}},
                                 {"Y", {p->n, p->c, p->oh(), p->ow()}}});
  }
  if (spec.op == "softmax" || spec.op == "layer_norm") {
    return CheckSizes(spec.op, {{"X", {spec.Int("m"), spec.Int("n")}}});
  }
  return absl::OkStatus();
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
    if (spec.params.count(def.name) != 0) continue;
    if (def.default_value == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("missing key '", def.name, "' for ", op->name));
    }
    spec.params[def.name] = def.default_value;
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
