// Vectorization of loops marked kVectorized: the loop variable becomes a Ramp, expressions
// widen to vectors, and guards that depend on the lane become store and load masks.
#include <optional>
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
  Vectorizer(const ExprNode* var, Expr ramp) : var_(var), ramp_(std::move(ramp)) {}

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
        return Store(s->buffer, idx, val, mask);
      }
      case StmtKind::kIfThenElse: {
        Expr c = VecExpr(s->cond, mask);
        if (c->type.lanes == 1) {
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
        auto body = VecStmt(s->body, mask);
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

  // The operands of a tree of ands.
  static void Conjuncts(const Expr& e, std::vector<Expr>* out) {
    if (e->kind == ExprKind::kAnd) {
      Conjuncts(e->operands[0], out);
      Conjuncts(e->operands[1], out);
      return;
    }
    out->push_back(e);
  }

  // Adds `mask` as the predicate of every vector load in `e`.
  static Expr MaskLoads(const Expr& e, const Expr& mask) {
    if (!mask) return e;
    return Rewrite(e, [&](const Expr& x) -> Expr {
      if (x->kind != ExprKind::kLoad || x->type.lanes == 1) return x;
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
};

}  // namespace

Stmt VectorizeLoops(const Stmt& s) {
  return RewriteStmt(
      s, [](const Expr& e) { return e; },
      [](const Stmt& x) -> Stmt {
        if (x->kind != StmtKind::kFor || x->for_kind != ForKind::kVectorized) return x;
        int64_t n = 0;
        bool const_extent = AsConstInt(x->extent, &n);
        auto fallback = [&]() {
          ForKind k = const_extent && n <= 64 ? ForKind::kUnrolled : ForKind::kSerial;
          return For(x->var, x->min, x->extent, k, x->body);
        };
        if (!const_extent || n <= 1) return fallback();
        Vectorizer v(x->var.get(), Ramp(x->min, IntImm(1), static_cast<int>(n)));
        auto out = v.VecStmt(x->body, nullptr);
        if (!out) return fallback();
        return *out;
      });
}

}  // namespace lathe::codegen
