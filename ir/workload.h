// \file
// Workloads: an operator from CONTRACT.md instantiated at concrete shapes, with its canonical
// spec and stable key. Parsing, printing and construction live in workload.cc and ops.cc.
#ifndef LATHE_IR_WORKLOAD_H_
#define LATHE_IR_WORKLOAD_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/tensor.h"

namespace lathe::ir {

// A parsed workload spec `OP:key=value,...`. Values are kept as strings; `Canonical()` sorts
// keys and fills in defaults.
struct WorkloadSpec {
  std::string op;
  std::map<std::string, std::string> params;

  int64_t Int(const std::string& key) const;  // requires the key to exist and be an integer
  const std::string& Str(const std::string& key) const;
  // `op:k1=v1,k2=v2` with keys sorted; the form that keys the database.
  std::string ToString() const;
};

// Parses and validates a spec: unknown ops and keys, missing keys, non-integers, impossible
// shapes are InvalidArgument errors naming the offending part. The result is canonical
// (defaults filled in).
//
// Canonical form: every key of the op's CONTRACT.md row is present, with its default where
// the spec omitted it (conv2d stride=1, pad=0, dilation=1, groups=1, layout=nchw; pool2d
// stride=1, pad=0, kind=max, layout=nchw; layer_norm eps=1e-05; epilogue=none); integers are
// plain decimal ("064" becomes "64"), eps is printed with %.9g. `dtype` is accepted only as
// float32 and is left out of the canonical form, so keys of float32 records never change; a
// key added in the future must likewise be left out while it has its default value.
// Example: "matmul:n=8,m=4,k=2" -> "matmul:epilogue=none,k=2,m=4,n=8".
//
// Limits: every integer is at most 2^20 and every tensor (intermediates included) has at most
// 2^31 elements. conv2d needs c and k divisible by groups and positive output extents; pool2d
// needs pad < r and pad < s (every window overlaps the input).
absl::StatusOr<WorkloadSpec> ParseWorkloadSpec(const std::string& text);

// A workload ready to schedule: its tensors in CONTRACT.md argument order (inputs first, the
// output last) and every intermediate compute tensor reachable from the output.
struct Workload {
  WorkloadSpec spec;
  std::string canonical;  // spec.ToString()
  std::string key;        // stable 16-hex-digit hash of `canonical` (FNV-1a 64)
  std::vector<Tensor> args;
  // Every tensor of the definition, producers before consumers (placeholders included).
  std::vector<Tensor> tensors;
  double flops = 0;  // floating-point operations of one call (a multiply-add counts 2)

  const Tensor& output() const { return args.back(); }
  const Tensor* Find(const std::string& name) const;
};

// Builds the workload of a parsed (canonical) spec.
absl::StatusOr<Workload> MakeWorkload(const WorkloadSpec& spec);
// Parses and builds in one step.
absl::StatusOr<Workload> MakeWorkload(const std::string& spec_text);

// Stable key of a canonical spec: FNV-1a 64 of its bytes, as 16 lowercase hex digits.
std::string WorkloadKey(const std::string& canonical);
// FNV-1a 64 of `bytes` as 16 lowercase hex digits: stable across runs, machines and compilers.
std::string Fnv1a64Hex(std::string_view bytes);

}  // namespace lathe::ir

#endif  // LATHE_IR_WORKLOAD_H_
