#include "ir/stmt.h"

#include <utility>

namespace lathe::ir {

namespace {
std::shared_ptr<StmtNode> New(StmtKind kind) {
  auto n = std::make_shared<StmtNode>();
  n->kind = kind;
  return n;
}
}  // namespace

const char* ForKindName(ForKind kind) {
  switch (kind) {
    case ForKind::kSerial:
      return "for";
    case ForKind::kParallel:
      return "parallel";
    case ForKind::kVectorized:
      return "vectorized";
    case ForKind::kUnrolled:
      return "unrolled";
    case ForKind::kThreadBinding:
      return "bind";
  }
  return "?";
}

Stmt For(Expr var, Expr min, Expr extent, ForKind kind, Stmt body, std::string thread_tag) {
  auto n = New(StmtKind::kFor);
  n->var = std::move(var);
  n->min = std::move(min);
  n->extent = std::move(extent);
  n->for_kind = kind;
  n->body = std::move(body);
  n->thread_tag = std::move(thread_tag);
  return n;
}

Stmt Store(Buffer buffer, Expr index, Expr value, Expr predicate) {
  auto n = New(StmtKind::kStore);
  n->buffer = std::move(buffer);
  n->index = std::move(index);
  n->value = std::move(value);
  n->predicate = std::move(predicate);
  return n;
}

Stmt IfThenElse(Expr cond, Stmt then_case, Stmt else_case) {
  auto n = New(StmtKind::kIfThenElse);
  n->cond = std::move(cond);
  n->body = std::move(then_case);
  n->else_body = std::move(else_case);
  return n;
}

Stmt Seq(std::vector<Stmt> stmts) {
  std::vector<Stmt> flat;
  for (Stmt& s : stmts) {
    if (!s) continue;
    if (s->kind == StmtKind::kSeq) {
      flat.insert(flat.end(), s->seq.begin(), s->seq.end());
    } else {
      flat.push_back(std::move(s));
    }
  }
  if (flat.size() == 1) return flat[0];
  auto n = New(StmtKind::kSeq);
  n->seq = std::move(flat);
  return n;
}

Stmt Allocate(Buffer buffer, Stmt body) {
  auto n = New(StmtKind::kAllocate);
  n->buffer = std::move(buffer);
  n->body = std::move(body);
  return n;
}

}  // namespace lathe::ir
