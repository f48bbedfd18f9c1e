// Vectorization of loops marked kVectorized: the loop variable becomes a Ramp, expressions
// widen to vectors, and guards that depend on the lane become store and load masks.
#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "codegen/lower.h"
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT

class Vectorizer {
 public:
  // `ranges`: the variables of the loops around the vectorized one.
  Vectorizer(const ExprNode* var, Expr ramp, RangeMap ranges)
      : var_(var), ramp_(std::move(ramp)), ranges_(std::move(ranges)) {}

  // Returns nullopt when the statement cannot be vectorized.
  std::optional<Stmt> VecStmt(const Stmt& s, const Expr& mask) {
    if (!s) return Stmt();
    switch (s->kind) {
      case StmtKind::kStore: {
        Expr idx = VecExpr(s->index, mask);
        Expr val = VecExpr(s->value, mask);
        int n = lanes();
        if (idx->type.lanes == 1) {
          if (val->type.lanes != 1 || mask) return std::nullopt;  // a reduction across lanes
          return Store(s->buffer, idx, val);
        }
        if (val->type.lanes == 1) val = Broadcast(val, n);
        // A thread-local scratch buffer (an accumulator tile) stores every lane when all
        // lanes are inside it: the lanes a guard masks hold positions past the tensor's
        // edge, which only masked consumers read. Unmasked, the tile stays in registers.
        if (mask && InsideLocal(s->buffer, idx)) return Store(s->buffer, idx, val);
        return Store(s->buffer, idx, val, mask);
      }
      case StmtKind::kIfThenElse: {
        Expr c = VecExpr(s->cond, mask);
        if (c->type.lanes == 1) {
          if (!s->else_body) {
            if (auto folded = FoldGuard(c, nullptr, s->body, mask)) return *folded;
          }
          auto t = VecStmt(s->body, mask);
          auto f = VecStmt(s->else_body, mask);
          if (!t || !f) return std::nullopt;
          return IfThenElse(c, *t, *f ? *f : nullptr);
        }
        if (!s->else_body) {
          // Conjuncts that do not depend on the lane (a row guard of a tile that sticks out
          // of its tensor) stay a scalar branch around the vector body: a mask covers only
          // the vector loads, and a broadcast load under a false row guard would read past
          // the end of its buffer.
          std::vector<Expr> conj;
          Conjuncts(c, &conj);
          Expr scalar, vec;
          for (Expr x : conj) {
            // A broadcast condition is the same in every lane.
            if (x->kind == ExprKind::kBroadcast) x = x->operands[0];
            Expr& to = x->type.lanes == 1 ? scalar : vec;
            to = to ? And(to, x) : x;
          }
          if (scalar) {
            if (auto folded = FoldGuard(scalar, vec, s->body, mask)) return *folded;
            Expr mt = !vec ? mask : mask ? And(mask, vec) : vec;
            auto t = VecStmt(s->body, mt);
            if (!t) return std::nullopt;
            return IfThenElse(scalar, *t);
          }
        }
        Expr mt = mask ? And(mask, c) : c;
        auto t = VecStmt(s->body, mt);
        if (!t) return std::nullopt;
        if (!s->else_body) return *t;
        Expr mf = mask ? And(mask, Not(c)) : Not(c);
        auto f = VecStmt(s->else_body, mf);
        if (!f) return std::nullopt;
        return Seq({*t, *f});
      }
      case StmtKind::kFor: {
        if (UsesVar(s->extent, var_) || UsesVar(s->min, var_)) return std::nullopt;
        if (s->for_kind == ForKind::kParallel || s->for_kind == ForKind::kVectorized) {
          return std::nullopt;
        }
        ConstInterval mn = ConstBound(s->min, ranges_), ext = ConstBound(s->extent, ranges_);
        if (mn.bounded() && ext.bounded()) ranges_[s->var.get()] = {mn.lo, mn.hi + ext.hi - 1};
        auto body = VecStmt(s->body, mask);
        ranges_.erase(s->var.get());
        if (!body) return std::nullopt;
        return For(s->var, s->min, s->extent, s->for_kind, *body, s->thread_tag);
      }
      case StmtKind::kSeq: {
        std::vector<Stmt> seq;
        for (const Stmt& x : s->seq) {
          auto v = VecStmt(x, mask);
          if (!v) return std::nullopt;
          seq.push_back(*v);
        }
        return Seq(std::move(seq));
      }
      case StmtKind::kAllocate:
        return std::nullopt;
    }
    return std::nullopt;
  }

 private:
  int lanes() const { return ramp_->type.lanes; }

