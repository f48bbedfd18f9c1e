#include "codegen/partition.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT: the pass speaks IR throughout

// The conjuncts of a condition that bound a range: a && (b && c) -> a, b, c, equalities left out.
void RangeConjuncts(const Expr& c, std::vector<Expr>* out) {
  if (c->kind == ExprKind::kAnd) {
    RangeConjuncts(c->operands[0], out);
    RangeConjuncts(c->operands[1], out);
    return;
  }
  // An equality picks single iterations, not a range to split off: the cases of an unrolled
  // position (ir/ops_winograd.cc's transforms, 36 of them) are decided by code generation once
  // the position is a constant, and splitting the loop at each one only multiplies the body.
  if (c->kind == ExprKind::kEQ || c->kind == ExprKind::kNE) return;
  out->push_back(c);
}

bool HasLoop(const Stmt& s) {
  bool found = false;
  VisitStmt(s, nullptr, [&](const Stmt& x) {
    if (x->kind == StmtKind::kFor) found = true;
  });
  return found;
}

class Partitioner {
 public:
  explicit Partitioner(const PartitionOptions& o) : opt_(o) {}

  Stmt Run(const Stmt& s, int depth) {
    if (s && s->kind == StmtKind::kFor) return RunFor(s, depth);
    return MapChildren(s, [&](const Stmt& c) { return Run(c, depth); });
  }

 private:
  // The range of a loop variable from its bounds, given the enclosing loops.
  ConstInterval LoopRange(const Stmt& f, const RangeMap& ranges) const {
    ConstInterval mn = ConstBound(f->min, ranges);
    ConstInterval ext = ConstBound(f->extent, ranges);
    if (!mn.bounded() || !ext.bounded()) return {};
    return {mn.lo, mn.hi + ext.hi - 1};
  }

  // The guards of a loop's body that depend on the loop, and the ranges they range over.
  struct BodyGuards {
    std::vector<Expr> conds;  // distinct, each mentioning the loop's variable
    RangeMap ranges;          // enclosing loops and the loops inside the body
    std::unordered_map<const ExprNode*, bool> inner;     // variables of the loops inside
    std::unordered_map<const ExprNode*, bool> unrolled;  // ... of the unrolled ones
  };

  BodyGuards Collect(const Stmt& f) const {
    BodyGuards g;
    g.ranges = outer_;
    std::vector<Expr> all;
    Guards(f->body, false, &all, &g);
    for (const Expr& c : all) {
      if (!UsesVar(c, f->var.get())) continue;
      bool dup = false;
      for (const Expr& x : g.conds) dup = dup || StructEqual(x, c);
      if (!dup) g.conds.push_back(c);
    }
    return g;
  }

  // Conditions that guard code inside a loop nested in `body` (the hot paths): if-conditions
  // and select conditions, split into conjuncts. Adds those loops to `g`'s ranges.
  void Guards(const Stmt& s, bool nested, std::vector<Expr>* out, BodyGuards* g,
              bool hot = false) const {
    if (!s) return;
    auto selects = [&](const Expr& e) {
      if (!e || !nested) return;
      Visit(e, [&](const Expr& x) {
        if (x->kind == ExprKind::kSelect && x->operands[0]->type.lanes == 1) {
          RangeConjuncts(x->operands[0], out);
        }
      });
    };
    switch (s->kind) {
      case StmtKind::kFor: {
        // A variable may head several loops (a reduction's init and update nest): the union.
        ConstInterval r = LoopRange(s, g->ranges);
        if (s->for_kind == ForKind::kUnrolled) g->unrolled[s->var.get()] = true;
        if (g->inner.emplace(s->var.get(), true).second) {
          g->ranges[s->var.get()] = r;
        } else {
          ConstInterval& u = g->ranges[s->var.get()];
          u = {std::min(u.lo, r.lo), std::max(u.hi, r.hi)};
        }
        Guards(s->body, true, out, g,
               hot || s->for_kind == ForKind::kUnrolled || s->for_kind == ForKind::kVectorized);
        return;
      }
      case StmtKind::kIfThenElse:
        // Guards under a vectorized loop count too: as lane masks they would cost a masked
        // load or store on every access of the tile. A guard around loops outside unrolled
        // code (a padded row skipped at the window's row loop, zero_taps.h) is one branch per
        // iteration of many products: not worth a copy of the code.
        if (nested && s->cond->type.lanes == 1 && (hot || !HasLoop(s->body))) {
          RangeConjuncts(s->cond, out);
        }
        selects(s->cond);
        Guards(s->body, nested, out, g, hot);
        Guards(s->else_body, nested, out, g, hot);
        return;
      case StmtKind::kSeq:
        for (const Stmt& x : s->seq) Guards(x, nested, out, g, hot);
        return;
      case StmtKind::kAllocate:
        Guards(s->body, nested, out, g, hot);
        return;
      case StmtKind::kStore:
        selects(s->index);
        selects(s->value);
        return;
    }
  }

