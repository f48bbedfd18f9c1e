#include "codegen/transpose_copy.h"

#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT

struct NestLoop {
  const ExprNode* var;
  int64_t min, extent;
};

}  // namespace

std::optional<TransposedCopy> MatchTransposedCopy(const Stmt& s) {
  std::vector<NestLoop> nest;
  int64_t iterations = 1;
  Stmt cur = s;
  for (; cur && cur->kind == StmtKind::kFor; cur = cur->body) {
    NestLoop l{cur->var.get(), 0, 0};
    if (cur->for_kind != ForKind::kUnrolled || !AsConstInt(cur->min, &l.min) ||
        !AsConstInt(cur->extent, &l.extent) || l.extent < 1) {
      return std::nullopt;
    }
    iterations *= l.extent;
    if (iterations > kMaxTransposedColumns) return std::nullopt;
    nest.push_back(l);
  }
  if (!cur || cur->kind != StmtKind::kStore || cur->predicate || nest.empty()) {
    return std::nullopt;
  }
  const Expr& value = cur->value;
  const int lanes = value->type.lanes;
  const Expr& to = cur->index;
  if (lanes < 4 || (lanes & (lanes - 1)) != 0 || to->kind != ExprKind::kRamp ||
      !IsConstInt(to->operands[1], 1)) {
    return std::nullopt;
  }
  std::unordered_map<const ExprNode*, bool> nest_vars;
  for (const NestLoop& l : nest) nest_vars[l.var] = true;
  // The one gather of the value; other vector loads must be contiguous.
  Expr load;
  bool other_gather = false;
  Visit(value, [&](const Expr& x) {
    if (x->kind != ExprKind::kLoad || x->type.lanes == 1) return;
    const Expr& i = x->operands[0];
    if (i->kind == ExprKind::kRamp && IsConstInt(i->operands[1], 1)) return;
    // Unmasked, or masked alike in every lane (a broadcast condition).
    const bool uniform_mask =
        x->operands.size() == 1 || x->operands[1]->kind == ExprKind::kBroadcast;
    if (x->type.lanes == lanes && uniform_mask && i->kind == ExprKind::kRamp &&
        !UsesVar(i->operands[1], nest_vars) && (!load || load == x)) {
      load = x;
    } else {
      other_gather = true;
    }
  });
  // Nor may the value read what the nest writes: the stores are emitted after every row load,
  // and the columns' values after the transposition.
  bool reads_dst = false;
  Visit(value, [&](const Expr& x) {
    reads_dst = reads_dst || (x->kind == ExprKind::kLoad && x->buffer.get() == cur->buffer.get());
  });
  if (!load || other_gather || reads_dst) return std::nullopt;
  const Expr& from = load->operands[0];
  TransposedCopy tc;
  tc.src = load->buffer;
  tc.dst = cur->buffer;
  tc.lanes = lanes;
  tc.row_stride = from->operands[1];
  tc.tile = MakeVar("tile", load->type);
  const Expr guard = load->operands.size() > 1 ? load->operands[1]->operands[0] : nullptr;
  const Expr body =
      Rewrite(value, [&](const Expr& x) { return x.get() == load.get() ? tc.tile : x; });

  // Every iteration of the nest: the first lane of its load and of its store.
  std::map<int64_t, TransposedCopy::Block> blocks;  // by offset / lanes
  Expr first;
  int64_t last = 0;
  std::vector<int64_t> at(nest.size(), 0);
  for (int64_t it = 0; it < iterations; ++it) {
    VarMap values;
    for (size_t i = 0; i < nest.size(); ++i) values[nest[i].var] = IntImm(nest[i].min + at[i]);
    const Expr a = Simplify(Substitute(from->operands[0], values));
    if (!first) first = a;
    // Offsets rising with the iterations: the blocks (by offset) and their columns then store
    // in the nest's order.
    int64_t offset = 0;
    if (!AsConstInt(Simplify(Sub(a, first)), &offset) || offset < 0 || (it > 0 && offset <= last)) {
      return std::nullopt;
    }
    last = offset;
    TransposedCopy::Block& b = blocks[offset / lanes];
    const int column = static_cast<int>(offset % lanes);
    Expr g;
    if (guard) {
      g = Simplify(Substitute(guard, values));
      int64_t holds = 0;
      if (AsConstInt(g, &holds) && holds != 0) g = nullptr;  // always read
    }
    b.columns.push_back({column, Simplify(Substitute(to->operands[0], values)),
                         Substitute(body, values), std::move(g)});
    // The next iteration, innermost loop fastest.
    for (size_t i = nest.size(); i-- > 0;) {
      if (++at[i] < nest[i].extent) break;
      at[i] = 0;
    }
  }
  for (auto& [index, b] : blocks) {
    // Fewer columns than a quarter of the rows: the row loads cost more than the gathers.
    if (static_cast<int>(b.columns.size()) * 4 < lanes) return std::nullopt;
    b.src_base = Simplify(Add(first, IntImm(index * lanes)));
    tc.blocks.push_back(std::move(b));
  }
  return tc;
}

}  // namespace lathe::codegen
