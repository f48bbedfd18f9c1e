// 4-lane (float4) accesses of the GPU recipe: see gpu_passes.h.
#include <cstdint>

#include "codegen/gpu_passes.h"
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT: a lowering pass speaks IR throughout

constexpr int kLanes = 4;

// A positive number that provably divides `e` (0 when `e` is the constant 0): the gcd of the
// terms of a sum, the product of a product's factors' divisors.
int64_t KnownDivisor(const Expr& e) {
  auto gcd = [](int64_t a, int64_t b) {
    while (b) {
      int64_t t = a % b;
      a = b;
      b = t;
    }
    return a < 0 ? -a : a;
  };
  switch (e->kind) {
    case ExprKind::kIntImm:
      return e->int_value < 0 ? -e->int_value : e->int_value;
    case ExprKind::kAdd:
    case ExprKind::kSub:
      return gcd(KnownDivisor(e->operands[0]), KnownDivisor(e->operands[1]));
    case ExprKind::kMul: {
      int64_t a = KnownDivisor(e->operands[0]), b = KnownDivisor(e->operands[1]);
      if (a == 0 || b == 0) return 0;
      return a > (int64_t{1} << 30) || b > (int64_t{1} << 30) ? 1 : a * b;
    }
    case ExprKind::kMod: {
      // a mod c = a - c * floor(a / c): divisible by whatever divides both.
      int64_t a = KnownDivisor(e->operands[0]), c = KnownDivisor(e->operands[1]);
      return a == 0 ? 0 : gcd(a, c);
    }
    default:
      return 1;
  }
}

// `e` with floor division and modulo by constants that are multiples of `lanes` taken apart
// where their dividend is rest + var, `rest` a multiple of `lanes` and var in [0, lanes):
// (rest + var) / c = rest / c and (rest + var) % c = rest % c + var (var never carries into
// the quotient). What a fused loop split by the vector width leaves in its indices.
Expr Linearize(const Expr& e, const Expr& var, int64_t lanes, const RangeMap& ranges) {
  if (e->operands.empty()) return e;
  Expr x = MapOperands(e, [&](const Expr& o) { return Linearize(o, var, lanes, ranges); });
  if ((x->kind != ExprKind::kDiv && x->kind != ExprKind::kMod) || !x->type.is_int()) return x;
  int64_t c;
  if (!AsConstInt(x->operands[1], &c) || c <= 0 || c % lanes != 0) return x;
  Expr rest = Simplify(Sub(x->operands[0], var), ranges);
  if (UsesVar(rest, var.get())) return x;
  int64_t d = KnownDivisor(rest);
  if (d != 0 && d % lanes != 0) return x;
  if (x->kind == ExprKind::kDiv) return Div(rest, x->operands[1]);
  return Add(Mod(rest, x->operands[1]), var);
}

// `index` as base + var when it steps by exactly one with `var` (in [0, lanes)): the base
// (var = 0), or null.
Expr UnitStrideBase(const Expr& index, const Expr& var, int64_t lanes, const RangeMap& ranges) {
  Expr linear = Simplify(Linearize(Simplify(index, ranges), var, lanes, ranges), ranges);
  Expr base = Simplify(Substitute(linear, {{var.get(), IntImm(0)}}), ranges);
  Expr step = Simplify(Sub(linear, base), ranges);
  if (step.get() != var.get()) return nullptr;
  return base;
}

class Vectorizer {
 public:
  Stmt Run(const Stmt& s) {
    if (!s) return s;
    if (s->kind != StmtKind::kFor) return MapChildren(s, [&](const Stmt& c) { return Run(c); });
    int64_t ext = -1, mn = -1;
    const bool const_ext = AsConstInt(s->extent, &ext), const_min = AsConstInt(s->min, &mn);
    if (const_ext && const_min) ranges_[s->var.get()] = {mn, mn + std::max<int64_t>(ext, 1) - 1};
    if (s->for_kind == ForKind::kVectorized && const_ext && ext == kLanes && const_min && mn == 0) {
      if (Stmt v = Vector4(s)) return v;
    }
    return MapChildren(s, [&](const Stmt& c) { return Run(c); });
  }

 private:
  // The loop over `s->var` as 4-lane accesses, or null when neither its store nor its load is
  // provably aligned.
  Stmt Vector4(const Stmt& s) {
    const Stmt& st = s->body;
    if (!st || st->kind != StmtKind::kStore || st->predicate || st->value->type.is_vector()) {
      return nullptr;
    }
    const Expr& v = s->var;
    auto aligned = [&](const Expr& index) -> Expr {
      Expr base = UnitStrideBase(index, v, kLanes, ranges_);
      if (!base) return nullptr;
      int64_t d = KnownDivisor(base);
      return d == 0 || d % kLanes == 0 ? base : nullptr;
    };
    Expr dst = aligned(st->index);
    const Expr& value = st->value;
    Expr src =
        value->kind == ExprKind::kLoad && value->operands.size() == 1 && value->type.is_float()
            ? aligned(value->operands[0])
            : nullptr;
    if (!dst && !src) return nullptr;
    // The lanes of an expression of the loop's variable: the variable a Ramp, what does not
    // depend on it broadcast where it meets what does (the factories match lanes).
    auto over_lanes = [&](const Expr& e) {
      return Substitute(e, {{v.get(), Ramp(IntImm(0), IntImm(1), kLanes)}});
    };
    Expr vvalue = src ? Load(value->buffer, Ramp(src, IntImm(1), kLanes)) : over_lanes(value);
    if (!vvalue->type.is_vector()) vvalue = Broadcast(vvalue, kLanes);
    if (dst) return Store(st->buffer, Ramp(dst, IntImm(1), kLanes), vvalue);
    // A vector load scattered into scalar stores (a tile stored transposed).
    return Store(st->buffer, over_lanes(st->index), vvalue);
  }

  RangeMap ranges_;
};

}  // namespace

Stmt VectorizeGpuAccesses(const Stmt& body) { return Vectorizer().Run(body); }

Expr VectorLane(const Expr& e, int lane) {
  if (!e->type.is_vector()) return e;
  switch (e->kind) {
    case ExprKind::kRamp: {
      int64_t base, stride;
      if (AsConstInt(e->operands[0], &base) && AsConstInt(e->operands[1], &stride)) {
        return IntImm(base + stride * lane);
      }
      return Add(e->operands[0], Mul(e->operands[1], IntImm(lane)));
    }
    case ExprKind::kBroadcast:
      return e->operands[0];
    case ExprKind::kCast:
      return Cast(e->type.Element(), VectorLane(e->operands[0], lane));
    default: {
      std::vector<Expr> ops;
      ops.reserve(e->operands.size());
      for (const Expr& o : e->operands) ops.push_back(VectorLane(o, lane));
      return WithOperands(e, std::move(ops));
    }
  }
}

}  // namespace lathe::codegen