  // The iterations [lo, hi] of loop `f` (range `r`) on which every guard of its body that
  // depends on it provably holds; nullopt when there is no such guard or range.
  // `raw` (optional) receives the clean range before the share check, unbounded where no
  // guard narrows it and empty (lo > hi) where the guards leave no iteration clean: PeelBorders
  // reads it for guards that fail on the first and last iterations only.
  std::optional<ConstInterval> CleanRange(const Stmt& f, ConstInterval r, BodyGuards g,
                                          ConstInterval* raw = nullptr) const {
    RangeMap& ranges = g.ranges;
    const ExprNode* var = f->var.get();
    auto holds = [&](const Expr& c, int64_t lo, int64_t hi) {
      ranges[var] = {lo, hi};
      return CanProve(c, ranges);
    };
    ConstInterval clean = r;
    bool any = false;
    for (const Expr& c : g.conds) {
      if (holds(c, r.lo, r.hi)) continue;  // true everywhere: simplification drops it anyway
      if (holds(c, r.lo, r.lo)) {
        // A prefix: the largest t with c true on [r.lo, t].
        int64_t good = r.lo, bad = r.hi;
        while (bad - good > 1) {
          int64_t mid = good + (bad - good) / 2;
          (holds(c, r.lo, mid) ? good : bad) = mid;
        }
        clean.hi = std::min(clean.hi, good);
      } else if (holds(c, r.hi, r.hi)) {
        // A suffix: the smallest t with c true on [t, r.hi].
        int64_t good = r.hi, bad = r.lo;
        while (good - bad > 1) {
          int64_t mid = bad + (good - bad) / 2;
          (holds(c, mid, r.hi) ? good : bad) = mid;
        }
        clean.lo = std::max(clean.lo, good);
      } else {
        continue;  // needed at both ends: no contiguous range without it
      }
      any = true;
    }
    if (raw != nullptr) *raw = any ? clean : ConstInterval{};
    if (!any || clean.lo > clean.hi) return std::nullopt;
    const double share =
        static_cast<double>(clean.hi - clean.lo + 1) / static_cast<double>(r.hi - r.lo + 1);
    if (share < opt_.min_clean_share) return std::nullopt;
    return clean;
  }

  // For loops whose guards hold on no contiguous range (a fused loop: the row of a tile is
  // the fused index modulo the tile count), a condition on the loop's and outer variables
  // under which every guard of the body that depends on the loop holds for all values of
  // the inner loops: each comparison at its worst case over the inner loops' ranges. Fills
  // `hoisted` with the conjuncts it covers; null when there are none.
  Expr CleanPredicate(const BodyGuards& g, std::vector<Expr>* hoisted) const {
    SymRangeMap sym;
    for (const auto& [v, in] : g.inner) {
      const ConstInterval& r = g.ranges.at(v);
      if (r.bounded()) sym[v] = {IntImm(r.lo), IntImm(r.hi)};
    }
    Expr pred;
    for (const Expr& c : g.conds) {
      if (c->operands.size() != 2) continue;
      const ExprKind k = c->kind;
      const bool upper = k == ExprKind::kLT || k == ExprKind::kLE;
      const bool lower = k == ExprKind::kGT || k == ExprKind::kGE;
      if ((!upper && !lower) || !c->operands[0]->type.is_int() || c->operands[0]->type.lanes != 1) {
        continue;
      }
      SymInterval d = EvalInterval(Simplify(Sub(c->operands[0], c->operands[1])), sym);
      if (!d.min) continue;
      const Expr& worst = upper ? d.max : d.min;
      if (UsesVar(worst, g.inner)) continue;
      Expr h = Simplify(MakeBinary(k, worst, IntImm(0)), outer_);
      if (h->kind == ExprKind::kIntImm) continue;  // never (or always) clean: nothing to gain
      hoisted->push_back(c);
      pred = pred ? And(pred, h) : h;
    }
    return pred;
  }