  // True for a contiguous vector access of a thread-local buffer whose lanes stay in one row
  // of its innermost dimension: each lane then is the element of the tile it names, and a
  // lane that a guard masks is a position past the tensor's edge (the guards that keep
  // indices inside the buffer would let lanes wrap into the next row: excluded).
  bool InsideLocal(const Buffer& b, const Expr& index) const {
    if (b->scope != "local" || b->shape.empty() || index->kind != ExprKind::kRamp) return false;
    int64_t stride;
    if (!AsConstInt(index->operands[1], &stride) || stride != 1) return false;
    const int64_t row = b->shape.back();
    const Expr& base = index->operands[0];
    ConstInterval iv = ConstBound(base, ranges_);
    if (!iv.bounded() || iv.lo < 0 || iv.hi + index->type.lanes > b->size()) return false;
    ConstInterval in_row = ConstBound(Simplify(Mod(base, IntImm(row)), ranges_), ranges_);
    return in_row.bounded() && in_row.lo >= 0 && in_row.hi + index->type.lanes <= row;
  }

  // A body that only accumulates into a local tile, and whose scalar loads stay in their
  // buffers whatever the guard says, runs unguarded with the guard (`scalar` and `vec`
  // conjuncts) as a lane mask: the rows past the tensor's edge compute garbage that nobody
  // reads, and the tile stays in registers (a branch around it keeps it in memory).
  //
  // A guard on a variable the stored position does not depend on (a reduce loop's tail)
  // masks an update of an element that is read: folded, the update must leave it as it was.
  // Only a sum whose added term is a product of a masked load does (a masked load reads 0); a
  // max of a masked load would take 0 in.
  std::optional<Stmt> FoldGuard(const Expr& scalar, const Expr& vec, const Stmt& body,
                                const Expr& mask) {
    Expr m = Broadcast(scalar, lanes());
    if (vec) m = And(m, vec);
    if (mask) m = And(mask, m);
    auto folded = VecStmt(body, m);
    RangeMap inner = ranges_;
    if (!folded || !*folded || !Predicable(*folded, inner)) return std::nullopt;
    std::unordered_map<const ExprNode*, bool> guard_vars;
    Visit(scalar, [&](const Expr& x) {
      if (x->kind == ExprKind::kVar) guard_vars[x.get()] = true;
    });
    if (!UpdatesKeepMaskedElements(*folded, guard_vars)) return std::nullopt;
    return folded;
  }

  // True when every store of `s` either writes a position that depends on all the guard's
  // variables (the masked lanes are positions nobody reads), or a value that does not depend
  // on them, or adds to its own element a product with a masked load (the masked lanes add 0).
  static bool UpdatesKeepMaskedElements(
      const Stmt& s, const std::unordered_map<const ExprNode*, bool>& guard_vars) {
    if (!s) return true;
    switch (s->kind) {
      case StmtKind::kStore: {
        bool spatial = true;
        for (const auto& [v, unused] : guard_vars) {
          spatial = spatial && UsesVar(s->index, v);
        }
        if (spatial) return true;
        const Expr& val = s->value;
        // The same value whatever the guard's variables (a tile's initial value): storing it
        // again is harmless.
        bool invariant = true;
        for (const auto& [v, unused] : guard_vars) invariant = invariant && !UsesVar(val, v);
        bool reads_self = false;
        Visit(val, [&](const Expr& x) {
          reads_self =
              reads_self || (x->kind == ExprKind::kLoad && x->buffer.get() == s->buffer.get());
        });
        if (invariant && !reads_self) return true;
        if (val->kind != ExprKind::kAdd) return false;
        for (int side = 0; side < 2; ++side) {
          const Expr& self = val->operands[side];
          const Expr& term = val->operands[1 - side];
          if (self->kind != ExprKind::kLoad || self->buffer.get() != s->buffer.get() ||
              !StructEqual(self->operands[0], s->index)) {
            continue;
          }
          if (ProductWithMaskedLoad(term)) return true;
        }
        return false;
      }
      case StmtKind::kFor:
        return UpdatesKeepMaskedElements(s->body, guard_vars);
      case StmtKind::kIfThenElse:
        return UpdatesKeepMaskedElements(s->body, guard_vars) &&
               UpdatesKeepMaskedElements(s->else_body, guard_vars);
      case StmtKind::kSeq:
        for (const Stmt& x : s->seq) {
          if (!UpdatesKeepMaskedElements(x, guard_vars)) return false;
        }
        return true;
      case StmtKind::kAllocate:
        return false;
    }
    return false;
  }

  // A product (of any depth) one of whose factors is a predicated vector load.
  static bool ProductWithMaskedLoad(const Expr& e) {
    if (e->kind == ExprKind::kLoad) return e->operands.size() > 1 && e->type.lanes > 1;
    if (e->kind == ExprKind::kMul) {
      return ProductWithMaskedLoad(e->operands[0]) || ProductWithMaskedLoad(e->operands[1]);
    }
    return false;
  }

