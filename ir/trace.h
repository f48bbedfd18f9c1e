// \file
// Schedule traces: the primitives applied to a workload with the decisions each took. A trace
// is plain data here; its wire and storage schema is the `lathe.v1.Trace` protobuf message,
// whose JSON form is what trace files and the database hold.
#ifndef LATHE_IR_TRACE_H_
#define LATHE_IR_TRACE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lathe::ir {

// Version of the trace format written by this build; older versions are read, newer refused.
inline constexpr uint32_t kTraceVersion = 1;

// One primitive. Field use by kind (see Schedule for semantics):
//   split:        stage, loops={loop}, factors=inner factors (decisions)
//   reorder/fuse: stage, loops
//   parallel/vectorize/unroll: stage, loops={loop}
//   bind:         stage, loops={loop}, tag=thread tag
//   cache_write:  stage, tag=scope
//   cache_read:   stage=tensor read, tag=scope, target=comma-separated consumer stages
//   compute_at:   stage, target=consumer stage, target_loop
//   compute_inline / compute_root: stage
//   rfactor:      stage, loops={reduce axis}, factors={factor}
//   storage_scope: stage, tag=scope
//   tensorize:    stage, tag=kernel template, factors=its parameters
struct Instruction {
  std::string kind;
  std::string stage;
  std::vector<std::string> loops;
  std::vector<int64_t> factors;
  std::string target;
  std::string target_loop;
  std::string tag;

  bool operator==(const Instruction&) const = default;
};

struct Trace {
  uint32_t version = kTraceVersion;
  std::string workload;  // canonical spec
  std::string target = "cpu";
  std::vector<Instruction> instructions;
  // The search-space sketch and decisions that produced the trace (-1 and empty when it was
  // written by hand).
  int32_t sketch = -1;
  std::vector<int64_t> decisions;

  bool operator==(const Trace&) const = default;
};

// The identity of the program a trace describes: a 128-bit FNV-1a hash of its workload, target
// and instructions, not of the sketch and decisions that produced them (distinct decisions
// often give one program). Stable across builds and machines: candidate ids in the database
// are made of it.
struct ProgramId {
  uint64_t hi = 0;
  uint64_t lo = 0;

  bool operator==(const ProgramId&) const = default;
  auto operator<=>(const ProgramId&) const = default;
  // 32 lower-case hex digits.
  std::string Hex() const;
  template <typename H>
  friend H AbslHashValue(H h, const ProgramId& p) {
    return H::combine(std::move(h), p.hi, p.lo);
  }
};
ProgramId ProgramIdOf(const Trace& trace);
// The identity of stored text that is not a readable trace (the hash of the text itself, which
// no readable trace has), so that it still identifies what was stored. The JSON form and the
// protobuf message of a trace live above ir/, in proto/trace_io.h.
ProgramId ProgramIdOfUnreadableTrace(const std::string& text);

// One line per instruction, for logs and error reports.
std::string TraceToText(const Trace& trace);

}  // namespace lathe::ir

#endif  // LATHE_IR_TRACE_H_