  Stmt RunFor(const Stmt& f, int depth) {
    const ConstInterval r = LoopRange(f, outer_);
    const ExprNode* var = f->var.get();
    const bool candidate = (f->for_kind == ForKind::kSerial || f->for_kind == ForKind::kParallel) &&
                           r.bounded() && r.hi > r.lo && depth < opt_.max_depth &&
                           versioned_ < opt_.max_loops && HasLoop(f->body);
    std::optional<ConstInterval> clean;
    std::vector<Expr> hoisted;
    Expr pred;
    if (candidate) {
      BodyGuards g = Collect(f);
      if (!g.conds.empty()) {
        ConstInterval raw;
        clean = CleanRange(f, r, g, &raw);
        if (Stmt peeled = PeelBorders(f, r, raw, g, depth); peeled) return peeled;
        if (!clean) pred = CleanPredicate(g, &hoisted);
      }
    }
    if (pred) {
      // The body with the hoisted guards true, under the predicate.
      ++versioned_;
      Stmt fast = RewriteStmt(f->body, [&](const Expr& x) -> Expr {
        for (const Expr& h : hoisted) {
          if (x->kind == h->kind && StructEqual(x, h)) return BoolImm(true);
        }
        return x;
      });
      outer_[var] = r;
      fast = Run(SimplifyStmt(fast, outer_), depth + 1);
      Stmt slow = opt_.version_slow_copies ? Run(f->body, depth + 1) : f->body;
      outer_.erase(var);
      return For(f->var, f->min, f->extent, f->for_kind, IfThenElse(pred, fast, slow),
                 f->thread_tag);
    }
    if (!clean) {
      outer_[var] = r;
      Stmt body = Run(f->body, depth);
      outer_.erase(var);
      if (body == f->body) return f;
      return For(f->var, f->min, f->extent, f->for_kind, body, f->thread_tag);
    }
    ++versioned_;
    RangeMap narrowed = outer_;
    narrowed[var] = *clean;
    Stmt fast = SimplifyStmt(f->body, narrowed);
    outer_[var] = *clean;
    fast = Run(fast, depth + 1);
    outer_[var] = r;
    Stmt slow = opt_.version_slow_copies ? Run(f->body, depth + 1) : f->body;
    outer_.erase(var);
    Expr cond;
    if (clean->lo > r.lo) cond = GE(f->var, IntImm(clean->lo));
    if (clean->hi < r.hi) {
      Expr le = LE(f->var, IntImm(clean->hi));
      cond = cond ? And(cond, le) : le;
    }
    Stmt body = cond ? IfThenElse(cond, fast, slow) : fast;
    return For(f->var, f->min, f->extent, f->for_kind, body, f->thread_tag);
  }

  // Guards that fail on the first and on the last iteration only (a tile of columns whose
  // first and last tiles touch the padding on either side): those two iterations each get a
  // copy of the body with the loop's variable a constant, in which the guards of unrolled
  // taps fold away (zero_taps.h), and the iterations between get the guard-free copy. The
  // copies are not versioned further (as PartitionOptions::version_slow_copies). Null where
  // the guards' range is not of that shape, or where every guard would still vary in a copy
  // (each reads a variable other than the loop's, those of unrolled loops inside and those of
  // one iteration): there the copies gain nothing over CleanRange's one guarded copy.
  Stmt PeelBorders(const Stmt& f, ConstInterval r, ConstInterval clean, const BodyGuards& g,
                   int depth) {
    if (!opt_.peel_borders || !clean.bounded() || clean.lo != r.lo + 1 || clean.hi != r.hi - 1) {
      return nullptr;
    }
    bool any_folds = false;
    for (const Expr& c : g.conds) {
      bool folds = true;
      Visit(c, [&](const Expr& x) {
        if (x->kind != ExprKind::kVar || x.get() == f->var.get() || g.unrolled.count(x.get())) {
          return;
        }
        auto r = g.ranges.find(x.get());
        if (r == g.ranges.end() || r->second.lo != r->second.hi) folds = false;  // varies
      });
      any_folds = any_folds || folds;
    }
    if (!any_folds) return nullptr;
    ++versioned_;
    const ExprNode* var = f->var.get();
    // Without iterations between them the two copies are the hot path: versioned further (a
    // row of two column tiles over a block of 200 channels, 13 vectors: the guard of the
    // last, partial vector split off; unsplit, every access of the tile was masked, the
    // accumulators kept in memory: depthwise 3x3 at 28x28 56 -> 19 us, Zen 4).
    const bool hot_copies = clean.lo > clean.hi;
    auto at = [&](int64_t v) {
      RangeMap ranges = outer_;
      ranges[var] = {v, v};
      Stmt b = SimplifyStmt(Substitute(f->body, VarMap{{var, IntImm(v)}}), ranges);
      return opt_.version_slow_copies || hot_copies ? Run(b, depth + 1) : b;
    };
    Stmt last = at(r.hi);
    Stmt body;
    if (clean.lo <= clean.hi) {
      RangeMap narrowed = outer_;
      narrowed[var] = clean;
      Stmt fast = SimplifyStmt(f->body, narrowed);
      outer_[var] = clean;
      fast = Run(fast, depth + 1);
      outer_.erase(var);
      body = IfThenElse(LT(f->var, IntImm(r.hi)), fast, last);
    } else {
      body = last;  // two iterations: the first and the last
    }
    body = IfThenElse(EQ(f->var, IntImm(r.lo)), at(r.lo), body);
    return For(f->var, f->min, f->extent, f->for_kind, body, f->thread_tag);
  }

  PartitionOptions opt_;
  RangeMap outer_;  // enclosing loop variables
  int versioned_ = 0;
};

}  // namespace

Stmt PartitionLoops(const Stmt& s, const PartitionOptions& options) {
  Partitioner p(options);
  return p.Run(s, 0);
}

}  // namespace lathe::codegen
