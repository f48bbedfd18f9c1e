#include "ir/arith.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "ir/functor.h"

namespace lathe::ir {

namespace {

using I = ConstInterval;

int64_t SatAdd(int64_t a, int64_t b) {
  if (a == I::kNegInf || b == I::kNegInf) return I::kNegInf;
  if (a == I::kPosInf || b == I::kPosInf) return I::kPosInf;
  __int128 r = static_cast<__int128>(a) + b;
  if (r <= I::kNegInf) return I::kNegInf;
  if (r >= I::kPosInf) return I::kPosInf;
  return static_cast<int64_t>(r);
}

int64_t SatMul(int64_t a, int64_t c) {
  if (c == 0 || a == 0) return 0;
  bool inf = a == I::kNegInf || a == I::kPosInf;
  if (inf) return (a > 0) == (c > 0) ? I::kPosInf : I::kNegInf;
  __int128 r = static_cast<__int128>(a) * c;
  if (r <= I::kNegInf) return I::kNegInf;
  if (r >= I::kPosInf) return I::kPosInf;
  return static_cast<int64_t>(r);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (a == I::kNegInf || a == I::kPosInf)
    return b > 0 ? a : (a == I::kNegInf ? I::kPosInf : I::kNegInf);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

I Scale(I x, int64_t c) {
  I r{SatMul(x.lo, c), SatMul(x.hi, c)};
  if (c < 0) std::swap(r.lo, r.hi);
  return r;
}

// A canonical linear form: sum of coeff * atom + constant.
struct Linear {
  // Inline storage: index expressions have a handful of terms (up to about ten), and a
  // linear form is built for every node of every additive tree simplified.
  absl::InlinedVector<std::pair<Expr, int64_t>, 10> terms;
  int64_t c = 0;

  void AddTerm(const Expr& atom, int64_t coeff) {
    if (coeff == 0) return;
    for (auto& [a, k] : terms) {
      if (StructEqual(a, atom)) {
        k += coeff;
        return;
      }
    }
    terms.emplace_back(atom, coeff);
  }
  void AddTerm(Expr&& atom, int64_t coeff) {
    if (coeff == 0) return;
    for (auto& [a, k] : terms) {
      if (StructEqual(a, atom)) {
        k += coeff;
        return;
      }
    }
    terms.emplace_back(std::move(atom), coeff);
  }
  void Merge(const Linear& o, int64_t scale) {
    for (const auto& [a, k] : o.terms) AddTerm(a, k * scale);
    c += o.c * scale;
  }
  // Merge(o, scale) for an `o` no longer needed: its atoms are moved, not copied.
  void MergeFrom(Linear&& o, int64_t scale) {
    for (auto& [a, k] : o.terms) AddTerm(std::move(a), k * scale);
    c += o.c * scale;
  }
  bool is_const() const {
    for (const auto& t : terms) {
      if (t.second != 0) return false;
    }
    return true;
  }
};

bool IsScalarInt(const Expr& e) { return e->type.is_int() && e->type.lanes == 1; }

// The linear form of `e` into `out`, which must be empty. The left operand of a sum is built
// in place (sums are left-deep chains) and the right one apart, then merged: the same terms
// in the same order as building both apart and merging them.
void ToLinearInto(const Expr& e, Linear* out) {
  switch (e->kind) {
    case ExprKind::kIntImm:
      out->c = e->int_value;
      return;
    case ExprKind::kAdd:
    case ExprKind::kSub: {
      ToLinearInto(e->operands[0], out);
      Linear r;
      ToLinearInto(e->operands[1], &r);
      out->MergeFrom(std::move(r), e->kind == ExprKind::kAdd ? 1 : -1);
      return;
    }
    case ExprKind::kMul: {
      Linear a, b;
      ToLinearInto(e->operands[0], &a);
      ToLinearInto(e->operands[1], &b);
      if (b.is_const()) {
        out->MergeFrom(std::move(a), b.c);
        return;
      }
      if (a.is_const()) {
        out->MergeFrom(std::move(b), a.c);
        return;
      }
      break;
    }
    default:
      break;
  }
  out->AddTerm(e, 1);
}

// c*(y/c) + y%c == y for floor division and c > 0: the two halves of a split loop (or of a
// fused one) put back together. a*c*(y/c) + a*(y%c) becomes a*y. A vector loop over two fused
// axes (CpuSpace's paired channel blocks) then reads its accumulator at one contiguous index.
void MergeDivMod(Linear* l) {
  bool div = false, mod = false;
  for (const auto& [atom, k] : l->terms) {
    div = div || (k != 0 && atom->kind == ExprKind::kDiv);
    mod = mod || (k != 0 && atom->kind == ExprKind::kMod);
  }
  if (!div || !mod) return;
  absl::InlinedVector<std::pair<Expr, int64_t>, 2> merged;  // y and a
  for (size_t i = 0; i < l->terms.size(); ++i) {
    const auto& [d, kd] = l->terms[i];
    int64_t c;
    if (kd == 0 || d->kind != ExprKind::kDiv || !AsConstInt(d->operands[1], &c) || c <= 1 ||
        kd % c != 0) {
      continue;
    }
    for (size_t j = 0; j < l->terms.size(); ++j) {
      const auto& [m, km] = l->terms[j];
      if (km != kd / c || m->kind != ExprKind::kMod || !IsConstInt(m->operands[1], c) ||
          !StructEqual(m->operands[0], d->operands[0])) {
        continue;
      }
      merged.emplace_back(d->operands[0], km);
      l->terms[i].second = 0;
      l->terms[j].second = 0;
      break;
    }
  }
  for (const auto& [y, a] : merged) {
    Linear ly;
    ToLinearInto(y, &ly);
    l->MergeFrom(std::move(ly), a);
  }
}

Linear ToLinear(const Expr& e) {
  Linear l;
  ToLinearInto(e, &l);
  MergeDivMod(&l);
  return l;
}

Expr FromLinear(const Linear& l) {
  Expr acc;
  // Positive terms first so that the result reads a + b - c.
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& [atom, k] : l.terms) {
      if (k == 0 || (pass == 0) != (k > 0)) continue;
      int64_t mag = k > 0 ? k : -k;
      Expr t = mag == 1 ? atom : Mul(atom, IntImm(mag));
      if (!acc) {
        acc = k > 0 ? t : Mul(atom, IntImm(k));
      } else {
        acc = k > 0 ? Add(acc, t) : Sub(acc, t);
      }
    }
  }
  if (!acc) return IntImm(l.c);
  if (l.c > 0) return Add(acc, IntImm(l.c));
  if (l.c < 0) return Sub(acc, IntImm(-l.c));
  return acc;
}

// True if `x` is the int64 constant `v` (what IntImm(v) builds).
bool IsI64Const(const ExprNode* x, int64_t v) {
  return x->kind == ExprKind::kIntImm && x->type == Type::I64() && x->int_value == v;
}

// True if `x` is what FromLinear builds for one term: the atom, or atom * IntImm(mag).
bool MatchesTerm(const Expr& x, const Expr& atom, int64_t mag) {
  if (mag == 1) return StructEqual(x, atom);
  return x->kind == ExprKind::kMul && x->type == Type::I64() && StructEqual(x->operands[0], atom) &&
         IsI64Const(x->operands[1].get(), mag);
}

// True if FromLinear(l) would build an expression structurally equal to `e`. Simplifying an
// index that is already in canonical form (most of them, when a lowered program is simplified
// once more as a whole) then returns it as it is instead of allocating a copy.
bool MatchesLinear(const Expr& e, const Linear& l) {
  absl::InlinedVector<const std::pair<Expr, int64_t>*, 8> order;  // FromLinear's term order
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& t : l.terms) {
      if (t.second == 0 || (pass == 0) != (t.second > 0)) continue;
      order.push_back(&t);
    }
  }
  const Expr* cur = &e;
  if (order.empty()) return IsI64Const(cur->get(), l.c);
  auto step = [&](ExprKind kind) {
    const ExprNode* n = cur->get();
    if (n->kind != kind || n->type != Type::I64()) return false;
    return true;
  };
  if (l.c != 0) {
    if (!step(l.c > 0 ? ExprKind::kAdd : ExprKind::kSub)) return false;
    if (!IsI64Const((*cur)->operands[1].get(), l.c > 0 ? l.c : -l.c)) return false;
    cur = &(*cur)->operands[0];
  }
  for (size_t i = order.size() - 1; i > 0; --i) {
    const auto& [atom, k] = *order[i];
    if (!step(k > 0 ? ExprKind::kAdd : ExprKind::kSub)) return false;
    if (!MatchesTerm((*cur)->operands[1], atom, k > 0 ? k : -k)) return false;
    cur = &(*cur)->operands[0];
  }
  const auto& [atom, k] = *order[0];
  if (k > 0) return MatchesTerm(*cur, atom, k);
  // Only negative terms: the first is atom * IntImm(k), even for k == -1.
  return (*cur)->kind == ExprKind::kMul && (*cur)->type == Type::I64() &&
         StructEqual((*cur)->operands[0], atom) && IsI64Const((*cur)->operands[1].get(), k);
}

