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
#include "ir/op_registry.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir {
namespace {

std::string ExpectedKeys(const OpInfo& op) {
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
absl::StatusOr<std::string> CanonicalValue(const OpInfo& op, const KeyDef& key,
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
      absl::StatusOr<int64_t> block = LayoutBlock(value);
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

}  // namespace

namespace internal {

void Fatal(const std::string& message) {
  std::fprintf(stderr, "lathe: internal error: %s\n", message.c_str());
  std::abort();
}

}  // namespace internal

using internal::Fatal;

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
  const OpInfo* op = FindOp(spec.op);
  if (op == nullptr) {
    std::vector<std::string> names;
    for (const OpInfo& info : OpTable()) names.push_back(info.name);
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
      const KeyDef* def = op->FindKey(key);
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
  // A key whose default is the layout's channel block (conv2d's kblock): one canonical form.
  for (const KeyDef& def : op->keys) {
    auto it = spec.params.find(def.name);
    if (!def.omit_if_layout_block || it == spec.params.end()) continue;
    auto layout = spec.params.find("layout");
    absl::StatusOr<int64_t> block =
        layout == spec.params.end() ? absl::StatusOr<int64_t>(0) : LayoutBlock(layout->second);
    if (block.ok() && *block > 0 && it->second == absl::StrCat(*block)) spec.params.erase(it);
  }
  if (absl::Status s = op->check_shapes(spec); !s.ok()) return s;
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
