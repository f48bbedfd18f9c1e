// \file
// The operator table: every op described once. A row holds the op's name, its spec keys
// (kind, default, whether required, the choices of a choice key), an example spec, and the
// functions of its shape rule, FLOP count, compute definition and reference. The workload
// spec parser (ir/workload.cc), BuildOp, ComputeReference and FLOP counting read it, and the
// Python client's spec table is generated from it at build time (tools/op_table_main.cc), so
// no other copy of an op's keys exists.
//
// Adding an operator: a row here (op_registry.cc), its params, builder and reference
// (ops*.cc, reference*.cc); the parser, the FLOP count, the dispatch and the Python client
// follow from the row.
#ifndef LATHE_IR_OP_REGISTRY_H_
#define LATHE_IR_OP_REGISTRY_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/ops.h"
#include "ir/workload.h"

namespace lathe::ir {

// The operators, in the order of the table (and of the parser's messages).
enum class OpKind : uint8_t {
  kMatmul,
  kBatchMatmul,
  kConv2d,
  kConv2dTranspose,
  kPool2d,
  kSoftmax,
  kLayerNorm,
  kEwise,
  kTranspose,
  kSlice,
  kConcat,
  kResize,
  kReduce,
  kWinogradIn,
  kWinogradOut,
  kSepConv2d,
};

// Limits that keep hostile specs from allocating terabytes or overflowing index arithmetic:
// every integer value, and every tensor's element count (intermediates included).
inline constexpr int64_t kMaxExtent = int64_t{1} << 20;
inline constexpr double kMaxTensorElements = 2147483648.0;  // 2^31

// What a key's value is; the parser validates and canonicalises it accordingly.
enum class KeyKind : uint8_t {
  kPositive,       // integer >= 1
  kNonNegative,    // integer >= 0
  kChoice,         // one of KeyDef::choices
  kPositiveFloat,  // printed %.9g
  kPair,           // stride, dilation: N or HxW, positive
  kPads,           // N, HxW or TxLxBxR, non-negative
  kShape,          // AxBx..., positive, rank 1..8
  kIndices,        // AxBx..., non-negative (axes, permutations, offsets)
  kShapeList,      // shapes joined by '+'
  kEpilogue,       // an epilogue expression (ir/epilogue.h)
  kLayout,         // nchw, nhwc or nchw{x}c (channels in blocks of x)
};

// The name KeyKind's values have in the generated Python table ("pos", "choice", ...).
const char* KeyKindName(KeyKind kind);

struct KeyDef {
  const char* name;
  KeyKind kind;
  const char* default_value;  // nullptr: required (unless optional)
  std::vector<std::string> choices = {};
  // Keys added after records existed: left out of the canonical form while they hold their
  // default, so that the keys of older records never change.
  bool omit_default = false;
  bool optional = false;  // no default; absent means "not given"
  // Left out of the canonical form while equal to the channel block of the spec's layout
  // (conv2d's kblock: nchw16c,kblock=16 is nchw16c).
  bool omit_if_layout_block = false;
};

struct OpInfo {
  OpKind kind;
  const char* name;
  std::vector<KeyDef> keys;  // in the order they are listed in messages
  // A valid spec of the op (tests round-trip it; the generated Python table carries it with
  // its canonical form).
  const char* example;
  // The shape rule: the checks of several keys together and the size of every tensor, on a
  // spec whose values are canonical; InvalidArgument naming the offending part.
  absl::Status (*check_shapes)(const WorkloadSpec& spec);
  // Floating-point operations of one call of a valid canonical spec (a multiply-add counts
  // 2; exp, sqrt, max count 1; data movement 0).
  absl::StatusOr<double> (*flops)(const WorkloadSpec& spec);
  // The compute definition (ir/ops.h) and the naive reference (ir/reference.h).
  absl::StatusOr<OpDefinition> (*build)(const WorkloadSpec& spec);
  absl::Status (*reference)(const WorkloadSpec& spec, std::span<float* const> args);

  const KeyDef* FindKey(std::string_view key) const;  // nullptr when the op has no such key
};

// Every operator, in OpKind order.
const std::vector<OpInfo>& OpTable();
// The row of `name`, or nullptr for an unknown op.
const OpInfo* FindOp(std::string_view name);
const OpInfo& GetOp(OpKind kind);
inline const char* OpName(OpKind kind) { return GetOp(kind).name; }
// Whether `name` is the op `kind` (a spec's op, a model kernel's op).
inline bool IsOp(std::string_view name, OpKind kind) { return name == OpName(kind); }
// Whether the op `name` takes `key` (false for an unknown op).
bool OpTakesKey(std::string_view name, std::string_view key);

// FLOPs of one call of a canonical spec (the table's count); InvalidArgument for an unknown
// op or a spec ParseWorkloadSpec would not return.
absl::StatusOr<double> WorkloadFlops(const WorkloadSpec& spec);

}  // namespace lathe::ir

#endif  // LATHE_IR_OP_REGISTRY_H_