// FromLinear(l), or `e` itself when that is what FromLinear would build.
Expr FromLinearOr(const Expr& e, const Linear& l) {
  if (MatchesLinear(e, l)) return e;
  return FromLinear(l);
}

I BoundLinearAtoms(const Linear& l, const RangeMap& ranges);

I Bound(const Expr& e, const RangeMap& ranges) {
  switch (e->kind) {
    case ExprKind::kIntImm:
      return {e->int_value, e->int_value};
    case ExprKind::kVar: {
      auto it = ranges.find(e.get());
      return it == ranges.end() ? I{} : it->second;
    }
    case ExprKind::kAdd:
    case ExprKind::kSub:
    case ExprKind::kMul:
      if (IsScalarInt(e)) {
        Linear l = ToLinear(e);
        if (l.terms.size() != 1 || l.terms[0].first != e) return BoundLinearAtoms(l, ranges);
      }
      if (e->kind == ExprKind::kMul) {
        I a = Bound(e->operands[0], ranges), b = Bound(e->operands[1], ranges);
        if (!a.bounded() || !b.bounded()) return {};
        int64_t p[4] = {SatMul(a.lo, b.lo), SatMul(a.lo, b.hi), SatMul(a.hi, b.lo),
                        SatMul(a.hi, b.hi)};
        return {*std::min_element(p, p + 4), *std::max_element(p, p + 4)};
      }
      return {};
    case ExprKind::kDiv: {
      I b = Bound(e->operands[1], ranges);
      if (b.lo != b.hi || b.lo <= 0) return {};
      I a = Bound(e->operands[0], ranges);
      return {FloorDiv(a.lo, b.lo), FloorDiv(a.hi, b.lo)};
    }
    case ExprKind::kMod: {
      I b = Bound(e->operands[1], ranges);
      if (b.lo <= 0) return {};
      I a = Bound(e->operands[0], ranges);
      if (b.lo == b.hi && a.lo >= 0 && a.hi < b.lo) return a;
      return {0, b.hi - 1};
    }
    case ExprKind::kMin: {
      I a = Bound(e->operands[0], ranges), b = Bound(e->operands[1], ranges);
      return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
    }
    case ExprKind::kMax: {
      I a = Bound(e->operands[0], ranges), b = Bound(e->operands[1], ranges);
      return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
    }
    case ExprKind::kSelect: {
      I a = Bound(e->operands[1], ranges), b = Bound(e->operands[2], ranges);
      return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
    }
    case ExprKind::kCast:
      if (e->operands[0]->type.is_int() || e->operands[0]->type.is_bool()) {
        return Bound(e->operands[0], ranges);
      }
      return {};
    default:
      if (e->type.is_bool()) return {0, 1};
      return {};
  }
}

