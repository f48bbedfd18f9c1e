#include "ir/schedule.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "ir/functor.h"

namespace lathe::ir {

namespace {

absl::Status Err(const char* primitive, const std::string& stage, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(primitive, ": ", what, " (stage '", stage, "')"));
}

absl::Status LoopErr(const char* primitive, const std::string& stage, const std::string& loop,
                     const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(primitive, ": ", what, " for loop '", loop, "' of stage '", stage, "'"));
}

bool ValidScope(const std::string& s) { return s == "global" || s == "local" || s == "shared"; }

// (Re)initialises the loops of a stage from its tensor definition.
void InitLoops(Stage& st) {
  st.root_loops.clear();
  st.leaves.clear();
  st.loops.clear();
  st.relations.clear();
  auto add = [&](const IterVar& iv) {
    LoopInfo li;
    li.name = iv->var->name;
    li.extent = iv->extent;
    li.reduce = iv->reduce;
    st.root_loops.push_back(li.name);
    st.leaves.push_back(li.name);
    st.loops[li.name] = li;
  };
  for (const IterVar& iv : st.tensor->axes) add(iv);
  for (const IterVar& iv : st.tensor->reduce_axes()) add(iv);
}

bool Untransformed(const Stage& st) {
  if (!st.relations.empty() || st.leaves != st.root_loops) return false;
  for (const auto& [name, li] : st.loops) {
    if (li.kind != ForKind::kSerial) return false;
  }
  return true;
}

// Replaces reads of tensor `from` by reads of tensor `to` (same indices).
Expr RenameReads(const Expr& e, const std::string& from, const std::string& to) {
  return Rewrite(e, [&](const Expr& x) {
    if (x->kind != ExprKind::kTensorRead || x->name != from) return x;
    return TensorRead(to, x->type, x->operands);
  });
}

Tensor WithBody(const Tensor& t, Expr body, std::string name = "") {
  auto n = std::make_shared<TensorNode>(*t);
  n->body = std::move(body);
  if (!name.empty()) n->name = std::move(name);
  return n;
}

}  // namespace

const LoopInfo* Stage::FindLoop(const std::string& loop) const {
  auto it = loops.find(loop);
  return it == loops.end() ? nullptr : &it->second;
}

bool Stage::IsLeaf(const std::string& loop) const {
  return std::find(leaves.begin(), leaves.end(), loop) != leaves.end();
}

Schedule::Schedule(Workload workload, std::string target)
    : Schedule(std::make_shared<const Workload>(std::move(workload)), std::move(target)) {}

Schedule::Schedule(std::shared_ptr<const Workload> workload, std::string target)
    : workload_(std::move(workload)) {
  trace_.workload = workload_->canonical;
  trace_.target = std::move(target);
  for (const Tensor& t : workload_->tensors) {
    if (t->is_placeholder()) continue;
    Stage st;
    st.name = t->name;
    st.tensor = t;
    st.is_output = t->name == workload_->output()->name;
    InitLoops(st);
    stages_.push_back(std::move(st));
  }
}

