// \file
// Generic traversals of expressions and statements: rebuilding a node with new operands,
// bottom-up rewriting, substitution of variables, structural equality.
#ifndef LATHE_IR_FUNCTOR_H_
#define LATHE_IR_FUNCTOR_H_

#include <functional>
#include <unordered_map>
#include <vector>

#include "ir/expr.h"
#include "ir/stmt.h"

namespace lathe::ir {

using VarMap = std::unordered_map<const ExprNode*, Expr>;

// `e` with its operands replaced by `ops` (same count), re-deriving types; returns `e` itself
// when every operand is unchanged.
Expr WithOperands(const Expr& e, std::vector<Expr> ops);

// `e` with `f` applied to each operand; `e` itself when `f` returns every operand unchanged.
// The new operands are only gathered into a vector (an allocation) once one of them differs:
// most nodes of a rewrite come back unchanged. A template, so that hot recursive walks
// (Rewrite, Simplify) pay no std::function call per operand.
template <typename F>
Expr MapOperands(const Expr& e, F&& f) {
  const size_t n = e->operands.size();
  size_t i = 0;
  Expr first_changed;
  for (; i < n; ++i) {
    Expr o = f(e->operands[i]);
    if (o != e->operands[i]) {
      first_changed = std::move(o);
      break;
    }
  }
  if (i == n) return e;
  std::vector<Expr> ops;
  ops.reserve(n);
  ops.insert(ops.end(), e->operands.begin(), e->operands.begin() + static_cast<ptrdiff_t>(i));
  ops.push_back(std::move(first_changed));
  for (++i; i < n; ++i) ops.push_back(f(e->operands[i]));
  return WithOperands(e, std::move(ops));
}

// Results of a walk over an expression DAG, by node: a node with more than one owner (reached
// through several parents, like a Winograd transform's loads shared by every position's case)
// is computed once per walk, so the walk costs the DAG rather than the tree it unfolds to, and
// its result keeps the sharing. `compute` must depend on the node alone (and the walk's fixed
// context). A null memo, or a node with one owner, computes without a lookup.
using ExprMemo = std::unordered_map<const ExprNode*, Expr>;
template <typename F>
Expr Memoized(const Expr& e, ExprMemo* memo, F&& compute) {
  if (memo == nullptr || e.use_count() <= 1) return compute();
  if (auto it = memo->find(e.get()); it != memo->end()) return it->second;
  Expr out = compute();
  memo->emplace(e.get(), out);
  return out;
}

// Rebuilds `e` bottom-up: `fn` sees each node after its operands were rewritten and returns
// the replacement (or the node itself). `fn` must be a function of the node alone: a node
// shared by several parents is rewritten once and its result reused.
Expr Rewrite(const Expr& e, const std::function<Expr(const Expr&)>& fn);

// Rewrites every expression held by `s` with `fn` (as Rewrite does) and every statement
// bottom-up with `sfn` (may be null).
Stmt RewriteStmt(const Stmt& s, const std::function<Expr(const Expr&)>& fn,
                 const std::function<Stmt(const Stmt&)>& sfn = nullptr);

// `s` with each direct child statement (a For's or Allocate's body, an IfThenElse's
// branches, a Seq's members) replaced by `fn(child)`; `s` itself when none changed. For
// passes that handle a few statement kinds and only recurse through the others.
Stmt MapChildren(const Stmt& s, const std::function<Stmt(const Stmt&)>& fn);

// Replaces variables (by node identity) with expressions.
Expr Substitute(const Expr& e, const VarMap& map);
Stmt Substitute(const Stmt& s, const VarMap& map);

// Calls `fn` on every node of `e`, parents before children.
void Visit(const Expr& e, const std::function<void(const Expr&)>& fn);
// Calls `efn` on every expression root and `sfn` on every statement of `s`.
void VisitStmt(const Stmt& s, const std::function<void(const Expr&)>& efn,
               const std::function<void(const Stmt&)>& sfn = nullptr);

// Structural equality; variables compare by identity, buffers by identity.
bool StructEqual(const Expr& a, const Expr& b);

// True if `e` mentions any variable in `vars`.
bool UsesVar(const Expr& e, const std::unordered_map<const ExprNode*, bool>& vars);
bool UsesVar(const Expr& e, const ExprNode* var);

// The operands of a tree of ands, left to right: a && (b && c) -> a, b, c.
void Conjuncts(const Expr& c, std::vector<Expr>* out);

}  // namespace lathe::ir

#endif  // LATHE_IR_FUNCTOR_H_
