#include "codegen/transpose_copy.h"

#include <algorithm>
#include <map>
#include <utility>

#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT

// Stores of one nest at most: each is a column of the block, unrolled in the generated code.
constexpr int64_t kMaxColumns = 64;

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
    if (iterations > kMaxColumns) return std::nullopt;
    nest.push_back(l);
  }
  if (!cur || cur->kind != StmtKind::kStore || cur->predicate || nest.empty()) {
    return std::nullopt;
  }
  const Expr& value = cur->value;
  const int lanes = value->type.lanes;
  if (lanes < 4 || (lanes & (lanes - 1)) != 0 || value->kind != ExprKind::kLoad ||
      value->operands.size() != 1 || value->buffer.get() == cur->buffer.get()) {
    return std::nullopt;
  }
  const Expr& to = cur->index;
  const Expr& from = value->operands[0];
  if (to->kind != ExprKind::kRamp || !IsConstInt(to->operands[1], 1) ||
      from->kind != ExprKind::kRamp || IsConstInt(from->operands[1], 1)) {
    return std::nullopt;
  }
  std::unordered_map<const ExprNode*, bool> nest_vars;
  for (const NestLoop& l : nest) nest_vars[l.var] = true;
  if (UsesVar(from->operands[1], nest_vars)) return std::nullopt;

  // Every iteration of the nest: the first lane of its load and of its store.
  TransposedCopy tc;
  tc.src = value->buffer;
  tc.dst = cur->buffer;
  tc.lanes = lanes;
  tc.row_stride = from->operands[1];
  std::map<int64_t, TransposedCopy::Block> blocks;  // by offset / lanes
  Expr first;
  std::vector<int64_t> at(nest.size(), 0);
  for (int64_t it = 0; it < iterations; ++it) {
    VarMap values;
    for (size_t i = 0; i < nest.size(); ++i) values[nest[i].var] = IntImm(nest[i].min + at[i]);
    const Expr a = Simplify(Substitute(from->operands[0], values));
    if (!first) first = a;
    int64_t offset = 0;
    if (!AsConstInt(Simplify(Sub(a, first)), &offset) || offset < 0) return std::nullopt;
    TransposedCopy::Block& b = blocks[offset / lanes];
    const int column = static_cast<int>(offset % lanes);
    for (const TransposedCopy::Column& c : b.columns) {
      if (c.offset == column) return std::nullopt;  // the same vector stored twice
    }
    b.columns.push_back({column, Simplify(Substitute(to->operands[0], values))});
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