const Stage* Schedule::FindStage(const std::string& name) const {
  for (const Stage& s : stages_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

absl::StatusOr<Stage*> Schedule::Mutable(const std::string& stage, const char* primitive) {
  for (Stage& s : stages_) {
    if (s.name != stage) continue;
    if (s.attach == AttachKind::kInline) return Err(primitive, stage, "stage is inlined");
    if (!s.tensorize.empty()) return Err(primitive, stage, "stage is tensorized");
    return &s;
  }
  return Err(primitive, stage, "no such stage");
}

void Schedule::Record(Instruction inst) { trace_.instructions.push_back(std::move(inst)); }

std::vector<std::string> Schedule::Consumers(const std::string& stage) const {
  std::vector<std::string> out;
  for (const Stage& s : stages_) {
    if (s.attach == AttachKind::kInline || s.name == stage) continue;
    for (const std::string& r : ReadTensors(s.tensor->body)) {
      if (r == stage) {
        out.push_back(s.name);
        break;
      }
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Schedule::Split(const std::string& stage,
                                                         const std::string& loop,
                                                         const std::vector<int64_t>& factors) {
  auto st_or = Mutable(stage, "split");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (!st.IsLeaf(loop)) return LoopErr("split", stage, loop, "no such leaf loop");
  if (factors.empty()) return LoopErr("split", stage, loop, "no factors");
  for (int64_t f : factors) {
    if (f < 1) return LoopErr("split", stage, loop, absl::StrCat("factor ", f, " is not positive"));
  }
  const LoopInfo parent = st.loops[loop];
  if (parent.kind != ForKind::kSerial) {
    return LoopErr("split", stage, loop, "cannot split an annotated loop");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i <= factors.size(); ++i) {
    names.push_back(absl::StrCat(loop, ".", i));
    if (st.loops.count(names.back())) {
      return LoopErr("split", stage, loop, "loop '" + names.back() + "' already exists");
    }
  }
  int64_t prod = 1;
  for (int64_t f : factors) {
    if (prod > (int64_t{1} << 40) / f) return LoopErr("split", stage, loop, "factors too large");
    prod *= f;
  }
  // A chain of binary splits: loop -> (name0, rest1) -> (name1, rest2) -> ...
  std::string cur = loop;
  int64_t cur_ext = parent.extent;
  for (size_t i = 0; i < factors.size(); ++i) {
    int64_t inner_prod = 1;
    for (size_t j = i; j < factors.size(); ++j) inner_prod *= factors[j];
    std::string inner = i + 1 == factors.size() ? names.back() : absl::StrCat(loop, ".r", i + 1);
    LoopInfo o{names[i], (cur_ext + inner_prod - 1) / inner_prod, parent.reduce};
    LoopInfo in{inner, inner_prod, parent.reduce};
    st.loops[o.name] = o;
    st.loops[in.name] = in;
    st.relations.push_back({Relation::kSplit, {cur}, {o.name, in.name}, inner_prod});
    cur = inner;
    cur_ext = inner_prod;
  }
  auto pos = std::find(st.leaves.begin(), st.leaves.end(), loop);
  pos = st.leaves.erase(pos);
  st.leaves.insert(pos, names.begin(), names.end());
  Record({.kind = "split", .stage = stage, .loops = {loop}, .factors = factors});
  return names;
}

absl::Status Schedule::Reorder(const std::string& stage, const std::vector<std::string>& loops) {
  auto st_or = Mutable(stage, "reorder");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  std::vector<size_t> pos;
  std::set<std::string> seen;
  for (const std::string& l : loops) {
    if (!st.IsLeaf(l)) return LoopErr("reorder", stage, l, "no such leaf loop");
    if (!seen.insert(l).second) return LoopErr("reorder", stage, l, "loop given twice");
    pos.push_back(std::find(st.leaves.begin(), st.leaves.end(), l) - st.leaves.begin());
  }
  std::sort(pos.begin(), pos.end());
  for (size_t i = 0; i < loops.size(); ++i) st.leaves[pos[i]] = loops[i];
  Record({.kind = "reorder", .stage = stage, .loops = loops});
  return absl::OkStatus();
}

absl::StatusOr<std::string> Schedule::Fuse(const std::string& stage,
                                           const std::vector<std::string>& loops) {
  auto st_or = Mutable(stage, "fuse");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (loops.size() < 2) return Err("fuse", stage, "needs at least two loops");
  size_t first = 0;
  for (size_t i = 0; i < loops.size(); ++i) {
    const std::string& l = loops[i];
    auto it = std::find(st.leaves.begin(), st.leaves.end(), l);
    if (it == st.leaves.end()) return LoopErr("fuse", stage, l, "no such leaf loop");
    size_t p = it - st.leaves.begin();
    if (i == 0) first = p;
    if (p != first + i) return LoopErr("fuse", stage, l, "loops to fuse are not adjacent");
    const LoopInfo& li = st.loops[l];
    if (li.reduce != st.loops[loops[0]].reduce) {
      return LoopErr("fuse", stage, l, "cannot fuse a reduce loop with a spatial loop");
    }
    if (li.kind != ForKind::kSerial)
      return LoopErr("fuse", stage, l, "cannot fuse an annotated loop");
  }
  std::string name = absl::StrJoin(loops, "+");
  if (st.loops.count(name)) return LoopErr("fuse", stage, name, "loop already exists");
  std::string cur = loops[0];
  int64_t ext = st.loops[cur].extent;
  bool reduce = st.loops[cur].reduce;
  for (size_t i = 1; i < loops.size(); ++i) {
    std::string fused = i + 1 == loops.size() ? name : cur + "+" + loops[i];
    ext *= st.loops[loops[i]].extent;
    st.loops[fused] = LoopInfo{fused, ext, reduce};
    st.relations.push_back({Relation::kFuse, {cur, loops[i]}, {fused}, 0});
    cur = fused;
  }
  st.leaves.erase(st.leaves.begin() + first, st.leaves.begin() + first + loops.size());
  st.leaves.insert(st.leaves.begin() + first, name);
  Record({.kind = "fuse", .stage = stage, .loops = loops});
  return name;
}

namespace {

absl::Status Annotate(Stage& st, const char* primitive, const std::string& loop, ForKind kind,
                      const std::string& tag) {
  if (!st.IsLeaf(loop)) return LoopErr(primitive, st.name, loop, "no such leaf loop");
  LoopInfo& li = st.loops[loop];
  if (li.kind != ForKind::kSerial && (li.kind != kind || li.thread_tag != tag)) {
    return LoopErr(primitive, st.name, loop,
                   absl::StrCat("loop is already ", ForKindName(li.kind)));
  }
  if ((kind == ForKind::kParallel || kind == ForKind::kThreadBinding) && li.reduce) {
    return LoopErr(primitive, st.name, loop, "cannot run a reduce loop in parallel");
  }
  li.kind = kind;
  li.thread_tag = tag;
  return absl::OkStatus();
}

}  // namespace

absl::Status Schedule::Parallel(const std::string& stage, const std::string& loop) {
  auto st_or = Mutable(stage, "parallel");
  if (!st_or.ok()) return st_or.status();
  auto s = Annotate(**st_or, "parallel", loop, ForKind::kParallel, "");
  if (s.ok()) Record({.kind = "parallel", .stage = stage, .loops = {loop}});
  return s;
}

absl::Status Schedule::Vectorize(const std::string& stage, const std::string& loop) {
  auto st_or = Mutable(stage, "vectorize");
  if (!st_or.ok()) return st_or.status();
  const LoopInfo* li = (*st_or)->FindLoop(loop);
  if (li && li->extent > 1024) {
    return LoopErr("vectorize", stage, loop,
                   absl::StrCat("extent ", li->extent, " is too long to vectorize (max 1024)"));
  }
  auto s = Annotate(**st_or, "vectorize", loop, ForKind::kVectorized, "");
  if (s.ok()) Record({.kind = "vectorize", .stage = stage, .loops = {loop}});
  return s;
}

absl::Status Schedule::Unroll(const std::string& stage, const std::string& loop) {
  auto st_or = Mutable(stage, "unroll");
  if (!st_or.ok()) return st_or.status();
  const LoopInfo* li = (*st_or)->FindLoop(loop);
  if (li && li->extent > 4096) {
    return LoopErr("unroll", stage, loop,
                   absl::StrCat("extent ", li->extent, " is too long to unroll (max 4096)"));
  }
  auto s = Annotate(**st_or, "unroll", loop, ForKind::kUnrolled, "");
  if (s.ok()) Record({.kind = "unroll", .stage = stage, .loops = {loop}});
  return s;
}

absl::Status Schedule::Bind(const std::string& stage, const std::string& loop,
                            const std::string& tag) {
  static const std::set<std::string> kTags = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                              "threadIdx.x", "threadIdx.y", "threadIdx.z",
                                              "vthread"};
  auto st_or = Mutable(stage, "bind");
  if (!st_or.ok()) return st_or.status();
  if (!kTags.count(tag)) return LoopErr("bind", stage, loop, "unknown thread tag '" + tag + "'");
  for (const auto& [name, li] : (*st_or)->loops) {
    if (li.thread_tag == tag && name != loop && tag != "vthread") {
      return LoopErr("bind", stage, loop,
                     "tag '" + tag + "' is already bound to loop '" + name + "'");
    }
  }
  auto s = Annotate(**st_or, "bind", loop, ForKind::kThreadBinding, tag);
  if (s.ok()) Record({.kind = "bind", .stage = stage, .loops = {loop}, .tag = tag});
  return s;
}

absl::StatusOr<std::string> Schedule::CacheWrite(const std::string& stage,
                                                 const std::string& scope) {
  auto st_or = Mutable(stage, "cache_write");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (!ValidScope(scope)) return Err("cache_write", stage, "unknown scope '" + scope + "'");
  if (!Untransformed(st)) {
    return Err("cache_write", stage, "must be applied before the stage's loops are transformed");
  }
  std::string name = stage + "." + scope;
  if (FindStage(name) || workload_->Find(name)) {
    return Err("cache_write", stage, "stage '" + name + "' already exists");
  }
  Stage cache;
  cache.name = name;
  cache.tensor = WithBody(st.tensor, st.tensor->body, name);
  cache.scope = scope;
  InitLoops(cache);
  std::vector<Expr> idx;
  for (const IterVar& iv : st.tensor->axes) idx.push_back(iv->var);
  auto copy = std::make_shared<TensorNode>(*st.tensor);
  copy->body = TensorRead(name, st.tensor->dtype, idx);
  copy->tag = "elementwise";
  st.tensor = copy;
  InitLoops(st);
  size_t pos = &st - stages_.data();
  stages_.insert(stages_.begin() + pos, std::move(cache));
  Record({.kind = "cache_write", .stage = stage, .tag = scope});
  return name;
}

absl::StatusOr<std::string> Schedule::CacheRead(const std::string& tensor, const std::string& scope,
                                                const std::vector<std::string>& consumers) {
  const Tensor* src = workload_->Find(tensor);
  const Stage* src_stage = FindStage(tensor);
  if (!src && !src_stage) return Err("cache_read", tensor, "no such tensor");
  if (src_stage && src_stage->attach == AttachKind::kInline) {
    return Err("cache_read", tensor, "tensor is inlined");
  }
  if (!ValidScope(scope)) return Err("cache_read", tensor, "unknown scope '" + scope + "'");
  if (consumers.empty()) return Err("cache_read", tensor, "no consumers given");
  std::vector<std::string> readers = Consumers(tensor);
  for (const std::string& c : consumers) {
    if (std::find(readers.begin(), readers.end(), c) == readers.end()) {
      return Err("cache_read", tensor, "'" + c + "' does not read this tensor");
    }
  }
  std::string name = tensor + "." + scope;
  for (int n = 1; FindStage(name) || workload_->Find(name); ++n) {
    name = absl::StrCat(tensor, ".", scope, n);
  }
  Tensor t = src_stage ? src_stage->tensor : *src;
  std::vector<std::string> axis_names;
  for (size_t d = 0; d < t->shape.size(); ++d) axis_names.push_back(absl::StrCat("ax", d));
  Type dtype = t->dtype;
  std::string tname = t->name;
  Stage cache;
  cache.name = name;
  cache.tensor = Compute(
      name, t->shape, [&](const std::vector<Expr>& v) { return TensorRead(tname, dtype, v); },
      "elementwise", axis_names);
  cache.scope = scope;
  InitLoops(cache);
  size_t first = stages_.size();
  for (size_t i = 0; i < stages_.size(); ++i) {
    Stage& s = stages_[i];
    if (std::find(consumers.begin(), consumers.end(), s.name) == consumers.end()) continue;
    s.tensor = WithBody(s.tensor, RenameReads(s.tensor->body, tensor, name));
    first = std::min(first, i);
  }
  stages_.insert(stages_.begin() + first, std::move(cache));
  Record({.kind = "cache_read",
          .stage = tensor,
          .target = absl::StrJoin(consumers, ","),
          .tag = scope});
  return name;
}

absl::Status Schedule::ComputeAt(const std::string& stage, const std::string& target,
                                 const std::string& loop) {
  auto st_or = Mutable(stage, "compute_at");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (st.is_output) return Err("compute_at", stage, "the output stage has no consumer to go into");
  const Stage* tgt = FindStage(target);
  if (!tgt || tgt->attach == AttachKind::kInline || target == stage) {
    return Err("compute_at", stage, "invalid target stage '" + target + "'");
  }
  if (!tgt->IsLeaf(loop)) return LoopErr("compute_at", target, loop, "no such leaf loop");
  // The target must not itself live inside `stage`.
  for (const Stage* t = tgt; t && t->attach == AttachKind::kAt; t = FindStage(t->attach_stage)) {
    if (t->attach_stage == stage) return Err("compute_at", stage, "attachment would form a cycle");
  }
  // Every consumer must be the target or live inside it.
  std::vector<std::string> consumers = Consumers(stage);
  if (consumers.empty()) return Err("compute_at", stage, "stage has no consumer");
  for (const std::string& c : consumers) {
    const Stage* s = FindStage(c);
    bool inside = false;
    std::string via_loop;  // the loop of `target` that the consumer lives in
    for (; s; s = s->attach == AttachKind::kAt ? FindStage(s->attach_stage) : nullptr) {
      if (s->name == target) {
        inside = true;
        break;
      }
      via_loop = s->attach == AttachKind::kAt ? s->attach_loop : "";
    }
    if (!inside) {
      return Err("compute_at", stage,
                 "consumer '" + c + "' is not computed inside target '" + target + "'");
    }
    const auto& tl = tgt->leaves;
    if (c != target &&
        std::find(tl.begin(), tl.end(), via_loop) < std::find(tl.begin(), tl.end(), loop)) {
      return LoopErr("compute_at", target, loop,
                     "consumer '" + c + "' of stage '" + stage + "' is computed at loop '" +
                         via_loop + "', outside this loop");
    }
  }
  st.attach = AttachKind::kAt;
  st.attach_stage = target;
  st.attach_loop = loop;
  Record({.kind = "compute_at", .stage = stage, .target = target, .target_loop = loop});
  return absl::OkStatus();
}

absl::Status Schedule::ComputeInline(const std::string& stage) {
  auto st_or = Mutable(stage, "compute_inline");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (st.is_output) return Err("compute_inline", stage, "cannot inline the output stage");
  if (st.tensor->is_reduction()) return Err("compute_inline", stage, "cannot inline a reduction");
  for (const Stage& s : stages_) {
    if (s.attach == AttachKind::kAt && s.attach_stage == stage) {
      return Err("compute_inline", stage, "stage '" + s.name + "' is computed at it");
    }
  }
  const Tensor def = st.tensor;
  for (Stage& s : stages_) {
    if (&s == &st || s.attach == AttachKind::kInline) continue;
    bool reads = false;
    Expr body = Rewrite(s.tensor->body, [&](const Expr& x) {
      if (x->kind != ExprKind::kTensorRead || x->name != stage) return x;
      reads = true;
      VarMap m;
      for (size_t d = 0; d < def->axes.size(); ++d) m[def->axes[d]->var.get()] = x->operands[d];
      return Substitute(def->body, m);
    });
    if (reads) s.tensor = WithBody(s.tensor, body);
  }
  st.attach = AttachKind::kInline;
  Record({.kind = "compute_inline", .stage = stage});
  return absl::OkStatus();
}

absl::Status Schedule::ComputeRoot(const std::string& stage) {
  auto st_or = Mutable(stage, "compute_root");
  if (!st_or.ok()) return st_or.status();
  (*st_or)->attach = AttachKind::kRoot;
  (*st_or)->attach_stage.clear();
  (*st_or)->attach_loop.clear();
  Record({.kind = "compute_root", .stage = stage});
  return absl::OkStatus();
}

absl::StatusOr<std::string> Schedule::RFactor(const std::string& stage, const std::string& axis,
                                              int64_t factor) {
  auto st_or = Mutable(stage, "rfactor");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (!st.tensor->is_reduction()) return Err("rfactor", stage, "stage is not a reduction");
  if (!Untransformed(st)) {
    return Err("rfactor", stage, "must be applied before the stage's loops are transformed");
  }
  const Expr& red = st.tensor->body;
  int which = -1;
  for (size_t i = 0; i < red->reduce_axes.size(); ++i) {
    if (red->reduce_axes[i]->var->name == axis) which = static_cast<int>(i);
  }
  if (which < 0) return LoopErr("rfactor", stage, axis, "no such reduce axis");
  if (factor < 1)
    return LoopErr("rfactor", stage, axis, absl::StrCat("factor ", factor, " is not positive"));
  std::string name = stage + ".rf";
  if (FindStage(name) || workload_->Find(name))
    return Err("rfactor", stage, "stage '" + name + "' exists");
  const IterVar& k = red->reduce_axes[which];
  int64_t outer = (k->extent + factor - 1) / factor;
  IterVar ki = MakeIterVar(axis + ".rf", factor);
  IterVar ko = MakeIterVar(axis + ".o", outer, /*reduce=*/true);
  Expr kval = Add(Mul(ko->var, IntImm(factor)), ki->var);
  VarMap m{{k->var.get(), kval}};
  std::vector<IterVar> raxes;
  for (size_t i = 0; i < red->reduce_axes.size(); ++i) {
    raxes.push_back(static_cast<int>(i) == which ? ko : red->reduce_axes[i]);
  }
  Expr cond = red->operands.size() > 1 ? Substitute(red->operands[1], m) : nullptr;
  if (k->extent % factor != 0) {
    Expr in = LT(kval, IntImm(k->extent));
    cond = cond ? And(cond, in) : in;
  }
  auto rf = std::make_shared<TensorNode>();
  rf->name = name;
  rf->dtype = st.tensor->dtype;
  rf->shape = {factor};
  rf->axes = {ki};
  for (const IterVar& iv : st.tensor->axes) {
    rf->shape.push_back(iv->extent);
    rf->axes.push_back(iv);
  }
  rf->body = Reduce(red->reduce_op, Substitute(red->operands[0], m), raxes, cond);
  rf->tag = "reduction";
  IterVar kr = MakeIterVar(axis + ".rf", factor, /*reduce=*/true);
  std::vector<Expr> idx = {kr->var};
  for (const IterVar& iv : st.tensor->axes) idx.push_back(iv->var);
  Stage rstage;
  rstage.name = name;
  rstage.tensor = rf;
  InitLoops(rstage);
  st.tensor = WithBody(st.tensor, Reduce(red->reduce_op, TensorRead(name, rf->dtype, idx), {kr}));
  InitLoops(st);
  size_t pos = &st - stages_.data();
  stages_.insert(stages_.begin() + pos, std::move(rstage));
  Record({.kind = "rfactor", .stage = stage, .loops = {axis}, .factors = {factor}});
  return name;
}

absl::Status Schedule::StorageScope(const std::string& stage, const std::string& scope) {
  auto st_or = Mutable(stage, "storage_scope");
  if (!st_or.ok()) return st_or.status();
  if (!ValidScope(scope)) return Err("storage_scope", stage, "unknown scope '" + scope + "'");
  if ((*st_or)->is_output && scope != "global") {
    return Err("storage_scope", stage, "the output must stay in global memory");
  }
  (*st_or)->scope = scope;
  Record({.kind = "storage_scope", .stage = stage, .tag = scope});
  return absl::OkStatus();
}

absl::Status Schedule::StorageOrder(const std::string& stage,
                                    const std::vector<std::string>& axes) {
  auto st_or = Mutable(stage, "storage_order");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (st.is_output) return Err("storage_order", stage, "the output's layout is the workload's");
  if (!Untransformed(st)) {
    return Err("storage_order", stage, "must be applied before the stage's loops are transformed");
  }
  const Tensor& t = st.tensor;
  const size_t ndim = t->axes.size();
  if (axes.size() != ndim) {
    return Err("storage_order", stage, absl::StrCat("expects ", ndim, " axes, got ", axes.size()));
  }
  std::vector<size_t> perm;  // new dimension i holds old dimension perm[i]
  for (const std::string& a : axes) {
    size_t d = 0;
    while (d < ndim && t->axes[d]->var->name != a) ++d;
    if (d == ndim) return Err("storage_order", stage, "'" + a + "' is not a spatial axis");
    if (std::find(perm.begin(), perm.end(), d) != perm.end()) {
      return Err("storage_order", stage, "axis '" + a + "' given twice");
    }
    perm.push_back(d);
  }
  auto n = std::make_shared<TensorNode>(*t);
  for (size_t i = 0; i < ndim; ++i) {
    n->axes[i] = t->axes[perm[i]];
    n->shape[i] = t->shape[perm[i]];
  }
  st.tensor = n;
  InitLoops(st);
  for (Stage& s : stages_) {
    if (&s == &st || !s.tensor->body) continue;
    s.tensor = WithBody(s.tensor, Rewrite(s.tensor->body, [&](const Expr& x) {
                          if (x->kind != ExprKind::kTensorRead || x->name != stage) return x;
                          std::vector<Expr> idx(ndim);
                          for (size_t i = 0; i < ndim; ++i) idx[i] = x->operands[perm[i]];
                          return TensorRead(stage, x->type, std::move(idx));
                        }));
  }
  Record({.kind = "storage_order", .stage = stage, .loops = axes});
  return absl::OkStatus();
}

absl::Status Schedule::Tensorize(const std::string& stage, const std::string& intrinsic,
                                 const std::vector<int64_t>& params) {
  auto st_or = Mutable(stage, "tensorize");
  if (!st_or.ok()) return st_or.status();
  Stage& st = **st_or;
  if (target() != "cuda") return Err("tensorize", stage, "only cuda schedules are tensorized");
  if (intrinsic.empty()) return Err("tensorize", stage, "no kernel template named");
  if (!st.tensor->is_reduction()) return Err("tensorize", stage, "not a reduction");
  if (!Untransformed(st) || st.attach != AttachKind::kRoot || st.scope != "global") {
    return Err("tensorize", stage, "must be applied before the stage is transformed");
  }
  st.tensorize = intrinsic;
  st.tensorize_params = params;
  Record({.kind = "tensorize", .stage = stage, .factors = params, .tag = intrinsic});
  return absl::OkStatus();
}

absl::Status ApplyInstruction(Schedule& sch, const Instruction& i) {
  auto one_loop = [&]() -> absl::Status {
    if (i.loops.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(i.kind, ": expects exactly one loop, got ", i.loops.size()));
    }
    return absl::OkStatus();
  };
  const std::string& k = i.kind;
  if (k == "split") {
    if (auto s = one_loop(); !s.ok()) return s;
    return sch.Split(i.stage, i.loops[0], i.factors).status();
  }
  if (k == "reorder") return sch.Reorder(i.stage, i.loops);
  if (k == "fuse") return sch.Fuse(i.stage, i.loops).status();
  if (k == "parallel" || k == "vectorize" || k == "unroll" || k == "bind") {
    if (auto s = one_loop(); !s.ok()) return s;
    if (k == "parallel") return sch.Parallel(i.stage, i.loops[0]);
    if (k == "vectorize") return sch.Vectorize(i.stage, i.loops[0]);
    if (k == "unroll") return sch.Unroll(i.stage, i.loops[0]);
    return sch.Bind(i.stage, i.loops[0], i.tag);
  }
  if (k == "cache_write") return sch.CacheWrite(i.stage, i.tag).status();
  if (k == "cache_read") {
    std::vector<std::string> consumers = absl::StrSplit(i.target, ',', absl::SkipEmpty());
    return sch.CacheRead(i.stage, i.tag, consumers).status();
  }
  if (k == "compute_at") return sch.ComputeAt(i.stage, i.target, i.target_loop);
  if (k == "compute_inline") return sch.ComputeInline(i.stage);
  if (k == "compute_root") return sch.ComputeRoot(i.stage);
  if (k == "rfactor") {
    if (auto s = one_loop(); !s.ok()) return s;
    if (i.factors.size() != 1) return absl::InvalidArgumentError("rfactor: expects one factor");
    return sch.RFactor(i.stage, i.loops[0], i.factors[0]).status();
  }
  if (k == "storage_scope") return sch.StorageScope(i.stage, i.tag);
  if (k == "storage_order") return sch.StorageOrder(i.stage, i.loops);
  if (k == "tensorize") return sch.Tensorize(i.stage, i.tag, i.factors);
  return absl::InvalidArgumentError("unknown schedule primitive '" + k + "'");
}

absl::StatusOr<Schedule> ApplyTrace(const Workload& workload, const Trace& trace) {
  if (!trace.workload.empty() && trace.workload != workload.canonical) {
    return absl::InvalidArgumentError("trace is for workload '" + trace.workload + "', not '" +
                                      workload.canonical + "'");
  }
  if (trace.version > kTraceVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trace version ", trace.version, " is newer than supported (", kTraceVersion, ")"));
  }
  Schedule sch(workload, trace.target);
  for (size_t n = 0; n < trace.instructions.size(); ++n) {
    absl::Status s = ApplyInstruction(sch, trace.instructions[n]);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("instruction ", n, " of the trace: ", s.message()));
    }
  }
  return sch;
}

}  // namespace lathe::ir
