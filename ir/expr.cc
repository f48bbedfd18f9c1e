#include "ir/expr.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <utility>

namespace lathe::ir {

namespace {

[[noreturn]] void Fail(const char* what, const ExprNode* a = nullptr) {
  std::fprintf(stderr, "lathe internal error: %s%s%s\n", what, a ? " in " : "",
               a ? ExprKindName(a->kind) : "");
  std::abort();
}

#define LATHE_CHECK(cond, msg) \
  do {                         \
    if (!(cond)) Fail(msg);    \
  } while (0)

std::shared_ptr<ExprNode> New(ExprKind kind, Type type) {
  auto n = std::make_shared<ExprNode>();
  n->kind = kind;
  n->type = type;
  return n;
}

// Operands are moved in: an initializer list would copy each shared pointer (an atomic
// increment and, later, a decrement per operand of every node built).
void SetOperands(ExprNode* n, Expr a) {
  n->operands.reserve(1);
  n->operands.push_back(std::move(a));
}
void SetOperands(ExprNode* n, Expr a, Expr b) {
  n->operands.reserve(2);
  n->operands.push_back(std::move(a));
  n->operands.push_back(std::move(b));
}
void SetOperands(ExprNode* n, Expr a, Expr b, Expr c) {
  n->operands.reserve(3);
  n->operands.push_back(std::move(a));
  n->operands.push_back(std::move(b));
  n->operands.push_back(std::move(c));
}

// Broadcasts a scalar operand to the lane count of the other operand.
void MatchLanes(Expr& a, Expr& b) {
  if (a->type.lanes == b->type.lanes) return;
  if (a->type.lanes == 1) {
    a = Broadcast(a, b->type.lanes);
  } else if (b->type.lanes == 1) {
    b = Broadcast(b, a->type.lanes);
  } else {
    Fail("operands with different lane counts");
  }
}

}  // namespace

std::string Type::ToString() const {
  std::string s = kind == ScalarKind::kFloat32 ? "float32"
                  : kind == ScalarKind::kInt64 ? "int64"
                                               : "bool";
  if (lanes > 1) s += "x" + std::to_string(lanes);
  return s;
}

const char* ExprKindName(ExprKind kind) {
  switch (kind) {
#define LATHE_X(name)     \
  case ExprKind::k##name: \
    return #name;
    LATHE_EXPR_KINDS(LATHE_X)
#undef LATHE_X
  }
  return "?";
}

Buffer MakeBuffer(std::string name, Type dtype, std::vector<int64_t> shape, std::string scope) {
  auto b = std::make_shared<BufferNode>();
  b->name = std::move(name);
  b->dtype = dtype;
  b->shape = std::move(shape);
  b->scope = std::move(scope);
  return b;
}

namespace {

Expr NewIntImm(int64_t v, Type t) {
  auto n = New(ExprKind::kIntImm, t);
  n->int_value = v;
  return n;
}

}  // namespace

// Small constants (tile sizes, strides, loop bounds) are built over and over by lowering and
// simplification: each thread keeps one node per value. Nodes are immutable and only
// variables are compared by identity, so sharing them is invisible.
Expr IntImm(int64_t v) {
  constexpr int64_t kLo = -64, kHi = 1024;
  if (v < kLo || v >= kHi) return NewIntImm(v, Type::I64());
  thread_local std::array<Expr, kHi - kLo> cache;
  Expr& slot = cache[static_cast<size_t>(v - kLo)];
  if (!slot) slot = NewIntImm(v, Type::I64());
  return slot;
}

Expr FloatImm(double v) {
  auto n = New(ExprKind::kFloatImm, Type::F32());
  n->float_value = v;
  return n;
}

Expr BoolImm(bool v) {
  thread_local std::array<Expr, 2> cache;
  Expr& slot = cache[v ? 1 : 0];
  if (!slot) slot = NewIntImm(v ? 1 : 0, Type::Bool());
  return slot;
}

Expr MakeVar(std::string name, Type type) {
  auto n = New(ExprKind::kVar, type);
  n->name = std::move(name);
  return n;
}

IterVar MakeIterVar(std::string name, int64_t extent, bool reduce) {
  auto iv = std::make_shared<IterVarNode>();
  iv->var = MakeVar(std::move(name));
  iv->extent = extent;
  iv->reduce = reduce;
  return iv;
}

bool IsBinary(ExprKind k) { return k >= ExprKind::kAdd && k <= ExprKind::kOr; }
bool IsCompare(ExprKind k) { return k >= ExprKind::kEQ && k <= ExprKind::kGE; }

Expr MakeBinary(ExprKind kind, Expr a, Expr b) {
  LATHE_CHECK(a && b, "null operand of a binary expression");
  MatchLanes(a, b);
  if (a->type.kind != b->type.kind) {
    std::fprintf(stderr, "lathe internal error: %s of %s and %s\n", ExprKindName(kind),
                 a->type.ToString().c_str(), b->type.ToString().c_str());
    std::abort();
  }
  Type t = a->type;
  if (IsCompare(kind)) t = Type::Bool(a->type.lanes);
  if (kind == ExprKind::kAnd || kind == ExprKind::kOr) {
    LATHE_CHECK(a->type.is_bool(), "logical operator on non-bool operands");
  }
  if (kind == ExprKind::kMod) LATHE_CHECK(a->type.is_int(), "modulo of non-integers");
  auto n = New(kind, t);
  SetOperands(n.get(), std::move(a), std::move(b));
  return n;
}

Expr Add(Expr a, Expr b) { return MakeBinary(ExprKind::kAdd, std::move(a), std::move(b)); }
Expr Sub(Expr a, Expr b) { return MakeBinary(ExprKind::kSub, std::move(a), std::move(b)); }
Expr Mul(Expr a, Expr b) { return MakeBinary(ExprKind::kMul, std::move(a), std::move(b)); }
Expr Div(Expr a, Expr b) { return MakeBinary(ExprKind::kDiv, std::move(a), std::move(b)); }
Expr Mod(Expr a, Expr b) { return MakeBinary(ExprKind::kMod, std::move(a), std::move(b)); }
Expr Min(Expr a, Expr b) { return MakeBinary(ExprKind::kMin, std::move(a), std::move(b)); }
Expr Max(Expr a, Expr b) { return MakeBinary(ExprKind::kMax, std::move(a), std::move(b)); }
Expr EQ(Expr a, Expr b) { return MakeBinary(ExprKind::kEQ, std::move(a), std::move(b)); }
Expr NE(Expr a, Expr b) { return MakeBinary(ExprKind::kNE, std::move(a), std::move(b)); }
Expr LT(Expr a, Expr b) { return MakeBinary(ExprKind::kLT, std::move(a), std::move(b)); }
Expr LE(Expr a, Expr b) { return MakeBinary(ExprKind::kLE, std::move(a), std::move(b)); }
Expr GT(Expr a, Expr b) { return MakeBinary(ExprKind::kGT, std::move(a), std::move(b)); }
Expr GE(Expr a, Expr b) { return MakeBinary(ExprKind::kGE, std::move(a), std::move(b)); }
Expr And(Expr a, Expr b) { return MakeBinary(ExprKind::kAnd, std::move(a), std::move(b)); }
Expr Or(Expr a, Expr b) { return MakeBinary(ExprKind::kOr, std::move(a), std::move(b)); }

Expr Not(Expr a) {
  LATHE_CHECK(a && a->type.is_bool(), "Not of a non-bool");
  auto n = New(ExprKind::kNot, a->type);
  SetOperands(n.get(), std::move(a));
  return n;
}

Expr Select(Expr cond, Expr t, Expr f) {
  LATHE_CHECK(cond && t && f, "null operand of Select");
  LATHE_CHECK(cond->type.is_bool(), "Select condition is not bool");
  MatchLanes(t, f);
  LATHE_CHECK(t->type.kind == f->type.kind, "Select arms of different types");
  if (cond->type.lanes != t->type.lanes) {
    if (cond->type.lanes == 1) {
      cond = Broadcast(cond, t->type.lanes);
    } else if (t->type.lanes == 1) {
      t = Broadcast(t, cond->type.lanes);
      f = Broadcast(f, cond->type.lanes);
    } else {
      Fail("Select with mismatched lanes");
    }
  }
  auto n = New(ExprKind::kSelect, t->type);
  SetOperands(n.get(), std::move(cond), std::move(t), std::move(f));
  return n;
}

Expr Cast(Type t, Expr v) {
  LATHE_CHECK(v != nullptr, "null operand of Cast");
  if (v->type == t) return v;
  t.lanes = v->type.lanes;
  auto n = New(ExprKind::kCast, t);
  SetOperands(n.get(), std::move(v));
  return n;
}

Expr Call(std::string fn, std::vector<Expr> args) {
  LATHE_CHECK(!args.empty(), "Call without arguments");
  auto n = New(ExprKind::kCall, args[0]->type);
  n->name = std::move(fn);
  n->operands = std::move(args);
  return n;
}

Expr TensorRead(std::string tensor, Type dtype, std::vector<Expr> indices) {
  for (const Expr& i : indices) LATHE_CHECK(i && i->type.is_int(), "non-integer tensor index");
  auto n = New(ExprKind::kTensorRead, dtype);
  n->name = std::move(tensor);
  n->operands = std::move(indices);
  return n;
}

Expr Load(Buffer buffer, Expr index, Expr predicate) {
  LATHE_CHECK(buffer && index && index->type.is_int(), "bad Load");
  auto n = New(ExprKind::kLoad, buffer->dtype.WithLanes(index->type.lanes));
  n->buffer = std::move(buffer);
  SetOperands(n.get(), std::move(index));
  if (predicate) n->operands.push_back(std::move(predicate));
  return n;
}

Expr Reduce(ReduceOp op, Expr source, std::vector<IterVar> axes, Expr condition) {
  LATHE_CHECK(source != nullptr, "null Reduce source");
  auto n = New(ExprKind::kReduce, source->type);
  n->reduce_op = op;
  SetOperands(n.get(), std::move(source));
  if (condition) n->operands.push_back(std::move(condition));
  n->reduce_axes = std::move(axes);
  return n;
}

Expr Ramp(Expr base, Expr stride, int lanes) {
  LATHE_CHECK(base->type.lanes == 1 && stride->type.lanes == 1 && lanes > 1, "bad Ramp");
  auto n = New(ExprKind::kRamp, base->type.WithLanes(lanes));
  SetOperands(n.get(), std::move(base), std::move(stride));
  return n;
}

Expr Broadcast(Expr value, int lanes) {
  LATHE_CHECK(value->type.lanes == 1, "Broadcast of a vector");
  if (lanes == 1) return value;
  auto n = New(ExprKind::kBroadcast, value->type.WithLanes(lanes));
  SetOperands(n.get(), std::move(value));
  return n;
}

Expr ReduceIdentity(ReduceOp op, Type t) {
  double inf = std::numeric_limits<double>::infinity();
  if (t.is_float()) {
    return op == ReduceOp::kSum   ? FloatImm(0.0)
           : op == ReduceOp::kMax ? FloatImm(-inf)
                                  : FloatImm(inf);
  }
  int64_t big = std::numeric_limits<int64_t>::max();
  return op == ReduceOp::kSum ? IntImm(0) : op == ReduceOp::kMax ? IntImm(-big) : IntImm(big);
}

Expr ReduceCombine(ReduceOp op, Expr a, Expr b) {
  switch (op) {
    case ReduceOp::kSum:
      return Add(std::move(a), std::move(b));
    case ReduceOp::kMax:
      return Max(std::move(a), std::move(b));
    case ReduceOp::kMin:
      return Min(std::move(a), std::move(b));
  }
  Fail("unknown reduce op");
}

bool IsConstInt(const Expr& e, int64_t v) {
  return e->kind == ExprKind::kIntImm && e->int_value == v;
}

}  // namespace lathe::ir
