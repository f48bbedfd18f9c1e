// \file
// The static memory plan of a compiled model: every kernel call with where each argument
// lives (the activation arena at a fixed offset, the weights blob, a caller's input or output
// buffer), the distinct workloads to compile, the weights packed into one blob, and the size
// of the arena. Values whose lifetimes do not overlap share arena space (greedy first fit,
// largest first, each where the records were timed: codegen::kTimedBufferOffset past a 64-byte
// line); reshapes and
// identities are views, never copies.
#ifndef LATHE_MODEL_PLAN_H_
#define LATHE_MODEL_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/compile.h"

namespace lathe::model {

struct BufferRef {
  enum Kind : int32_t { kArena = 0, kWeights = 1, kInput = 2, kOutput = 3 };
  Kind kind = kArena;
  int32_t index = 0;   // input or output index
  int64_t offset = 0;  // bytes
};

struct PlanStep {
  int32_t kernel = 0;  // index into Plan::kernels
  std::vector<BufferRef> args;
  std::vector<std::string> nodes;
};

struct IoInfo {
  std::string name;
  std::vector<int64_t> shape;
};

struct Plan {
  std::vector<std::string> kernels;  // distinct canonical workload specs
  std::vector<PlanStep> steps;
  std::string weights;  // bytes: float32 tensors at 64-byte aligned offsets
  int64_t arena_bytes = 0;
  std::vector<IoInfo> inputs, outputs;

  // {"inputs": [{"name": ..., "shape": [...]}, ...], "outputs": [...]}
  std::string IoJson() const;
};

absl::StatusOr<Plan> MakePlan(const Program& p);

}  // namespace lathe::model

#endif  // LATHE_MODEL_PLAN_H_