I BoundLinearAtoms(const Linear& l, const RangeMap& ranges) {
  I acc{l.c, l.c};
  for (const auto& [atom, k] : l.terms) {
    I b = Scale(Bound(atom, ranges), k);
    acc = {SatAdd(acc.lo, b.lo), SatAdd(acc.hi, b.hi)};
  }
  return acc;
}

// Bound(Canonical(Sub(a, b)), ranges) without building either expression: the terms of
// a - b in the order FromLinear would emit them (positive first), bounded as Bound would
// bound the canonical form (an atom alone, with coefficient 1, bounded as itself).
I BoundDifference(const Expr& a, const Expr& b, const RangeMap& ranges) {
  Linear l;
  ToLinearInto(a, &l);
  Linear r;
  ToLinearInto(b, &r);
  l.MergeFrom(std::move(r), -1);
  absl::InlinedVector<const std::pair<Expr, int64_t>*, 10> order;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& t : l.terms) {
      if (t.second == 0 || (pass == 0) != (t.second > 0)) continue;
      order.push_back(&t);
    }
  }
  if (order.empty()) return {l.c, l.c};
  if (order.size() == 1 && order[0]->second == 1 && l.c == 0) {
    return Bound(order[0]->first, ranges);
  }
  I acc{l.c, l.c};
  for (const auto* t : order) {
    I bt = Scale(Bound(t->first, ranges), t->second);
    acc = {SatAdd(acc.lo, bt.lo), SatAdd(acc.hi, bt.hi)};
  }
  return acc;
}

