#include "codegen/zero_taps.h"

#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT: the pass speaks IR throughout

bool IsZero(const Expr& e) {
  if (e->kind == ExprKind::kBroadcast) return IsZero(e->operands[0]);
  if (e->kind == ExprKind::kFloatImm) return e->float_value == 0.0;
  if (e->kind == ExprKind::kIntImm) return e->int_value == 0;
  return false;
}

Expr AndAll(const std::vector<Expr>& cs) {
  Expr out;
  for (const Expr& c : cs) out = out ? And(out, c) : c;
  return out;
}

class ZeroTaps {
 public:
  bool padded() const { return padded_; }

  Stmt Run(const Stmt& s) {
    if (!s) return s;
    switch (s->kind) {
      case StmtKind::kFor: {
        Loop& l = loops_[s->var.get()];
        // A loop of one iteration (a one-row tile's unrolled row loop) neither multiplies the
        // guards inside it nor varies: a constant, and cold.
        const bool single = IsConstInt(s->extent, 1);
        l.hot =
            !single && (s->for_kind == ForKind::kVectorized || s->for_kind == ForKind::kUnrolled);
        l.lanes = s->for_kind == ForKind::kVectorized;
        l.folds = s->for_kind == ForKind::kUnrolled || single;
        Stmt body = Run(s->body);
        loops_.erase(s->var.get());
        return Lift(s, body);
      }
      case StmtKind::kStore:
        return Rewrite(s);
      default:
        return MapChildren(s, [&](const Stmt& c) { return Run(c); });
    }
  }

 private:
  struct Loop {
    bool hot = false;    // unrolled or vectorized: a guard inside is one per product
    bool lanes = false;  // vectorized: a guard on it is a lane mask
    bool folds = false;  // unrolled, or one iteration: a constant in the generated code
  };

  // Whether conjunct `c` of a padding's select becomes a guard: where it will be a constant
  // (it reads only unrolled loops and loops of one iteration: a border tap disappears from the
  // code) or where it can rise above the unrolled and vectorized loops (it reads none of them:
  // one branch per iteration of a loop holding many products). Anywhere else a branch per
  // product would cost more than the select's blend: it stays a select (PartitionLoops may
  // still peel the loop it reads, and the pass after it fold it: lower.h).
  bool GuardWorthy(const Expr& c) const {
    bool folds = true, cold = true, lanes = false;
    Visit(c, [&](const Expr& x) {
      if (x->kind != ExprKind::kVar) return;
      auto it = loops_.find(x.get());
      if (it == loops_.end()) {
        folds = false;
        return;
      }
      folds = folds && it->second.folds;
      cold = cold && !it->second.hot;
      lanes = lanes || it->second.lanes;
    });
    return !lanes && (folds || cold);
  }

  // `e` with each select(c, x, 0) among its factors replaced by x, or by select(c', x, 0)
  // where only some conjuncts of c are worth a guard (GuardWorthy), those added to `conds`:
  // through products, casts and broadcasts only (where a zero operand makes the whole
  // expression zero).
  Expr Strip(const Expr& e, std::vector<Expr>* conds) {
    switch (e->kind) {
      case ExprKind::kSelect: {
        const Expr& c = e->operands[0];
        if (c->type.lanes != 1 || !IsZero(e->operands[2])) return e;
        padded_ = true;
        std::vector<Expr> all, rest;
        Conjuncts(c, &all);
        for (const Expr& x : all) {
          if (GuardWorthy(x)) {
            conds->push_back(x);
            ours_.insert(x.get());
          } else {
            rest.push_back(x);
          }
        }
        if (rest.size() == all.size()) return e;
        Expr t = Strip(e->operands[1], conds);
        return rest.empty() ? t : Select(AndAll(rest), t, e->operands[2]);
      }
      case ExprKind::kMul:
      case ExprKind::kCast:
      case ExprKind::kBroadcast:
        return MapOperands(e, [&](const Expr& o) { return Strip(o, conds); });
      default:
        return e;
    }
  }

  // acc[i] = acc[i] + P, P holding a zero-padded factor -> if (c) acc[i] = acc[i] + P'.
  Stmt Rewrite(const Stmt& s) {
    const Expr& v = s->value;
    if (s->predicate || v->kind != ExprKind::kAdd) return s;
    for (int side = 0; side < 2; ++side) {
      const Expr& acc = v->operands[side];
      if (acc->kind != ExprKind::kLoad || acc->buffer != s->buffer || acc->operands.size() != 1 ||
          !StructEqual(acc->operands[0], s->index)) {
        continue;
      }
      std::vector<Expr> conds;
      Expr p = Strip(v->operands[1 - side], &conds);
      if (conds.empty()) return s;
      Expr sum = side == 0 ? Add(acc, p) : Add(p, acc);
      return IfThenElse(AndAll(conds), Store(s->buffer, s->index, sum));
    }
    return s;
  }

  // A loop whose whole body is a guard (or guards nested without else branches): the
  // conjuncts this pass made that do not mention the loop move above it. The lowering's own
  // guards (a tile's tail) stay where they are: loop versioning looks for them there.
  Stmt Lift(const Stmt& f, const Stmt& body) {
    auto rebuilt = [&](const Stmt& b) {
      return b == f->body ? f : For(f->var, f->min, f->extent, f->for_kind, b, f->thread_tag);
    };
    if (f->for_kind == ForKind::kParallel || f->for_kind == ForKind::kThreadBinding) {
      return rebuilt(body);
    }
    std::vector<Expr> all;
    Stmt inner = body;
    while (inner->kind == StmtKind::kIfThenElse && !inner->else_body) {
      Conjuncts(inner->cond, &all);
      inner = inner->body;
    }
    // A loop of one iteration (a tile's extent-1 axis) is its first value.
    const bool single = IsConstInt(f->extent, 1);
    std::vector<Expr> keep, lift;
    for (const Expr& c : all) {
      if (!ours_.count(c.get())) {
        keep.push_back(c);
      } else if (!UsesVar(c, f->var.get())) {
        lift.push_back(c);
      } else if (single) {
        Expr first = Simplify(Substitute(c, VarMap{{f->var.get(), f->min}}));
        ours_.insert(first.get());
        lift.push_back(std::move(first));
      } else {
        keep.push_back(c);
      }
    }
    if (lift.empty()) return rebuilt(body);
    if (!keep.empty()) inner = IfThenElse(AndAll(keep), inner);
    return IfThenElse(AndAll(lift), rebuilt(inner));
  }

  // The guards this pass made (their conjuncts' nodes).
  std::unordered_set<const ExprNode*> ours_;
  std::unordered_map<const ExprNode*, Loop> loops_;  // the enclosing loops
  bool padded_ = false;                              // saw a padding's select in a product
};

}  // namespace

Stmt SkipZeroTaps(const Stmt& s, bool* padded) {
  ZeroTaps pass;
  Stmt out = pass.Run(s);
  if (padded != nullptr) *padded = pass.padded();
  return out;
}

}  // namespace lathe::codegen
