// \file
// The GPU search space's class (tuner/gpu_space.h), shared by its two halves: gpu_space.cc
// (slots, sampling, mutation, applying and checking candidates) and gpu_rules.cc (the rule:
// the candidates an untuned workload gets first, fitted to measurements on H100/H200 GPUs).
// Internal to the tuner.
#ifndef LATHE_TUNER_GPU_SPACE_INTERNAL_H_
#define LATHE_TUNER_GPU_SPACE_INTERNAL_H_

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codegen/cuda/contraction.h"
#include "ir/schedule.h"
#include "ir/workload.h"
#include "tuner/gpu_space.h"
#include "tuner/space.h"

namespace lathe::tuner::gpu_internal {

using ir::Schedule;
using ir::Stage;

// Which decisions a slot's value matters under; the others are carried along unchanged so
// that mutation only touches decisions that change the program.
enum class Need { kAlways, kKept, kTiled, kLocal, kStaged, kCross };

struct Slot {
  std::string name;
  std::vector<int64_t> choices;
  int stage = -1;
  Need need = Need::kAlways;
};

// Kinds of the "kind" slot of a reduction stage.
constexpr int64_t kLocal = 0, kShared = 1, kCross = 2;

// The sketches: 0 loop tiling (the slots below), 1 the contraction templates (variants_), 2 the
// flat mapping (DefaultGpuSchedule: every stage one output per thread, 256 threads per block; no
// decisions).
constexpr int kTiledSketch = 0, kContractionSketch = 1, kFlatSketch = 2;

// One stage of the workload with the slots of its decisions.
struct StagePlan {
  std::string name;
  bool reduction = false;
  bool pad = false;
  std::vector<int64_t> spatial;     // extents of the spatial axes
  std::vector<std::string> inputs;  // placeholders it may read (paddings inlined)
  int pad_slot = -1;                // pads: 0 inline, 1 root
  // Reductions.
  int kind_slot = -1;
  std::vector<int> vt, th, in, k, smem;
  int unroll_slot = -1, unroll_local_slot = -1, rf_slot = -1, vec_slot = -1, layout_slot = -1;
  // Elementwise stages.
  int threads_slot = -1, inner_slot = -1;
};

class GpuSpace : public SearchSpace {
 public:
  GpuSpace(ir::Workload w, GpuTarget t) : workload_(std::move(w)), target_(std::move(t)) {}

  absl::Status Init();
  const ir::Workload& workload() const override { return workload_; }
  int num_sketches() const override { return 3; }
  ir::TargetKind target_kind() const override { return ir::TargetKind::kCuda; }
  absl::StatusOr<Schedule> Apply(const Candidate& c) const override;
  absl::StatusOr<Candidate> Sample(std::mt19937_64& rng) const override;
  using SearchSpace::Mutate;
  absl::StatusOr<Candidate> Mutate(const Candidate& c, std::mt19937_64& rng,
                                   const KnownCandidates* known) const override;
  absl::StatusOr<Candidate> FromTrace(const ir::Trace& trace) const override;
  std::vector<Candidate> Heuristic(int max) const override;

 private:
  int AddSlot(std::string name, std::vector<int64_t> choices, int stage, Need need) {
    slots_.push_back({std::move(name), std::move(choices), stage, need});
    return static_cast<int>(slots_.size()) - 1;
  }
  bool Relevant(const std::vector<int64_t>& d, const Slot& s) const;
  // Device-limit checks of an applied candidate: its launch plan and its register estimate.
  absl::Status CheckLimits(const Candidate& c, const Schedule& sch) const;
  absl::StatusOr<Candidate> Finish(Candidate c) const;
  // The contraction sketch (1): decisions {index into variants_}.
  void InitContraction();
  absl::StatusOr<Schedule> ApplyContraction(const Candidate& c) const;
  std::vector<Candidate> ContractionHeuristic(bool mma, int max) const;
  // Blocks a contraction variant launches.
  int64_t ContractionBlocks(const std::vector<int64_t>& params) const;
  // Whether the contraction is large enough for the register-tiled rules to pay (see Heuristic).
  bool LargeContraction() const;
  bool SplitContraction() const;
  bool DenseContraction() const;
  // The loop-tiling candidate of one output per thread in which every reduction with few
  // outputs and a long reduce axis is a cross-thread reduction; nullopt when none is.
  std::optional<Candidate> CrossCandidate() const;
  // The untransformed stage that `p` plans.
  const Stage& WorkloadStage(const StagePlan& p) const {
    return *std::find_if(workload_stages_.begin(), workload_stages_.end(),
                         [&](const Stage& x) { return x.name == p.name; });
  }

  struct Variant {
    const char* name;             // the kernel template
    std::vector<int64_t> params;  // its tile shape
  };
  // A cp.async template (contraction_*_async).
  static int64_t Splits(const Variant& v) { return v.params.size() > 6 ? v.params[6] : 1; }
  static bool IsAsync(const Variant& v) {
    return v.name == std::string(codegen::cuda::kContractionMmaTf32Async) ||
           v.name == std::string(codegen::cuda::kContractionFmaAsync);
  }
  std::vector<Variant> variants_;  // empty: no contraction sketch
  std::string contraction_stage_;
  int64_t gemm_m_ = 0, gemm_n_ = 0, gemm_k_ = 0, gemm_batches_ = 1;

  ir::Workload workload_;
  GpuTarget target_;
  std::vector<Stage> workload_stages_;  // the untransformed stages (axes, extents)
  std::vector<StagePlan> stages_;
  std::vector<Slot> slots_;
};

}  // namespace lathe::tuner::gpu_internal

#endif  // LATHE_TUNER_GPU_SPACE_INTERNAL_H_
