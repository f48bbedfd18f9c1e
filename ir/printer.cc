#include "ir/printer.h"

#include <sstream>

#include "fmt/format.h"

namespace lathe::ir {

namespace {

const char* BinOp(ExprKind k) {
  switch (k) {
    case ExprKind::kAdd:
      return " + ";
    case ExprKind::kSub:
      return " - ";
    case ExprKind::kMul:
      return "*";
    case ExprKind::kDiv:
      return "/";
    case ExprKind::kMod:
      return " % ";
    case ExprKind::kEQ:
      return " == ";
    case ExprKind::kNE:
      return " != ";
    case ExprKind::kLT:
      return " < ";
    case ExprKind::kLE:
      return " <= ";
    case ExprKind::kGT:
      return " > ";
    case ExprKind::kGE:
      return " >= ";
    case ExprKind::kAnd:
      return " && ";
    case ExprKind::kOr:
      return " || ";
    default:
      return nullptr;
  }
}

std::string Join(const std::vector<Expr>& v, size_t from = 0, size_t to = size_t(-1)) {
  std::string s;
  for (size_t i = from; i < v.size() && i < to; ++i) {
    if (i > from) s += ", ";
    s += ToText(v[i]);
  }
  return s;
}

}  // namespace

std::string ToText(const Expr& e) {
  if (!e) return "<null>";
  const auto& o = e->operands;
  switch (e->kind) {
    case ExprKind::kIntImm:
      if (e->type.is_bool()) return e->int_value ? "true" : "false";
      return std::to_string(e->int_value);
    case ExprKind::kFloatImm:
      return fmt::format("{}f", e->float_value);
    case ExprKind::kVar:
      return e->name;
    case ExprKind::kMin:
      return "min(" + ToText(o[0]) + ", " + ToText(o[1]) + ")";
    case ExprKind::kMax:
      return "max(" + ToText(o[0]) + ", " + ToText(o[1]) + ")";
    case ExprKind::kNot:
      return "!(" + ToText(o[0]) + ")";
    case ExprKind::kSelect:
      return "select(" + Join(o) + ")";
    case ExprKind::kCast:
      return e->type.ToString() + "(" + ToText(o[0]) + ")";
    case ExprKind::kCall:
      return e->name + "(" + Join(o) + ")";
    case ExprKind::kTensorRead:
      return e->name + "[" + Join(o) + "]";
    case ExprKind::kLoad: {
      std::string s = e->buffer->name + "[" + ToText(o[0]) + "]";
      if (o.size() > 1) s += " if " + ToText(o[1]);
      return s;
    }
    case ExprKind::kReduce: {
      const char* op = e->reduce_op == ReduceOp::kSum   ? "sum"
                       : e->reduce_op == ReduceOp::kMax ? "max"
                                                        : "min";
      std::string axes;
      for (const IterVar& iv : e->reduce_axes) {
        axes += fmt::format(", {} in 0..{}", iv->var->name, iv->extent);
      }
      std::string cond = o.size() > 1 ? ", where " + ToText(o[1]) : "";
      return fmt::format("{}({}{}{})", op, ToText(o[0]), axes, cond);
    }
    case ExprKind::kRamp:
      return fmt::format("ramp({}, {}, {})", ToText(o[0]), ToText(o[1]), e->type.lanes);
    case ExprKind::kBroadcast:
      return fmt::format("x{}({})", e->type.lanes, ToText(o[0]));
    default:
      break;
  }
  const char* op = BinOp(e->kind);
  auto paren = [](const Expr& x) {
    std::string s = ToText(x);
    bool leaf = x->kind == ExprKind::kVar || x->kind == ExprKind::kIntImm ||
                x->kind == ExprKind::kFloatImm || x->kind == ExprKind::kLoad ||
                x->kind == ExprKind::kTensorRead || x->kind == ExprKind::kCall ||
                x->kind == ExprKind::kMin || x->kind == ExprKind::kMax;
    return leaf ? s : "(" + s + ")";
  };
  if (e->kind == ExprKind::kAdd) return ToText(o[0]) + op + paren(o[1]);
  return paren(o[0]) + op + paren(o[1]);
}

std::string ToText(const Stmt& s, int indent) {
  if (!s) return "";
  std::string pad(indent * 2, ' ');
  switch (s->kind) {
    case StmtKind::kFor: {
      std::string head = fmt::format("{}{} {} in {}..{}", pad, ForKindName(s->for_kind),
                                     s->var->name, ToText(s->min), ToText(s->extent));
      if (!s->thread_tag.empty()) head += " (" + s->thread_tag + ")";
      return head + " {\n" + ToText(s->body, indent + 1) + pad + "}\n";
    }
    case StmtKind::kStore: {
      std::string s1 =
          fmt::format("{}{}[{}] = {}", pad, s->buffer->name, ToText(s->index), ToText(s->value));
      if (s->predicate) s1 += " if " + ToText(s->predicate);
      return s1 + "\n";
    }
    case StmtKind::kIfThenElse: {
      std::string r = pad + "if " + ToText(s->cond) + " {\n" + ToText(s->body, indent + 1);
      if (s->else_body) r += pad + "} else {\n" + ToText(s->else_body, indent + 1);
      return r + pad + "}\n";
    }
    case StmtKind::kSeq: {
      std::string r;
      for (const Stmt& x : s->seq) r += ToText(x, indent);
      return r;
    }
    case StmtKind::kAllocate: {
      std::string shape;
      for (size_t i = 0; i < s->buffer->shape.size(); ++i) {
        shape += (i ? ", " : "") + std::to_string(s->buffer->shape[i]);
      }
      return fmt::format("{}alloc {}[{}] {} {}\n", pad, s->buffer->name, shape,
                         s->buffer->dtype.ToString(), s->buffer->scope) +
             ToText(s->body, indent);
    }
  }
  return "";
}

std::string ToText(const LoweredFunc& f) {
  std::string args;
  for (size_t i = 0; i < f.args.size(); ++i) {
    std::string shape;
    for (size_t d = 0; d < f.args[i]->shape.size(); ++d) {
      shape += (d ? ", " : "") + std::to_string(f.args[i]->shape[d]);
    }
    args += fmt::format("{}{}[{}]", i ? ", " : "", f.args[i]->name, shape);
  }
  return fmt::format("func {}({}) {{\n{}}}\n", f.name, args, ToText(f.body, 1));
}

std::string ToText(const Tensor& t) {
  std::string axes;
  for (size_t i = 0; i < t->axes.size(); ++i) axes += (i ? ", " : "") + t->axes[i]->var->name;
  if (t->is_placeholder()) {
    std::string shape;
    for (size_t i = 0; i < t->shape.size(); ++i)
      shape += (i ? ", " : "") + std::to_string(t->shape[i]);
    return fmt::format("{} = placeholder[{}]", t->name, shape);
  }
  return fmt::format("{}[{}] = {}", t->name, axes, ToText(t->body));
}

}  // namespace lathe::ir
