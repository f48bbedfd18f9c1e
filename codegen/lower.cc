#include "codegen/lower.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/gpu_passes.h"
#include "codegen/zero_taps.h"
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT: lowering speaks IR throughout

// Per-stage state of one lowering.
struct LStage {
  const Stage* st = nullptr;
  int order = 0;                    // position in topological order
  std::vector<Expr> region_min;     // per spatial axis
  std::vector<int64_t> region_ext;  // per spatial axis
  // Looked up by loop name all through lowering; hashed (no order is needed).
  std::unordered_map<std::string, int64_t> ext;  // every loop's extent after bound inference
  std::unordered_map<std::string, Expr> var;     // leaf loop -> variable
  std::unordered_map<std::string, Expr> value;   // every loop -> value in leaf variables
  std::vector<Expr> root_value;                  // per root loop: region min + loop value
  // The value of each axis variable of its tensor (root_value by variable), for substitution
  // into its body; set with root_value.
  VarMap axis_map;
  Buffer buffer;
  bool is_arg = false;
};

class Lowerer {
 public:
  explicit Lowerer(const Schedule& sch) : sch_(sch) {}

  absl::StatusOr<LoweredFunc> Run(const std::string& name);

 private:
  absl::Status Validate();
  absl::Status InferRegion(LStage& ls);
  void MakeLoops(LStage& ls);
  // The (fully expanded) value of each root loop of `ls` as a map from its tensor's axis
  // variables, for substitution into its body.
  VarMap AxisMap(const LStage& ls) const;
  // `e` with the variables of `m` substituted and every TensorRead rewritten into a Load of
  // the read tensor's buffer, in one bottom-up pass: the same expression as substituting
  // first and then rewriting the reads, without building the substituted copy.
  absl::StatusOr<Expr> LowerExpr(const Expr& e, const VarMap& m) const;
  // LowerExpr's pass; `m` may be null (no substitution: the substituted values themselves
  // are rewritten as Substitute-then-rewrite would). Nodes reached through several parents
  // are lowered once per call when `memo` is given (a Winograd transform's reads, shared by
  // its 16-36 positions' cases: each read's flat index is simplified once, and the lowered
  // body keeps the sharing for the passes after it).
  Expr LowerRec(const Expr& e, const VarMap* m, absl::Status* err,
                ir::ExprMemo* memo = nullptr) const;
  // The stages that read `stage` (Schedule::Consumers), computed once per lowering.
  const std::vector<std::string>& Consumers(const std::string& stage) const;
  absl::StatusOr<Expr> FlatIndex(const std::string& tensor, const std::vector<Expr>& idx) const;
  absl::StatusOr<Stmt> MakeNest(const LStage& ls);
  absl::StatusOr<Stmt> ComputeStmt(const LStage& ls, bool init);
  // The bounds checks of `ls`'s compute statement (those of its reduce loops only when
  // `include_reduce`), null when every one provably holds.
  Expr Guard(const LStage& ls, bool include_reduce) const;
  // Every bounds check of `ls`, simplified, in order, those that provably hold left out;
  // computed once per stage: a reduction's init and update statements share the spatial ones.
  struct GuardTerm {
    Expr cond;
    bool reduce;  // a check of a reduce loop
  };
  const std::vector<GuardTerm>& GuardTerms(const LStage& ls) const;
  // The stage `x` is attached under, walking up to `t`: returns the loop of `t` it lives
  // in, or "" when `x` does not live inside `t`.
  std::string LoopInside(const Stage& x, const std::string& t) const;

  const Schedule& sch_;
  std::vector<LStage> stages_;  // active (not inlined) stages, topological
  std::map<std::string, LStage*> by_name_;
  std::map<std::string, Buffer> arg_buffers_;  // placeholders and the output
  RangeMap ranges_;                            // every leaf variable -> [0, extent - 1]
  std::unordered_map<std::string, std::vector<std::string>> consumers_;
  mutable std::map<const LStage*, std::vector<GuardTerm>> guard_terms_;
};