Expr Canonical(const Expr& e) { return FromLinearOr(e, ToLinear(e)); }

// Splits linear `l` into c*Q + R with R holding the terms not divisible by c and the
// constant's remainder.
void SplitByDivisor(const Linear& l, int64_t c, Linear* q, Linear* r) {
  for (const auto& [atom, k] : l.terms) {
    if (k % c == 0) {
      q->AddTerm(atom, k / c);
    } else {
      r->AddTerm(atom, k);
    }
  }
  q->c = FloorDiv(l.c, c);
  r->c = FloorMod(l.c, c);
}

Expr SimplifyNode(const Expr& e, const RangeMap& ranges) {
  const auto& ops = e->operands;
  ExprKind k = e->kind;
  bool vec = e->type.lanes > 1;

  if (vec && (k == ExprKind::kAdd || k == ExprKind::kSub || k == ExprKind::kMul) &&
      e->type.is_int()) {
    const Expr &a = ops[0], &b = ops[1];
    auto is_ramp = [](const Expr& x) { return x->kind == ExprKind::kRamp; };
    auto is_bc = [](const Expr& x) { return x->kind == ExprKind::kBroadcast; };
    int n = e->type.lanes;
    auto simp = [&](Expr x) { return Canonical(x); };
    if (k != ExprKind::kMul) {
      auto sign = [&](Expr x) { return k == ExprKind::kAdd ? x : Mul(x, IntImm(-1)); };
      if (is_ramp(a) && is_ramp(b)) {
        return Ramp(simp(MakeBinary(k, a->operands[0], b->operands[0])),
                    simp(MakeBinary(k, a->operands[1], b->operands[1])), n);
      }
      if (is_ramp(a) && is_bc(b)) {
        return Ramp(simp(MakeBinary(k, a->operands[0], b->operands[0])), a->operands[1], n);
      }
      if (is_bc(a) && is_ramp(b)) {
        return Ramp(simp(MakeBinary(k, a->operands[0], b->operands[0])), simp(sign(b->operands[1])),
                    n);
      }
    } else {
      if (is_ramp(a) && is_bc(b)) {
        return Ramp(simp(Mul(a->operands[0], b->operands[0])),
                    simp(Mul(a->operands[1], b->operands[0])), n);
      }
      if (is_bc(a) && is_ramp(b)) {
        return Ramp(simp(Mul(b->operands[0], a->operands[0])),
                    simp(Mul(b->operands[1], a->operands[0])), n);
      }
    }
  }
  if (vec && IsBinary(k) && ops[0]->kind == ExprKind::kBroadcast &&
      ops[1]->kind == ExprKind::kBroadcast) {
    return Broadcast(SimplifyNode(MakeBinary(k, ops[0]->operands[0], ops[1]->operands[0]), ranges),
                     e->type.lanes);
  }
  if (k == ExprKind::kRamp && IsConstInt(ops[1], 0)) return Broadcast(ops[0], e->type.lanes);
  if (vec) return e;

  if (e->type.is_int()) {
    switch (k) {
      case ExprKind::kAdd:
      case ExprKind::kSub:
      case ExprKind::kMul:
        return Canonical(e);
      case ExprKind::kDiv:
      case ExprKind::kMod: {
        int64_t c;
        if (!AsConstInt(ops[1], &c) || c <= 0) return e;
        if (c == 1) return k == ExprKind::kDiv ? ops[0] : IntImm(0);
        Linear l = ToLinear(ops[0]);
        if (l.is_const()) return IntImm(k == ExprKind::kDiv ? FloorDiv(l.c, c) : FloorMod(l.c, c));
        Linear q, r;
        SplitByDivisor(l, c, &q, &r);
        I rb = BoundLinearAtoms(r, ranges);
        bool r_fits = rb.lo >= 0 && rb.hi < c;
        if (k == ExprKind::kDiv) {
          if (r_fits) return FromLinear(q);
          if (r.terms.empty()) return FromLinear(q);  // r is a constant in [0, c)
          if (q.is_const() && q.c == 0) return e;
          // (c*q + r) / c == q + r / c
          return Canonical(Add(FromLinear(q), Div(FromLinear(r), IntImm(c))));
        }
        if (r_fits) return FromLinear(r);
        if (r.terms.size() < l.terms.size()) return Mod(FromLinear(r), IntImm(c));
        return e;
      }
      case ExprKind::kMin:
      case ExprKind::kMax: {
        int64_t a, b;
        if (AsConstInt(ops[0], &a) && AsConstInt(ops[1], &b)) {
          return IntImm(k == ExprKind::kMin ? std::min(a, b) : std::max(a, b));
        }
        I d = BoundDifference(ops[0], ops[1], ranges);
        if (d.hi <= 0) return k == ExprKind::kMin ? ops[0] : ops[1];
        if (d.lo >= 0) return k == ExprKind::kMin ? ops[1] : ops[0];
        return e;
      }
      default:
        break;
    }
  }
  if (e->type.is_float() && IsBinary(k)) {
    const Expr &a = ops[0], &b = ops[1];
    if (a->kind == ExprKind::kFloatImm && b->kind == ExprKind::kFloatImm) {
      double x = a->float_value, y = b->float_value;
      switch (k) {
        case ExprKind::kAdd:
          return FloatImm(x + y);
        case ExprKind::kSub:
          return FloatImm(x - y);
        case ExprKind::kMul:
          return FloatImm(x * y);
        default:
          break;
      }
    }
    if (k == ExprKind::kMul && b->kind == ExprKind::kFloatImm && b->float_value == 1.0) return a;
    if (k == ExprKind::kMul && a->kind == ExprKind::kFloatImm && a->float_value == 1.0) return b;
  }
  if (IsCompare(k) && ops[0]->type.is_int()) {
    I d = BoundDifference(ops[0], ops[1], ranges);
    auto decide = [&](bool t, bool f) -> Expr {
      if (t) return BoolImm(true);
      if (f) return BoolImm(false);
      return e;
    };
    switch (k) {
      case ExprKind::kLT:
        return decide(d.hi < 0, d.lo >= 0);
      case ExprKind::kLE:
        return decide(d.hi <= 0, d.lo > 0);
      case ExprKind::kGT:
        return decide(d.lo > 0, d.hi <= 0);
      case ExprKind::kGE:
        return decide(d.lo >= 0, d.hi < 0);
      case ExprKind::kEQ:
        return decide(d.lo == 0 && d.hi == 0, d.lo > 0 || d.hi < 0);
      case ExprKind::kNE:
        return decide(d.lo > 0 || d.hi < 0, d.lo == 0 && d.hi == 0);
      default:
        break;
    }
  }
  auto is_bool_const = [](const Expr& x, bool* v) {
    if (x->kind != ExprKind::kIntImm || !x->type.is_bool()) return false;
    *v = x->int_value != 0;
    return true;
  };
  bool va, vb;
  if (k == ExprKind::kAnd) {
    if (is_bool_const(ops[0], &va)) return va ? ops[1] : ops[0];
    if (is_bool_const(ops[1], &vb)) return vb ? ops[0] : ops[1];
  }
  if (k == ExprKind::kOr) {
    if (is_bool_const(ops[0], &va)) return va ? ops[0] : ops[1];
    if (is_bool_const(ops[1], &vb)) return vb ? ops[1] : ops[0];
  }
  if (k == ExprKind::kNot && is_bool_const(ops[0], &va)) return BoolImm(!va);
  if (k == ExprKind::kSelect && is_bool_const(ops[0], &va)) return va ? ops[1] : ops[2];
  if (k == ExprKind::kCast && e->type.is_float() && ops[0]->kind == ExprKind::kIntImm) {
    return FloatImm(static_cast<double>(ops[0]->int_value));
  }
  return e;
}

}  // namespace