  // True when `s` stores only unmasked (local, in-bounds) and every scalar load in it is
  // inside its buffer for all values of the loops around it (`ranges`).
  static bool Predicable(const Stmt& s, RangeMap& ranges) {
    if (!s) return true;
    auto loads_inside = [&](const Expr& e) {
      bool ok = true;
      if (!e) return ok;
      Visit(e, [&](const Expr& x) {
        if (!ok || x->kind != ExprKind::kLoad || x->type.lanes != 1) return;
        ConstInterval iv = ConstBound(x->operands[0], ranges);
        ok = iv.bounded() && iv.lo >= 0 && iv.hi < x->buffer->size();
      });
      return ok;
    };
    switch (s->kind) {
      case StmtKind::kStore:
        return !s->predicate && loads_inside(s->index) && loads_inside(s->value);
      case StmtKind::kFor: {
        ConstInterval mn = ConstBound(s->min, ranges), ext = ConstBound(s->extent, ranges);
        if (!mn.bounded() || !ext.bounded()) return false;
        ranges[s->var.get()] = {mn.lo, mn.hi + ext.hi - 1};
        bool ok = Predicable(s->body, ranges);
        ranges.erase(s->var.get());
        return ok;
      }
      case StmtKind::kIfThenElse:
        return loads_inside(s->cond) && Predicable(s->body, ranges) &&
               Predicable(s->else_body, ranges);
      case StmtKind::kSeq:
        for (const Stmt& x : s->seq) {
          if (!Predicable(x, ranges)) return false;
        }
        return true;
      case StmtKind::kAllocate:
        return false;
    }
    return false;
  }

  // Adds `mask` as the predicate of every vector load in `e` but those of local buffers
  // that stay inside them (see the store case).
  Expr MaskLoads(const Expr& e, const Expr& mask) const {
    if (!mask) return e;
    return Rewrite(e, [&](const Expr& x) -> Expr {
      if (x->kind != ExprKind::kLoad || x->type.lanes == 1) return x;
      if (InsideLocal(x->buffer, x->operands[0])) return x;
      Expr pred = x->operands.size() > 1 ? And(x->operands[1], mask) : mask;
      return Load(x->buffer, x->operands[0], pred);
    });
  }

  Expr VecExpr(const Expr& e, const Expr& mask) {
    Expr v = Rewrite(e, [&](const Expr& x) -> Expr {
      if (x.get() == var_) return ramp_;
      if (x->kind == ExprKind::kSelect && x->operands[0]->type.lanes > 1) {
        // Only the chosen side may be read.
        const Expr& c = x->operands[0];
        return Select(c, MaskLoads(x->operands[1], c), MaskLoads(x->operands[2], Not(c)));
      }
      return x;
    });
    return MaskLoads(Simplify(v), mask);
  }

  const ExprNode* var_;
  Expr ramp_;
  RangeMap ranges_;
};

// Vectorizes inner loops first (as a bottom-up rewrite would), knowing the ranges of the
// loops around each one.
Stmt Walk(const Stmt& s, RangeMap& ranges) {
  if (!s || s->kind != StmtKind::kFor) {
    return MapChildren(s, [&](const Stmt& c) { return Walk(c, ranges); });
  }
  ConstInterval mn = ConstBound(s->min, ranges), ext = ConstBound(s->extent, ranges);
  const bool bounded = mn.bounded() && ext.bounded();
  if (bounded) ranges[s->var.get()] = {mn.lo, mn.hi + ext.hi - 1};
  Stmt body = Walk(s->body, ranges);
  if (bounded) ranges.erase(s->var.get());
  Stmt x = body == s->body ? s : For(s->var, s->min, s->extent, s->for_kind, body, s->thread_tag);
  if (x->for_kind != ForKind::kVectorized) return x;
  int64_t n = 0;
  bool const_extent = AsConstInt(x->extent, &n);
  auto fallback = [&]() {
    ForKind k = const_extent && n <= 64 ? ForKind::kUnrolled : ForKind::kSerial;
    return For(x->var, x->min, x->extent, k, x->body);
  };
  if (!const_extent || n <= 1) return fallback();
  Vectorizer v(x->var.get(), Ramp(x->min, IntImm(1), static_cast<int>(n)), ranges);
  auto out = v.VecStmt(x->body, nullptr);
  if (!out) return fallback();
  return *out;
}

}  // namespace

Stmt VectorizeLoops(const Stmt& s) {
  RangeMap ranges;
  return Walk(s, ranges);
}

}  // namespace lathe::codegen