absl::Status Lowerer::Validate() {
  for (const LStage& ls : stages_) {
    const Stage& s = *ls.st;
    if (s.attach != AttachKind::kAt) continue;
    auto it = by_name_.find(s.attach_stage);
    if (it == by_name_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "compute_at: stage '", s.name, "' is attached to missing stage '", s.attach_stage, "'"));
    }
    if (!it->second->st->IsLeaf(s.attach_loop)) {
      return absl::InvalidArgumentError(
          absl::StrCat("compute_at: loop '", s.attach_loop, "' of stage '", s.attach_stage,
                       "' is no longer a leaf loop (stage '", s.name, "' is attached there)"));
    }
    const auto& tl = it->second->st->leaves;
    size_t lpos = std::find(tl.begin(), tl.end(), s.attach_loop) - tl.begin();
    for (const std::string& c : Consumers(s.name)) {
      if (c == s.attach_stage) continue;
      std::string l = LoopInside(*by_name_.at(c)->st, s.attach_stage);
      if (l.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("compute_at: consumer '", c, "' of stage '",
                                                       s.name, "' is not computed inside '",
                                                       s.attach_stage, "'"));
      }
      if (static_cast<size_t>(std::find(tl.begin(), tl.end(), l) - tl.begin()) < lpos) {
        return absl::InvalidArgumentError(absl::StrCat(
            "compute_at: consumer '", c, "' of stage '", s.name, "' is computed at loop '", l,
            "' of '", s.attach_stage, "', outside loop '", s.attach_loop, "'"));
      }
    }
  }
  return absl::OkStatus();
}

std::string Lowerer::LoopInside(const Stage& x, const std::string& t) const {
  const Stage* cur = &x;
  for (int guard = 0; cur && cur->attach == AttachKind::kAt && guard < 1000; ++guard) {
    if (cur->attach_stage == t) return cur->attach_loop;
    auto it = by_name_.find(cur->attach_stage);
    cur = it == by_name_.end() ? nullptr : it->second->st;
  }
  return "";
}

void Lowerer::MakeLoops(LStage& ls) {
  const Stage& s = *ls.st;
  size_t nspatial = s.tensor->axes.size();
  for (size_t r = 0; r < s.root_loops.size(); ++r) {
    ls.ext[s.root_loops[r]] = r < nspatial ? ls.region_ext[r] : s.loops.at(s.root_loops[r]).extent;
  }
  for (const Relation& rel : s.relations) {
    if (rel.kind == Relation::kSplit) {
      int64_t p = ls.ext.at(rel.inputs[0]);
      int64_t inner = std::min(rel.factor, p);
      ls.ext[rel.outputs[0]] = (p + inner - 1) / inner;
      ls.ext[rel.outputs[1]] = inner;
    } else {
      ls.ext[rel.outputs[0]] = ls.ext.at(rel.inputs[0]) * ls.ext.at(rel.inputs[1]);
    }
  }
  for (const std::string& l : s.leaves) {
    Expr v = MakeVar(s.name + "." + l);
    ls.var[l] = v;
    ls.value[l] = v;
    ranges_[v.get()] = {0, ls.ext.at(l) - 1};
  }
  for (auto it = s.relations.rbegin(); it != s.relations.rend(); ++it) {
    const Relation& rel = *it;
    if (rel.kind == Relation::kSplit) {
      const Expr& o = ls.value.at(rel.outputs[0]);
      const Expr& i = ls.value.at(rel.outputs[1]);
      ls.value[rel.inputs[0]] = Add(Mul(o, IntImm(ls.ext.at(rel.outputs[1]))), i);
    } else {
      const Expr& f = ls.value.at(rel.outputs[0]);
      int64_t inner = ls.ext.at(rel.inputs[1]);
      ls.value[rel.inputs[0]] = Div(f, IntImm(inner));
      ls.value[rel.inputs[1]] = Mod(f, IntImm(inner));
    }
  }
  ls.root_value.clear();
  for (size_t r = 0; r < s.root_loops.size(); ++r) {
    Expr v = Simplify(ls.value.at(s.root_loops[r]), ranges_);
    if (r < nspatial) v = Simplify(Add(ls.region_min[r], v), ranges_);
    ls.root_value.push_back(v);
  }
  ls.axis_map = AxisMap(ls);
}

VarMap Lowerer::AxisMap(const LStage& ls) const {
  VarMap m;
  const Tensor& t = ls.st->tensor;
  size_t n = t->axes.size();
  for (size_t d = 0; d < n; ++d) m[t->axes[d]->var.get()] = ls.root_value[d];
  const auto& red = t->reduce_axes();
  for (size_t d = 0; d < red.size(); ++d) m[red[d]->var.get()] = ls.root_value[n + d];
  return m;
}