bool AsConstInt(const Expr& e, int64_t* value) {
  if (e->kind == ExprKind::kIntImm && e->type.is_int()) {
    *value = e->int_value;
    return true;
  }
  if (!IsScalarInt(e)) return false;
  Linear l = ToLinear(e);
  if (!l.is_const()) return false;
  *value = l.c;
  return true;
}

ConstInterval ConstBound(const Expr& e, const RangeMap& ranges) { return Bound(e, ranges); }

bool CanProve(const Expr& cond, const RangeMap& ranges) {
  Expr s = Simplify(cond, ranges);
  if (s->kind == ExprKind::kIntImm) return s->int_value != 0;
  if (s->kind == ExprKind::kAnd) {
    return CanProve(s->operands[0], ranges) && CanProve(s->operands[1], ranges);
  }
  if (s->kind == ExprKind::kOr) {
    return CanProve(s->operands[0], ranges) || CanProve(s->operands[1], ranges);
  }
  return false;
}

namespace {

// One Simplify call: the ranges it assumes, and its results for shared nodes (Memoized).
struct SimplifyCtx {
  const RangeMap& ranges;
  ExprMemo memo;
};

Expr SimplifyImpl(const Expr& e, SimplifyCtx& ctx);

bool IsLinearKind(const Expr& e) {
  return IsScalarInt(e) &&
         (e->kind == ExprKind::kAdd || e->kind == ExprKind::kSub || e->kind == ExprKind::kMul);
}

// The linear form of `e` with every non-linear atom simplified: one pass over an additive
// tree instead of re-canonicalising it at each of its nodes. Built into `out`, which must be
// empty, as ToLinearInto builds.
void ToLinearSimplifiedInto(const Expr& e, SimplifyCtx& ctx, Linear* out) {
  switch (e->kind) {
    case ExprKind::kIntImm:
      out->c = e->int_value;
      return;
    case ExprKind::kAdd:
    case ExprKind::kSub: {
      ToLinearSimplifiedInto(e->operands[0], ctx, out);
      Linear r;
      ToLinearSimplifiedInto(e->operands[1], ctx, &r);
      out->MergeFrom(std::move(r), e->kind == ExprKind::kAdd ? 1 : -1);
      return;
    }
    case ExprKind::kMul: {
      Linear a, b;
      ToLinearSimplifiedInto(e->operands[0], ctx, &a);
      ToLinearSimplifiedInto(e->operands[1], ctx, &b);
      if (b.is_const()) {
        out->MergeFrom(std::move(a), b.c);
      } else if (a.is_const()) {
        out->MergeFrom(std::move(b), a.c);
      } else {
        out->AddTerm(Mul(FromLinear(a), FromLinear(b)), 1);
      }
      return;
    }
    default: {
      Expr s = SimplifyImpl(e, ctx);
      if (IsLinearKind(s)) {
        ToLinearInto(s, out);
        return;
      }
      if (s->kind == ExprKind::kIntImm) {
        out->c = s->int_value;
        return;
      }
      out->AddTerm(std::move(s), 1);
      return;
    }
  }
}

Linear ToLinearSimplified(const Expr& e, SimplifyCtx& ctx) {
  Linear l;
  ToLinearSimplifiedInto(e, ctx, &l);
  MergeDivMod(&l);
  return l;
}

Expr SimplifyImpl(const Expr& e, SimplifyCtx& ctx) {
  return Memoized(e, &ctx.memo, [&] {
    if (IsLinearKind(e)) return FromLinearOr(e, ToLinearSimplified(e, ctx));
    return SimplifyNode(MapOperands(e, [&](const Expr& o) { return SimplifyImpl(o, ctx); }),
                        ctx.ranges);
  });
}

}  // namespace

