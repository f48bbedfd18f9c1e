// \file
// The rules of the CPU search space (SearchSpace::Heuristic), one per file as MetaSchedule's
// schedule_rule/ keeps them: each proposes, without measuring, the candidates that what is
// known about the target (vector width, register count, cores, caches) and the workload's
// structure (CpuSpace's Analysis) pick first, each with the measurements that chose it. They
// run in order (CpuRules()); each appends its candidates as decision vectors through a
// RuleContext, which drops repeats and candidates that do not apply, until `max` are found.
// Internal to tuner/ (through cpu_space.h).
#ifndef LATHE_TUNER_CPU_RULES_RULE_H_
#define LATHE_TUNER_CPU_RULES_RULE_H_

#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "tuner/cpu_space.h"

namespace lathe::tuner::internal {

// What a rule sees of the space (read-only; the slot indices are CpuSpace's, cpu_space.h)
// and where its candidates go.
class RuleContext {
 public:
  RuleContext(const CpuSpace& space, int max, std::vector<Candidate>* out);

  const ir::Workload& workload;
  const CpuTarget& target;
  const Analysis& an;
  const std::vector<int64_t>& shape;  // the output's
  const size_t n;                     // output axes
  const int lanes;                    // the vector's float lanes
  // Accumulators a register tile may hold: the register file less a broadcast and a row of
  // inputs.
  const int acc_regs;

  const std::vector<int>& tile_slot;
  const int parallel_slot, swap_slot, vec_slot, unroll_slot, unroll_k_slot;
  const std::vector<int>& pack_slot;
  const std::vector<int>& side_slot;
  const std::vector<int>& pad_slot;
  const std::vector<int>& rfactor_slot;
  const int chan_slot, chunk_slot;
  const int dw_cols_slot;  // sepconv2d only; -1 otherwise
  const int dw_chan_slot;  // plain depthwise conv2d only; -1 otherwise

  // The choice of `slot` nearest to `want` (the smaller one on a tie).
  int64_t Nearest(int slot, int64_t want) const;
  // Every decision at its first choice, but paddings computed once at root, long row
  // reductions as vector partial results and row statistics per row tile.
  std::vector<int64_t> Defaults() const;
  // Adds the candidate of decisions `d` unless it was proposed before or does not apply.
  void Emit(std::vector<int64_t> d);
  // Candidates found so far, and whether that is all that were asked for.
  size_t size() const { return out_->size(); }
  bool Full() const { return static_cast<int>(out_->size()) >= max_; }

  int64_t VectorsFor(int64_t elems) const;
  // The columns of a register tile of `per_col` vectors a column over a row `width` wide: the
  // most that fit the accumulators and divide the row, or, where that divisor wastes half of
  // them, the most that fit.
  int64_t ColumnsFor(int64_t width, int64_t per_col) const;
  // ... of the first tile of a blocked convolution: one vector a column on 16 registers, two on
  // 32 (half the file in one row of columns: a full file of accumulators leaves LLVM too few
  // registers for the weights and broadcasts; a 1 x 28 tile measured 2x slower than 1 x 14 or
  // 2 x 14 on AVX-512).
  int64_t FirstTileColumns(int64_t width) const;
  int64_t ChunkedTileBytes(int64_t images, int64_t blocks, int64_t rows) const;

 private:
  const CpuSpace& space_;
  const int max_;
  std::vector<Candidate>* out_;
  std::set<std::vector<int64_t>> seen_;
};

class CpuRule {
 public:
  virtual ~CpuRule() = default;
  virtual const char* name() const = 0;
  // Appends this rule's candidates to `c` (none where it does not apply). True when no rule
  // after it may add any (a Winograd transform's slots allow nothing else).
  virtual bool Propose(RuleContext& c) const = 0;
};

std::unique_ptr<CpuRule> MakeWinogradRule();
std::unique_ptr<CpuRule> MakeBlockedConvRule();
std::unique_ptr<CpuRule> MakeChannelsInnerRule();
std::unique_ptr<CpuRule> MakePanelMatmulRule();
std::unique_ptr<CpuRule> MakeRegisterTilesRule();

// The rules in the order they propose: the specialised ones first, register tiles last.
const std::vector<std::unique_ptr<CpuRule>>& CpuRules();

}  // namespace lathe::tuner::internal

#endif  // LATHE_TUNER_CPU_RULES_RULE_H_
