// \file
// Integer arithmetic on index expressions: simplification to a canonical linear form,
// constant bounds of expressions over bounded variables, symbolic intervals (for bound
// inference), and a prover for comparisons.
#ifndef LATHE_IR_ARITH_H_
#define LATHE_IR_ARITH_H_

#include <cstdint>
#include <limits>
#include <unordered_map>

#include "ir/expr.h"
#include "ir/stmt.h"

namespace lathe::ir {

struct ConstInterval {
  static constexpr int64_t kNegInf = std::numeric_limits<int64_t>::min() / 4;
  static constexpr int64_t kPosInf = std::numeric_limits<int64_t>::max() / 4;
  int64_t lo = kNegInf, hi = kPosInf;
  bool bounded() const { return lo != kNegInf && hi != kPosInf; }
};
// Variable (by node identity) -> its range of values, both ends inclusive.
using RangeMap = std::unordered_map<const ExprNode*, ConstInterval>;

// Constant bounds of an integer (or bool, as 0/1) expression whose variables range as
// `ranges` says; unknown variables are unbounded. Never fails; may be loose.
ConstInterval ConstBound(const Expr& e, const RangeMap& ranges);

// True only if `cond` holds for every value of the variables in `ranges`.
bool CanProve(const Expr& cond, const RangeMap& ranges);

// Simplifies: constant folding, canonical linear form of integer sums and products by
// constants, Ramp/Broadcast algebra, and (with ranges) div/mod/min/max/comparisons that
// the bounds decide. The result is equivalent to `e` for every value in `ranges`.
Expr Simplify(const Expr& e, const RangeMap& ranges = {});
// Simplifies every expression of `s`, learning loop variable ranges from For nodes,
// dropping provably true guards and loops of extent 0.
Stmt SimplifyStmt(const Stmt& s, const RangeMap& ranges = {});

// A symbolic interval [min, max], both inclusive.
struct SymInterval {
  Expr min, max;
};
using SymRangeMap = std::unordered_map<const ExprNode*, SymInterval>;
// The interval of `e` when each variable in `ranges` ranges over its interval; variables
// not in `ranges` are fixed (a point). Exact for linear expressions, conservative otherwise.
SymInterval EvalInterval(const Expr& e, const SymRangeMap& ranges);

// The constant value of `e` after simplification, if it is one.
bool AsConstInt(const Expr& e, int64_t* value);

}  // namespace lathe::ir

#endif  // LATHE_IR_ARITH_H_
