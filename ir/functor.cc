#include "ir/functor.h"

#include <utility>

namespace lathe::ir {

Expr WithOperands(const Expr& e, std::vector<Expr> ops) {
  bool same = ops.size() == e->operands.size();
  for (size_t i = 0; same && i < ops.size(); ++i) same = ops[i] == e->operands[i];
  if (same) return e;
  ExprKind k = e->kind;
  if (IsBinary(k)) return MakeBinary(k, ops[0], ops[1]);
  switch (k) {
    case ExprKind::kNot:
      return Not(ops[0]);
    case ExprKind::kSelect:
      return Select(ops[0], ops[1], ops[2]);
    case ExprKind::kCast:
      return Cast(e->type, ops[0]);
    case ExprKind::kCall:
      return Call(e->name, std::move(ops));
    case ExprKind::kTensorRead:
      return TensorRead(e->name, e->type.Element(), std::move(ops));
    case ExprKind::kLoad:
      return Load(e->buffer, ops[0], ops.size() > 1 ? ops[1] : nullptr);
    case ExprKind::kReduce:
      return Reduce(e->reduce_op, ops[0], e->reduce_axes, ops.size() > 1 ? ops[1] : nullptr);
    case ExprKind::kRamp:
      return Ramp(ops[0], ops[1], e->type.lanes);
    case ExprKind::kBroadcast:
      return Broadcast(ops[0], e->type.lanes);
    default:
      return e;  // leaves have no operands
  }
}

namespace {

Expr RewriteShared(const Expr& e, const std::function<Expr(const Expr&)>& fn, ExprMemo& memo) {
  if (!e) return e;
  return Memoized(e, &memo, [&] {
    return fn(MapOperands(e, [&](const Expr& o) { return RewriteShared(o, fn, memo); }));
  });
}

}  // namespace

Expr Rewrite(const Expr& e, const std::function<Expr(const Expr&)>& fn) {
  ExprMemo memo;
  return RewriteShared(e, fn, memo);
}

Stmt MapChildren(const Stmt& s, const std::function<Stmt(const Stmt&)>& fn) {
  if (!s) return s;
  switch (s->kind) {
    case StmtKind::kFor: {
      Stmt body = fn(s->body);
      return body == s->body ? s : For(s->var, s->min, s->extent, s->for_kind, body, s->thread_tag);
    }
    case StmtKind::kIfThenElse: {
      Stmt t = fn(s->body), f = s->else_body ? fn(s->else_body) : s->else_body;
      return t == s->body && f == s->else_body ? s : IfThenElse(s->cond, t, f);
    }
    case StmtKind::kSeq: {
      std::vector<Stmt> seq;
      bool same = true;
      for (const Stmt& x : s->seq) {
        seq.push_back(fn(x));
        same = same && seq.back() == x;
      }
      return same ? s : Seq(std::move(seq));
    }
    case StmtKind::kAllocate: {
      Stmt body = fn(s->body);
      return body == s->body ? s : Allocate(s->buffer, body);
    }
    case StmtKind::kStore:
      return s;
  }
  return s;
}

Stmt RewriteStmt(const Stmt& s, const std::function<Expr(const Expr&)>& fn,
                 const std::function<Stmt(const Stmt&)>& sfn) {
  if (!s) return s;
  auto ex = [&](const Expr& e) { return e ? Rewrite(e, fn) : e; };
  Stmt out;
  switch (s->kind) {
    case StmtKind::kFor: {
      Stmt body = RewriteStmt(s->body, fn, sfn);
      Expr mn = ex(s->min), ext = ex(s->extent);
      out = (body == s->body && mn == s->min && ext == s->extent)
                ? s
                : For(s->var, mn, ext, s->for_kind, body, s->thread_tag);
      break;
    }
    case StmtKind::kStore: {
      Expr idx = ex(s->index), val = ex(s->value), pred = ex(s->predicate);
      out = (idx == s->index && val == s->value && pred == s->predicate)
                ? s
                : Store(s->buffer, idx, val, pred);
      break;
    }
    case StmtKind::kIfThenElse: {
      Expr c = ex(s->cond);
      Stmt t = RewriteStmt(s->body, fn, sfn), f = RewriteStmt(s->else_body, fn, sfn);
      out = (c == s->cond && t == s->body && f == s->else_body) ? s : IfThenElse(c, t, f);
      break;
    }
    case StmtKind::kSeq: {
      std::vector<Stmt> seq;
      bool same = true;
      for (const Stmt& x : s->seq) {
        seq.push_back(RewriteStmt(x, fn, sfn));
        same = same && seq.back() == x;
      }
      out = same ? s : Seq(std::move(seq));
      break;
    }
    case StmtKind::kAllocate: {
      Stmt body = RewriteStmt(s->body, fn, sfn);
      out = body == s->body ? s : Allocate(s->buffer, body);
      break;
    }
  }
  return sfn ? sfn(out) : out;
}

Expr Substitute(const Expr& e, const VarMap& map) {
  if (map.empty()) return e;
  return Rewrite(e, [&](const Expr& x) {
    if (x->kind != ExprKind::kVar) return x;
    auto it = map.find(x.get());
    return it == map.end() ? x : it->second;
  });
}

Stmt Substitute(const Stmt& s, const VarMap& map) {
  if (map.empty()) return s;
  return RewriteStmt(s, [&](const Expr& x) {
    if (x->kind != ExprKind::kVar) return x;
    auto it = map.find(x.get());
    return it == map.end() ? x : it->second;
  });
}

void Visit(const Expr& e, const std::function<void(const Expr&)>& fn) {
  if (!e) return;
  fn(e);
  for (const Expr& o : e->operands) Visit(o, fn);
}

void VisitStmt(const Stmt& s, const std::function<void(const Expr&)>& efn,
               const std::function<void(const Stmt&)>& sfn) {
  if (!s) return;
  if (sfn) sfn(s);
  auto ex = [&](const Expr& e) {
    if (e && efn) efn(e);
  };
  ex(s->min);
  ex(s->extent);
  ex(s->index);
  ex(s->value);
  ex(s->predicate);
  ex(s->cond);
  VisitStmt(s->body, efn, sfn);
  VisitStmt(s->else_body, efn, sfn);
  for (const Stmt& x : s->seq) VisitStmt(x, efn, sfn);
}

bool StructEqual(const Expr& a, const Expr& b) {
  if (a == b) return true;
  if (!a || !b) return false;
  if (a->kind != b->kind || a->type != b->type) return false;
  switch (a->kind) {
    case ExprKind::kIntImm:
      return a->int_value == b->int_value;
    case ExprKind::kFloatImm:
      return a->float_value == b->float_value;
    case ExprKind::kVar:
      return false;  // identity already compared
    default:
      break;
  }
  if (a->name != b->name || a->buffer != b->buffer || a->reduce_op != b->reduce_op ||
      a->operands.size() != b->operands.size() || a->reduce_axes != b->reduce_axes) {
    return false;
  }
  for (size_t i = 0; i < a->operands.size(); ++i) {
    if (!StructEqual(a->operands[i], b->operands[i])) return false;
  }
  return true;
}

bool UsesVar(const Expr& e, const std::unordered_map<const ExprNode*, bool>& vars) {
  bool found = false;
  Visit(e, [&](const Expr& x) {
    if (x->kind == ExprKind::kVar && vars.count(x.get())) found = true;
  });
  return found;
}

bool UsesVar(const Expr& e, const ExprNode* var) {
  bool found = false;
  Visit(e, [&](const Expr& x) {
    if (x.get() == var) found = true;
  });
  return found;
}

void Conjuncts(const Expr& c, std::vector<Expr>* out) {
  if (c->kind == ExprKind::kAnd) {
    Conjuncts(c->operands[0], out);
    Conjuncts(c->operands[1], out);
    return;
  }
  out->push_back(c);
}

}  // namespace lathe::ir
