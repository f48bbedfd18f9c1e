// \file
// Expressions of the tensor IR: immutable nodes shared by pointer, built through validating
// factory functions. Variables are identified by node identity, not by name.
//
// Before lowering, tensors are read with TensorRead (multi-dimensional, by tensor name) and
// reductions are Reduce nodes at the top of a compute body. After lowering, memory is read
// with Load (flat index into a Buffer), and vectorized code uses Ramp/Broadcast.
#ifndef LATHE_IR_EXPR_H_
#define LATHE_IR_EXPR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/type.h"

namespace lathe::ir {

// X-macro list of expression kinds; generates the enum and the names used by the printer.
#define LATHE_EXPR_KINDS(X) \
  X(IntImm)                 \
  X(FloatImm)               \
  X(Var)                    \
  X(Add)                    \
  X(Sub)                    \
  X(Mul)                    \
  X(Div)                    \
  X(Mod)                    \
  X(Min)                    \
  X(Max)                    \
  X(EQ)                     \
  X(NE)                     \
  X(LT)                     \
  X(LE)                     \
  X(GT)                     \
  X(GE)                     \
  X(And)                    \
  X(Or)                     \
  X(Not)                    \
  X(Select)                 \
  X(Cast)                   \
  X(Call)                   \
  X(TensorRead)             \
  X(Load)                   \
  X(Reduce)                 \
  X(Ramp)                   \
  X(Broadcast)

enum class ExprKind : uint8_t {
#define LATHE_X(name) k##name,
  LATHE_EXPR_KINDS(LATHE_X)
#undef LATHE_X
};
const char* ExprKindName(ExprKind kind);

enum class ReduceOp : uint8_t { kSum, kMax, kMin };

struct ExprNode;
using Expr = std::shared_ptr<const ExprNode>;
struct BufferNode;
using Buffer = std::shared_ptr<const BufferNode>;

// An iteration axis of a compute definition: a variable ranging over [0, extent).
struct IterVarNode {
  Expr var;
  int64_t extent = 0;
  bool reduce = false;
};
using IterVar = std::shared_ptr<const IterVarNode>;

// A memory buffer of the lowered program. `shape` is the logical shape (its product is the
// element count); accesses use a flat row-major index. `scope` is "global", "local" (thread
// private, registers where possible) or "shared" (GPU shared memory).
struct BufferNode {
  std::string name;
  Type dtype;
  std::vector<int64_t> shape;
  std::string scope = "global";
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};
Buffer MakeBuffer(std::string name, Type dtype, std::vector<int64_t> shape,
                  std::string scope = "global");

// One expression node. Which fields are set depends on `kind`:
//   IntImm: int_value. FloatImm: float_value. Var: name.
//   binary/compare/logical: operands[0..1]; Not: operands[0].
//   Select: operands = {cond, true_value, false_value} (only the chosen side is evaluated).
//   Cast: operands[0], to `type`. Call: name (exp, sqrt, log, tanh, abs), operands.
//   TensorRead: name (tensor), operands = indices.
//   Load: buffer, operands = {flat index} (+ {predicate} when masked).
//   Reduce: reduce_op, operands = {source} (+ {condition}), reduce_axes.
//   Ramp: operands = {base, stride}, type.lanes lanes. Broadcast: operands[0], type.lanes.
struct ExprNode {
  ExprKind kind;
  Type type;
  int64_t int_value = 0;
  double float_value = 0;
  std::string name;
  std::vector<Expr> operands;
  Buffer buffer;
  ReduceOp reduce_op = ReduceOp::kSum;
  std::vector<IterVar> reduce_axes;
};

// --- factories; each checks operand types and aborts with a message on an internal bug ---
Expr IntImm(int64_t v);
Expr FloatImm(double v);
Expr BoolImm(bool v);
Expr MakeVar(std::string name, Type type = Type::I64());
IterVar MakeIterVar(std::string name, int64_t extent, bool reduce = false);

Expr Add(Expr a, Expr b);
Expr Sub(Expr a, Expr b);
Expr Mul(Expr a, Expr b);
Expr Div(Expr a, Expr b);  // floor division for ints, true division for floats
Expr Mod(Expr a, Expr b);  // floor modulo, ints only
Expr Min(Expr a, Expr b);
Expr Max(Expr a, Expr b);
Expr EQ(Expr a, Expr b);
Expr NE(Expr a, Expr b);
Expr LT(Expr a, Expr b);
Expr LE(Expr a, Expr b);
Expr GT(Expr a, Expr b);
Expr GE(Expr a, Expr b);
Expr And(Expr a, Expr b);
Expr Or(Expr a, Expr b);
Expr Not(Expr a);
Expr Select(Expr cond, Expr t, Expr f);
Expr Cast(Type t, Expr v);
Expr Call(std::string fn, std::vector<Expr> args);
Expr TensorRead(std::string tensor, Type dtype, std::vector<Expr> indices);
Expr Load(Buffer buffer, Expr index, Expr predicate = nullptr);
Expr Reduce(ReduceOp op, Expr source, std::vector<IterVar> axes, Expr condition = nullptr);
Expr Ramp(Expr base, Expr stride, int lanes);
Expr Broadcast(Expr value, int lanes);
// Builds a binary node of the given kind (one of Add..Or).
Expr MakeBinary(ExprKind kind, Expr a, Expr b);

// The identity element of a reduction (0 for sum, -inf/+inf for max/min).
Expr ReduceIdentity(ReduceOp op, Type t);
// The combination of two partial reductions.
Expr ReduceCombine(ReduceOp op, Expr a, Expr b);

inline bool IsConst(const Expr& e) { return e->kind == ExprKind::kIntImm; }
// True if `e` is an IntImm equal to v.
bool IsConstInt(const Expr& e, int64_t v);
bool IsBinary(ExprKind k);
bool IsCompare(ExprKind k);

}  // namespace lathe::ir

#endif  // LATHE_IR_EXPR_H_