Expr Simplify(const Expr& e, const RangeMap& ranges) {
  SimplifyCtx ctx{ranges, {}};
  return SimplifyImpl(e, ctx);
}

namespace {

Stmt SimplifyStmtImpl(const Stmt& s, RangeMap& ranges) {
  if (!s) return s;
  auto ex = [&](const Expr& e) { return e ? Simplify(e, ranges) : e; };
  switch (s->kind) {
    case StmtKind::kFor: {
      Expr mn = ex(s->min), ext = ex(s->extent);
      int64_t n;
      if (AsConstInt(ext, &n) && n <= 0) return nullptr;
      I mb = Bound(mn, ranges);
      I eb = Bound(ext, ranges);
      ranges[s->var.get()] = {mb.lo, SatAdd(SatAdd(mb.hi, eb.hi), -1)};
      Stmt body = SimplifyStmtImpl(s->body, ranges);
      ranges.erase(s->var.get());
      if (!body) return nullptr;
      // Unchanged statements are kept as they are rather than rebuilt.
      if (mn == s->min && ext == s->extent && body == s->body) return s;
      return For(s->var, mn, ext, s->for_kind, body, s->thread_tag);
    }
    case StmtKind::kStore: {
      Expr index = ex(s->index), value = ex(s->value), predicate = ex(s->predicate);
      if (index == s->index && value == s->value && predicate == s->predicate) return s;
      return Store(s->buffer, std::move(index), std::move(value), std::move(predicate));
    }
    case StmtKind::kIfThenElse: {
      Expr c = ex(s->cond);
      if (c->kind == ExprKind::kIntImm) {
        return SimplifyStmtImpl(c->int_value ? s->body : s->else_body, ranges);
      }
      Stmt t = SimplifyStmtImpl(s->body, ranges);
      Stmt f = SimplifyStmtImpl(s->else_body, ranges);
      if (!t && !f) return nullptr;
      if (!t) return IfThenElse(Not(c), f);
      if (c == s->cond && t == s->body && f == s->else_body) return s;
      return IfThenElse(c, t, f);
    }
    case StmtKind::kSeq: {
      std::vector<Stmt> seq;
      for (const Stmt& x : s->seq) seq.push_back(SimplifyStmtImpl(x, ranges));
      Stmt r = Seq(std::move(seq));
      if (r->kind == StmtKind::kSeq && r->seq.empty()) return nullptr;
      return r;
    }
    case StmtKind::kAllocate: {
      Stmt body = SimplifyStmtImpl(s->body, ranges);
      if (!body) return nullptr;
      if (body == s->body) return s;
      return Allocate(s->buffer, body);
    }
  }
  return s;
}

}  // namespace

