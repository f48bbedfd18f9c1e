// \file
// Schedules: how each stage of a workload is computed (loop structure, annotations, where it
// is computed and stored). Every primitive validates its operands first and either fails
// with an InvalidArgument status naming the primitive, stage and loop (leaving the schedule
// unchanged) or applies and appends one instruction to the schedule's trace. Replaying a
// trace (ApplyTrace) is deterministic.
//
// Loop names: a stage's root loops are named after its axes (spatial axes, then reduce
// axes). split("i", {f1, f2}) replaces i by i.0, i.1, i.2 (outermost first; the inner
// extents are f1 and f2, the outer one ceil(extent / (f1*f2))). fuse(a, b) yields "a+b".
//
// Thread-safety: a Schedule is a value; distinct objects may be used from distinct threads.
#ifndef LATHE_IR_SCHEDULE_H_
#define LATHE_IR_SCHEDULE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ir/stmt.h"
#include "ir/tensor.h"
#include "ir/trace.h"
#include "ir/workload.h"

namespace lathe::ir {

struct LoopInfo {
  std::string name;
  int64_t extent = 1;  // nominal: derived from the stage's full domain
  bool reduce = false;
  ForKind kind = ForKind::kSerial;
  std::string thread_tag;
};

struct Relation {
  enum Kind { kSplit, kFuse } kind;
  std::vector<std::string> inputs;   // split: {parent}; fuse: {outer, inner}
  std::vector<std::string> outputs;  // split: {outer, inner}; fuse: {fused}
  int64_t factor = 0;                // split: extent of the inner loop
};

enum class AttachKind : uint8_t { kRoot, kInline, kAt };

struct Stage {
  std::string name;                     // the name of the tensor it computes
  Tensor tensor;                        // its current definition
  std::vector<std::string> root_loops;  // axes, then reduce axes
  std::vector<std::string> leaves;      // current loop order, outermost first
  std::map<std::string, LoopInfo> loops;
  std::vector<Relation> relations;  // in application order
  AttachKind attach = AttachKind::kRoot;
  std::string attach_stage, attach_loop;
  std::string scope = "global";
  bool is_output = false;
  // Set by Schedule::Tensorize: the code generator emits the stage as this hand-built kernel
  // template (with these parameters) instead of lowering its loops.
  std::string tensorize;
  std::vector<int64_t> tensorize_params;

  const LoopInfo* FindLoop(const std::string& loop) const;
  bool IsLeaf(const std::string& loop) const;
};

class Schedule {
 public:
  // The untouched schedule: every stage computed at root in its natural loop order.
  explicit Schedule(Workload workload, std::string target = "cpu");
  // The same, sharing a workload that many schedules start from (a search space replays
  // thousands of candidates of one workload per round).
  explicit Schedule(std::shared_ptr<const Workload> workload, std::string target = "cpu");

  const Workload& workload() const { return *workload_; }
  const std::string& target() const { return trace_.target; }
  // Stages, producers before consumers. Placeholders are not stages.
  const std::vector<Stage>& stages() const { return stages_; }
  const Stage* FindStage(const std::string& name) const;
  const Trace& trace() const { return trace_; }

  // Splits `loop` into factors.size()+1 loops; factors are the inner extents (each >= 1).
  absl::StatusOr<std::vector<std::string>> Split(const std::string& stage, const std::string& loop,
                                                 const std::vector<int64_t>& factors);
  // Reorders the given leaf loops among the positions they occupy.
  absl::Status Reorder(const std::string& stage, const std::vector<std::string>& loops);
  // Fuses adjacent leaf loops (outermost first) of the same kind (spatial or reduce).
  absl::StatusOr<std::string> Fuse(const std::string& stage, const std::vector<std::string>& loops);
  absl::Status Parallel(const std::string& stage, const std::string& loop);
  absl::Status Vectorize(const std::string& stage, const std::string& loop);
  absl::Status Unroll(const std::string& stage, const std::string& loop);
  // Binds a spatial loop to a GPU axis: blockIdx.{x,y,z}, threadIdx.{x,y,z} or vthread.
  absl::Status Bind(const std::string& stage, const std::string& loop, const std::string& tag);
  // Computes `stage` into a new stage `<stage>.<scope>` (local accumulation); `stage` becomes
  // a copy of it. The stage must not have been transformed yet. Returns the new stage name.
  absl::StatusOr<std::string> CacheWrite(const std::string& stage, const std::string& scope);
  // Reads `tensor` through a new copy stage `<tensor>.<scope>` for the given consumers. When
  // the copy is computed at a loop of a consumer, only the region that consumer needs there is
  // copied, compactly: this packs data into a new layout. Returns the new stage name.
  absl::StatusOr<std::string> CacheRead(const std::string& tensor, const std::string& scope,
                                        const std::vector<std::string>& consumers);
  // Computes `stage` inside `loop` of its consumer `target`, for the region it needs there.
  absl::Status ComputeAt(const std::string& stage, const std::string& target,
                         const std::string& loop);
  // Substitutes an injective stage into its consumers.
  absl::Status ComputeInline(const std::string& stage);
  absl::Status ComputeRoot(const std::string& stage);
  // Factors root reduce axis `axis` by `factor`: a new stage `<stage>.rf` computes partial
  // results with the inner part of the axis as a spatial axis `<axis>.rf`; `stage` reduces
  // over it. The stage must not have been transformed yet. Returns the new stage name.
  absl::StatusOr<std::string> RFactor(const std::string& stage, const std::string& axis,
                                      int64_t factor);
  absl::Status StorageScope(const std::string& stage, const std::string& scope);
  // Stores an intermediate stage with its dimensions in the order of `axes` (a permutation of
  // its spatial axis names, outermost first): its buffer is laid out that way and every read
  // of it is rewritten to match. The stage's loops start over in that order, so it must not
  // have been transformed yet. Packs a cache_read copy into a blocked layout (weights with
  // the output channels innermost) or puts a cache_write accumulator's vector axis innermost.
  // Not for the output or a placeholder, whose layouts the workload fixes.
  absl::Status StorageOrder(const std::string& stage, const std::vector<std::string>& axes);
  // Marks an untransformed reduction stage of a "cuda" schedule to be generated by the kernel
  // template `intrinsic` (codegen/cuda/contraction.h: "contraction_fma", "contraction_mma_tf32")
  // with integer `params` (tile sizes) that the template validates. Further primitives on the
  // stage are refused. The IR itself gives the name no meaning.
  absl::Status Tensorize(const std::string& stage, const std::string& intrinsic,
                         const std::vector<int64_t>& params);

  // Stages that read `stage`'s tensor.
  std::vector<std::string> Consumers(const std::string& stage) const;

 private:
  absl::StatusOr<Stage*> Mutable(const std::string& stage, const char* primitive);
  void Record(Instruction inst);

  std::shared_ptr<const Workload> workload_;  // never null
  std::vector<Stage> stages_;
  Trace trace_;
};

// Replays `trace` on `workload`. Fails with the status of the first failing instruction,
// prefixed with its position, or if the trace is for another workload.
absl::StatusOr<Schedule> ApplyTrace(const Workload& workload, const Trace& trace);
absl::Status ApplyInstruction(Schedule& sch, const Instruction& inst);

}  // namespace lathe::ir

#endif  // LATHE_IR_SCHEDULE_H_