absl::Status Lowerer::InferRegion(LStage& ls) {
  const Stage& s = *ls.st;
  size_t ndim = s.tensor->shape.size();
  ls.region_min.assign(ndim, IntImm(0));
  ls.region_ext.assign(s.tensor->shape.begin(), s.tensor->shape.end());
  if (s.attach != AttachKind::kAt) return absl::OkStatus();

  const LStage& tgt = *by_name_.at(s.attach_stage);
  const auto& tl = tgt.st->leaves;
  size_t lpos = std::find(tl.begin(), tl.end(), s.attach_loop) - tl.begin();
  // Variables that range within one iteration of the attachment loop.
  SymRangeMap ranged;
  auto range_all = [&](const LStage& x) {
    for (const auto& [l, v] : x.var) ranged[v.get()] = {IntImm(0), IntImm(x.ext.at(l) - 1)};
  };
  for (size_t p = lpos + 1; p < tl.size(); ++p) {
    ranged[tgt.var.at(tl[p]).get()] = {IntImm(0), IntImm(tgt.ext.at(tl[p]) - 1)};
  }
  for (const LStage& x : stages_) {
    if (&x == &ls || x.order < ls.order) continue;  // producers are not yet known
    std::string l = LoopInside(*x.st, s.attach_stage);
    if (l.empty()) continue;
    size_t p = std::find(tl.begin(), tl.end(), l) - tl.begin();
    if (p >= lpos) range_all(x);
  }
  if (s.scope == "shared") {
    // A block's threads fill a shared stage together, so its region is what every thread of
    // the block needs: the threadIdx loops enclosing the attachment (of the target and of
    // the stages it is attached in) range too. (GPU threads are not loops: each thread runs
    // the fill, bound to its own part, at the same point.)
    const LStage* cur = &tgt;
    size_t upto = lpos;
    for (int guard = 0; cur && guard < 1000; ++guard) {
      const auto& leaves = cur->st->leaves;
      for (size_t p = 0; p <= upto && p < leaves.size(); ++p) {
        const LoopInfo& li = cur->st->loops.at(leaves[p]);
        if (li.kind == ForKind::kThreadBinding && li.thread_tag.rfind("threadIdx.", 0) == 0) {
          ranged[cur->var.at(leaves[p]).get()] = {IntImm(0), IntImm(cur->ext.at(leaves[p]) - 1)};
        }
      }
      if (cur->st->attach != AttachKind::kAt) break;
      const LStage& up = *by_name_.at(cur->st->attach_stage);
      const auto& ul = up.st->leaves;
      upto = std::find(ul.begin(), ul.end(), cur->st->attach_loop) - ul.begin();
      cur = &up;
    }
  }

  std::vector<Expr> mins(ndim), maxs(ndim);
  bool unknown = false;
  for (const std::string& c : Consumers(s.name)) {
    const LStage& cs = *by_name_.at(c);
    const VarMap& m = cs.axis_map;
    Visit(cs.st->tensor->body, [&](const Expr& x) {
      if (x->kind != ExprKind::kTensorRead || x->name != s.name || unknown) return;
      for (size_t d = 0; d < ndim; ++d) {
        Expr idx = Simplify(Substitute(x->operands[d], m), ranges_);
        SymInterval iv = EvalInterval(idx, ranged);
        if (!iv.min) {
          unknown = true;
          return;
        }
        if (!mins[d]) {
          mins[d] = iv.min;
          maxs[d] = iv.max;
          continue;
        }
        int64_t diff;
        if (AsConstInt(Simplify(Sub(iv.min, mins[d])), &diff)) {
          if (diff < 0) mins[d] = iv.min;
        } else {
          mins[d] = Simplify(Min(mins[d], iv.min), ranges_);
        }
        if (AsConstInt(Simplify(Sub(iv.max, maxs[d])), &diff)) {
          if (diff > 0) maxs[d] = iv.max;
        } else {
          maxs[d] = Simplify(Max(maxs[d], iv.max), ranges_);
        }
      }
    });
  }
  if (unknown) return absl::OkStatus();  // keep the full region
  for (size_t d = 0; d < ndim; ++d) {
    if (!mins[d]) continue;
    ConstInterval span = ConstBound(Simplify(Sub(maxs[d], mins[d]), ranges_), ranges_);
    if (!span.bounded() || span.hi + 1 >= s.tensor->shape[d]) continue;
    ls.region_min[d] = mins[d];
    ls.region_ext[d] = std::max<int64_t>(span.hi + 1, 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<Expr> Lowerer::FlatIndex(const std::string& tensor,
                                        const std::vector<Expr>& idx) const {
  std::vector<int64_t> ext;
  std::vector<Expr> mins;
  auto it = by_name_.find(tensor);
  if (it != by_name_.end()) {
    ext = it->second->region_ext;
    mins = it->second->region_min;
  } else {
    auto a = arg_buffers_.find(tensor);
    if (a == arg_buffers_.end()) {
      return absl::InternalError("read of unknown tensor '" + tensor + "'");
    }
    ext = a->second->shape;
    mins.assign(ext.size(), IntImm(0));
  }
  if (idx.size() != ext.size()) {
    return absl::InternalError(absl::StrCat("tensor '", tensor, "' read with ", idx.size(),
                                            " indices, has ", ext.size(), " dimensions"));
  }
  Expr flat = IntImm(0);
  for (size_t d = 0; d < idx.size(); ++d) {
    flat = Add(Mul(flat, IntImm(ext[d])), Sub(idx[d], mins[d]));
  }
  return Simplify(flat, ranges_);
}

const std::vector<std::string>& Lowerer::Consumers(const std::string& stage) const {
  static const std::vector<std::string> kNone;
  auto it = consumers_.find(stage);
  return it == consumers_.end() ? kNone : it->second;
}

Expr Lowerer::LowerRec(const Expr& e, const VarMap* m, absl::Status* err,
                       ir::ExprMemo* memo) const {
  if (e->kind == ExprKind::kVar) {
    if (!m) return e;
    auto it = m->find(e.get());
    return it == m->end() ? e : LowerRec(it->second, nullptr, err);
  }
  return ir::Memoized(e, memo, [&]() -> Expr {
    if (e->kind != ExprKind::kTensorRead) {
      return MapOperands(e, [&](const Expr& o) { return LowerRec(o, m, err, memo); });
    }
    std::vector<Expr> idx;
    idx.reserve(e->operands.size());
    for (const Expr& o : e->operands) idx.push_back(LowerRec(o, m, err, memo));
    auto flat = FlatIndex(e->name, idx);
    if (!flat.ok()) {
      *err = flat.status();
      return WithOperands(e, std::move(idx));
    }
    auto it = by_name_.find(e->name);
    const Buffer& buf = it != by_name_.end() ? it->second->buffer : arg_buffers_.at(e->name);
    return Load(buf, *flat);
  });
}

absl::StatusOr<Expr> Lowerer::LowerExpr(const Expr& e, const VarMap& m) const {
  absl::Status err;
  ir::ExprMemo memo;
  Expr out = LowerRec(e, m.empty() ? nullptr : &m, &err, &memo);
  if (!err.ok()) return err;
  return out;
}

const std::vector<Lowerer::GuardTerm>& Lowerer::GuardTerms(const LStage& ls) const {
  auto [it, fresh] = guard_terms_.try_emplace(&ls);
  std::vector<GuardTerm>& terms = it->second;
  if (!fresh) return terms;
  const Stage& s = *ls.st;
  size_t nspatial = s.tensor->axes.size();
  auto add = [&](Expr c, bool reduce) {
    c = Simplify(c, ranges_);
    if (c->kind == ExprKind::kIntImm && c->int_value) return;
    terms.push_back({std::move(c), reduce});
  };
  for (size_t r = 0; r < s.root_loops.size(); ++r) {
    const Expr& loop_value = ls.value.at(s.root_loops[r]);
    int64_t region = r < nspatial ? ls.region_ext[r] : s.loops.at(s.root_loops[r]).extent;
    // Most checks hold by the loops' ranges alone: those cost a bound, not a simplification.
    if (ConstBound(loop_value, ranges_).hi >= region) {
      add(LT(loop_value, IntImm(region)), r >= nspatial);
    }
    if (r < nspatial && s.attach == AttachKind::kAt) {
      // The region may stick out of the tensor at its edges.
      const ConstInterval b = ConstBound(ls.root_value[r], ranges_);
      if (b.hi >= s.tensor->shape[r]) add(LT(ls.root_value[r], IntImm(s.tensor->shape[r])), false);
      if (b.lo < 0) add(GE(ls.root_value[r], IntImm(0)), false);
    }
  }
  // A split of a non-root loop whose parts do not tile it exactly can step past the end of
  // that loop even when the root stays in range (k.1 of extent 3 split by 2 runs 0..3).
  for (const Relation& rel : s.relations) {
    if (rel.kind != Relation::kSplit) continue;
    const std::string& in = rel.inputs[0];
    if (std::count(s.root_loops.begin(), s.root_loops.end(), in)) continue;  // guarded above
    if (ls.ext.at(rel.outputs[0]) * ls.ext.at(rel.outputs[1]) == ls.ext.at(in)) continue;
    add(LT(ls.value.at(in), IntImm(ls.ext.at(in))), s.loops.at(in).reduce);
  }
  return terms;
}

Expr Lowerer::Guard(const LStage& ls, bool include_reduce) const {
  Expr cond;
  for (const GuardTerm& t : GuardTerms(ls)) {
    if (t.reduce && !include_reduce) continue;
    cond = cond ? And(cond, t.cond) : t.cond;
  }
  return cond;
}

absl::StatusOr<Stmt> Lowerer::ComputeStmt(const LStage& ls, bool init) {
  const Stage& s = *ls.st;
  size_t nspatial = s.tensor->axes.size();
  std::vector<Expr> local;  // index into the stage's own (region) buffer
  for (size_t d = 0; d < nspatial; ++d) local.push_back(ls.value.at(s.root_loops[d]));
  Expr flat = IntImm(0);
  for (size_t d = 0; d < nspatial; ++d) flat = Add(Mul(flat, IntImm(ls.region_ext[d])), local[d]);
  flat = Simplify(flat, ranges_);
  const VarMap& m = ls.axis_map;
  const Expr& body = s.tensor->body;
  Stmt st;
  if (!s.tensor->is_reduction()) {
    auto v = LowerExpr(body, m);
    if (!v.ok()) return v.status();
    st = Store(ls.buffer, flat, *v);
  } else if (init) {
    st = Store(ls.buffer, flat, ReduceIdentity(body->reduce_op, body->type));
  } else {
    auto src = LowerExpr(body->operands[0], m);
    if (!src.ok()) return src.status();
    Expr acc = ReduceCombine(body->reduce_op, Load(ls.buffer, flat), *src);
    st = Store(ls.buffer, flat, acc);
    if (body->operands.size() > 1) {
      auto c = LowerExpr(body->operands[1], m);
      if (!c.ok()) return c.status();
      st = IfThenElse(*c, st);
    }
  }
  Expr g = Guard(ls, !init);
  return g ? IfThenElse(g, st) : st;
}

absl::StatusOr<Stmt> Lowerer::MakeNest(const LStage& ls) {
  const Stage& s = *ls.st;
  // Stages attached at each loop of this stage, in topological order.
  std::map<std::string, std::vector<const LStage*>> children;
  for (const LStage& x : stages_) {
    if (x.st->attach == AttachKind::kAt && x.st->attach_stage == s.name) {
      children[x.st->attach_loop].push_back(&x);
    }
  }
  int first_reduce = -1;
  for (size_t p = 0; p < s.leaves.size(); ++p) {
    if (s.loops.at(s.leaves[p]).reduce) {
      first_reduce = static_cast<int>(p);
      break;
    }
  }
  auto make_for = [&](const std::string& l, Stmt body) {
    const LoopInfo& li = s.loops.at(l);
    return For(ls.var.at(l), IntImm(0), IntImm(ls.ext.at(l)), li.kind, std::move(body),
               li.thread_tag);
  };
  Stmt init;
  if (s.tensor->is_reduction()) {
    auto st = ComputeStmt(ls, /*init=*/true);
    if (!st.ok()) return st.status();
    init = *st;
    for (int p = static_cast<int>(s.leaves.size()) - 1; p > first_reduce; --p) {
      if (!s.loops.at(s.leaves[p]).reduce) init = make_for(s.leaves[p], init);
    }
  }
  auto inner = ComputeStmt(ls, /*init=*/false);
  if (!inner.ok()) return inner.status();
  Stmt body = *inner;
  for (int p = static_cast<int>(s.leaves.size()) - 1; p >= 0; --p) {
    const std::string& l = s.leaves[p];
    auto it = children.find(l);
    if (it != children.end()) {
      std::vector<Stmt> seq;
      for (const LStage* c : it->second) {
        auto cs = MakeNest(*c);
        if (!cs.ok()) return cs.status();
        seq.push_back(*cs);
      }
      seq.push_back(body);
      body = Seq(std::move(seq));
      for (auto c = it->second.rbegin(); c != it->second.rend(); ++c) {
        body = Allocate((*c)->buffer, body);
      }
    }
    body = make_for(l, body);
    if (p == first_reduce) body = Seq({init, body});
  }
  if (first_reduce < 0 && init) body = Seq({init, body});
  return body;
}

absl::StatusOr<LoweredFunc> Lowerer::Run(const std::string& name) {
  const Workload& w = sch_.workload();
  LoweredFunc f;
  f.name = name;
  for (const Tensor& t : w.args) {
    Buffer b = MakeBuffer(t->name, t->dtype, t->shape);
    arg_buffers_[t->name] = b;
    f.args.push_back(b);
  }
  for (const Stage& s : sch_.stages()) {
    if (s.attach == AttachKind::kInline) continue;
    LStage ls;
    ls.st = &s;
    ls.order = static_cast<int>(stages_.size());
    stages_.push_back(ls);
  }
  for (LStage& ls : stages_) by_name_[ls.st->name] = &ls;
  // Schedule::Consumers walks every stage's body per call: invert the reads once.
  for (const Stage& s : sch_.stages()) {
    if (s.attach == AttachKind::kInline) continue;
    for (const std::string& r : ReadTensors(s.tensor->body)) {
      if (r != s.name) consumers_[r].push_back(s.name);
    }
  }
  if (auto v = Validate(); !v.ok()) return v;

  // Consumers before producers: a region depends on the loops of the stages reading it.
  for (auto it = stages_.rbegin(); it != stages_.rend(); ++it) {
    if (auto st = InferRegion(*it); !st.ok()) return st;
    MakeLoops(*it);
    const Stage& s = *it->st;
    if (s.is_output) {
      it->buffer = arg_buffers_.at(s.name);
      it->is_arg = true;
    } else {
      it->buffer = MakeBuffer(s.name, s.tensor->dtype, it->region_ext, s.scope);
    }
  }

  std::vector<Stmt> seq;
  std::vector<Buffer> root_allocs;
  for (const LStage& ls : stages_) {
    if (ls.st->attach == AttachKind::kAt) continue;
    auto nest = MakeNest(ls);
    if (!nest.ok()) return nest.status();
    seq.push_back(*nest);
    if (!ls.is_arg) root_allocs.push_back(ls.buffer);
  }
  Stmt body = Seq(std::move(seq));
  for (auto it = root_allocs.rbegin(); it != root_allocs.rend(); ++it) body = Allocate(*it, body);
  f.body = SimplifyStmt(body);
  return f;
}

}  // namespace

LowerOptions LowerOptions::ForTarget(ir::TargetKind kind) {
  if (kind == ir::TargetKind::kCpu) return LowerOptions{};
  LowerOptions o = StructuralOnly();
  o.gpu_vectorize = true;
  o.double_buffer = true;
  return o;
}

LowerOptions LowerOptions::StructuralOnly() {
  LowerOptions o;
  o.skip_zero_taps = false;
  o.partition = false;
  o.vectorize = false;
  return o;
}

absl::StatusOr<LoweredFunc> Lower(const Schedule& sch, const std::string& name,
                                  const LowerOptions& options) {
  absl::StatusOr<LoweredFunc> f = Lowerer(sch).Run(name);  // 1. structural lowering
  if (!f.ok()) return f;
  bool padded = false;  // any accumulation of a padding's products
  if (options.skip_zero_taps) f->body = SkipZeroTaps(f->body, &padded);                 // 1b.
  if (options.partition) f->body = PartitionLoops(f->body, options.partition_options);  // 2.
  if (padded) f->body = SkipZeroTaps(f->body);                                          // 2b.
  if (options.vectorize) f->body = VectorizeLoops(f->body);                             // 3.
  if (options.gpu_vectorize) f->body = VectorizeGpuAccesses(f->body);                   // 4.
  if (options.double_buffer) f->body = DoubleBufferSharedTiles(f->body);                // 5.
  return f;
}

}  // namespace lathe::codegen