Stmt SimplifyStmt(const Stmt& s, const RangeMap& ranges) {
  RangeMap r = ranges;
  Stmt out = SimplifyStmtImpl(s, r);
  return out ? out : Seq({});
}

namespace {

// True if `e` mentions a variable of `ranges`; stops at the first one (EvalInterval asks
// this of every subexpression it recurses into).
bool UsesRanged(const Expr& e, const SymRangeMap& ranges) {
  if (!e) return false;
  if (e->kind == ExprKind::kVar) return ranges.count(e.get()) != 0;
  for (const Expr& o : e->operands) {
    if (UsesRanged(o, ranges)) return true;
  }
  return false;
}

}  // namespace

SymInterval EvalInterval(const Expr& e, const SymRangeMap& ranges) {
  if (!UsesRanged(e, ranges)) return {e, e};
  if (e->kind == ExprKind::kVar) return ranges.at(e.get());
  if (IsScalarInt(e) &&
      (e->kind == ExprKind::kAdd || e->kind == ExprKind::kSub || e->kind == ExprKind::kMul)) {
    Linear l = ToLinear(e);
    if (!(l.terms.size() == 1 && l.terms[0].first == e && l.terms[0].second == 1)) {
      Expr mn = IntImm(l.c), mx = IntImm(l.c);
      for (const auto& [atom, k] : l.terms) {
        SymInterval a = EvalInterval(atom, ranges);
        if (!a.min) return {};
        const Expr& lo = k > 0 ? a.min : a.max;
        const Expr& hi = k > 0 ? a.max : a.min;
        mn = Add(mn, Mul(lo, IntImm(k)));
        mx = Add(mx, Mul(hi, IntImm(k)));
      }
      return {Simplify(mn), Simplify(mx)};
    }
  }
  switch (e->kind) {
    case ExprKind::kDiv: {
      int64_t c;
      if (!AsConstInt(e->operands[1], &c) || c <= 0) return {};
      SymInterval a = EvalInterval(e->operands[0], ranges);
      if (!a.min) return {};
      return {Simplify(Div(a.min, IntImm(c))), Simplify(Div(a.max, IntImm(c)))};
    }
    case ExprKind::kMod: {
      int64_t c;
      if (!AsConstInt(e->operands[1], &c) || c <= 0) return {};
      return {IntImm(0), IntImm(c - 1)};
    }
    case ExprKind::kMin:
    case ExprKind::kMax: {
      SymInterval a = EvalInterval(e->operands[0], ranges);
      SymInterval b = EvalInterval(e->operands[1], ranges);
      if (!a.min || !b.min) return {};
      ExprKind k = e->kind;
      return {Simplify(MakeBinary(k, a.min, b.min)), Simplify(MakeBinary(k, a.max, b.max))};
    }
    case ExprKind::kSelect: {
      SymInterval a = EvalInterval(e->operands[1], ranges);
      SymInterval b = EvalInterval(e->operands[2], ranges);
      if (!a.min || !b.min) return {};
      return {Simplify(Min(a.min, b.min)), Simplify(Max(a.max, b.max))};
    }
    default:
      return {};
  }
}

}  // namespace lathe::ir
