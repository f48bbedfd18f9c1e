#include "codegen/cuda/cuda_codegen.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/gpu_passes.h"
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen::cuda {

namespace {

using namespace lathe::ir;  // NOLINT: code generation speaks IR throughout

// Per-thread arrays beyond this many bytes are rejected: they would spill to local memory
// far past any useful schedule.
constexpr int64_t kMaxLocalBytes = 64 * 1024;

std::string Sanitize(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  static const std::set<std::string> kReserved = {
      "int",      "float", "double", "char",   "long", "short",   "void", "auto",   "signed",
      "unsigned", "bool",  "if",     "else",   "for",  "while",   "do",   "return", "const",
      "min",      "max",   "exp",    "log",    "sqrt", "abs",     "tanh", "new",    "delete",
      "this",     "class", "struct", "switch", "case", "default", "goto", "break",  "continue"};
  if (kReserved.count(out)) out += "_";
  return out;
}

}  // namespace

std::string CudaFloatLiteral(double v) {
  if (std::isnan(v)) return "__int_as_float(0x7fc00000)";
  if (std::isinf(v)) return v > 0 ? "LATHE_INF" : "(-LATHE_INF)";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return v < 0 ? "(" + s + "f)" : s + "f";
}

std::optional<std::string> CudaOperatorText(const Expr& e,
                                            const std::function<std::string(const Expr&)>& sub) {
  auto bin = [&](const char* op) {
    return absl::StrCat("(", sub(e->operands[0]), " ", op, " ", sub(e->operands[1]), ")");
  };
  switch (e->kind) {
    case ExprKind::kAdd:
      return bin("+");
    case ExprKind::kSub:
      return bin("-");
    case ExprKind::kMul:
      return bin("*");
    case ExprKind::kEQ:
      return bin("==");
    case ExprKind::kNE:
      return bin("!=");
    case ExprKind::kLT:
      return bin("<");
    case ExprKind::kLE:
      return bin("<=");
    case ExprKind::kGT:
      return bin(">");
    case ExprKind::kGE:
      return bin(">=");
    case ExprKind::kAnd:
      return bin("&&");
    case ExprKind::kOr:
      return bin("||");
    case ExprKind::kNot:
      return absl::StrCat("(!", sub(e->operands[0]), ")");
    case ExprKind::kMin:
    case ExprKind::kMax:
      if (!e->type.is_float()) return std::nullopt;  // integer helpers name the emitter's type
      return absl::StrCat(e->kind == ExprKind::kMin ? "fminf(" : "fmaxf(", sub(e->operands[0]),
                          ", ", sub(e->operands[1]), ")");
    case ExprKind::kSelect:
      return absl::StrCat("(", sub(e->operands[0]), " ? ", sub(e->operands[1]), " : ",
                          sub(e->operands[2]), ")");
    case ExprKind::kCall: {
      static const std::map<std::string, std::string> kFns = {
          {"exp", "expf"}, {"sqrt", "sqrtf"}, {"log", "logf"}, {"tanh", "tanhf"}, {"abs", "fabsf"}};
      auto it = kFns.find(e->name);
      if (it == kFns.end()) return std::nullopt;
      std::vector<std::string> args;
      for (const Expr& a : e->operands) args.push_back(sub(a));
      return absl::StrCat(it->second, "(", absl::StrJoin(args, ", "), ")");
    }
    default:
      return std::nullopt;
  }
}

namespace {

// Loops bound to GPU indices in one kernel: extents by tag.
struct TagExtents {
  std::map<std::string, std::set<int64_t>> extents;
};

class Emitter {
 public:
  explicit Emitter(const LoweredFunc& f) : f_(f) {}
  absl::StatusOr<CudaSource> Run();

 private:
  // --- naming ---
  std::string BufName(const Buffer& b);
  std::string VarName(const Expr& v);
  std::string IdxType() const { return use64_ ? "long long" : "int"; }
  std::string TypeName(const Type& t) const {
    return t.is_float() ? "float" : t.is_int() ? IdxType() : "bool";
  }

  // --- expressions ---
  std::string E(const Expr& e);
  void Fail(absl::Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

  // --- statements ---
  void S(const Stmt& s);
  void EmitFor(const Stmt& s);
  // A 4-lane store (VectorizeGpuAccesses): a float4 store at a unit Ramp, its value a float4
  // load at a unit Ramp or four lanes; or a float4 load scattered into four scalar stores.
  void EmitVectorStore(const Stmt& s);
  // Fails unless what `item` stores into shared memory is the same for every thread.
  void CheckThreadInvariantFill(const Stmt& item, const std::string& names);
  // `buffer[index]` (index already emitted).
  std::string Access(const Buffer& b, const std::string& index) {
    return absl::StrCat(BufName(b), "[", index, "]");
  }
  void EmitAllocChain(const Stmt& s);
  void Barrier(const std::string& why);
  void Line(const std::string& text) { body_ += std::string(indent_ * 2, ' ') + text + "\n"; }

  absl::Status CollectTags(const Stmt& s, TagExtents* tags);
  absl::StatusOr<KernelLaunch> EmitKernel(const Stmt& nest, int index, std::string* code);

  const LoweredFunc& f_;
  bool use64_ = false;
  absl::Status status_;
  std::unordered_map<const BufferNode*, std::string> buf_names_;
  std::set<std::string> used_buf_names_;
  std::unordered_map<const ExprNode*, std::string> var_names_;
  std::set<std::string> used_var_names_;
  std::set<const BufferNode*> global_bufs_;  // arguments and root temporaries
  std::vector<Buffer> temps_;                // root temporaries, outermost first

  // Per kernel.
  std::string body_;
  int indent_ = 0;
  RangeMap ranges_;
  int64_t dims_[6] = {1, 1, 1, 1, 1, 1};
  std::set<std::string> active_tags_;
  std::vector<const ExprNode*> thread_vars_;  // threadIdx loop variables enclosing it
  int divergent_ = 0;  // thread-dependent guards enclosing the current statement
  std::vector<std::pair<std::string, int64_t>> shared_decls_;
  std::set<const BufferNode*> used_, written_;
  // Pipelined loops (DoubleBufferSharedTiles): a barrier ends each iteration (the tiles'
  // names), and their fills' loops of one iteration bind their variables.
  std::unordered_map<const StmtNode*, std::string> iteration_barriers_;
  std::set<const StmtNode*> bindings_;
};

std::string Emitter::BufName(const Buffer& b) {
  auto it = buf_names_.find(b.get());
  if (it != buf_names_.end()) return it->second;
  std::string base = Sanitize(b->name), n = base;
  for (int i = 1; used_buf_names_.count(n); ++i) n = absl::StrCat(base, "_", i);
  used_buf_names_.insert(n);
  buf_names_[b.get()] = n;
  return n;
}

std::string Emitter::VarName(const Expr& v) {
  auto it = var_names_.find(v.get());
  if (it != var_names_.end()) return it->second;
  std::string base = "v_" + Sanitize(v->name), n = base;
  for (int i = 1; used_var_names_.count(n); ++i) n = absl::StrCat(base, "_", i);
  used_var_names_.insert(n);
  var_names_[v.get()] = n;
  return n;
}

std::string Emitter::E(const Expr& e) {
  if (auto text = CudaOperatorText(e, [&](const Expr& x) { return E(x); })) return *text;
  auto bin = [&](const char* op) {
    return absl::StrCat("(", E(e->operands[0]), " ", op, " ", E(e->operands[1]), ")");
  };
  auto provably_nonneg = [&](const Expr& x) { return ConstBound(x, ranges_).lo >= 0; };
  switch (e->kind) {
    case ExprKind::kIntImm:
      if (e->type.is_bool()) return e->int_value ? "true" : "false";
      if (e->int_value > std::numeric_limits<int32_t>::max() ||
          e->int_value < std::numeric_limits<int32_t>::min()) {
        return absl::StrCat("((long long)", e->int_value, "LL)");
      }
      return e->int_value < 0 ? absl::StrCat("(", e->int_value, ")") : absl::StrCat(e->int_value);
    case ExprKind::kFloatImm:
      return CudaFloatLiteral(e->float_value);
    case ExprKind::kVar: {
      auto it = var_names_.find(e.get());
      if (it == var_names_.end()) {
        Fail(absl::InvalidArgumentError("cuda codegen: variable '" + e->name +
                                        "' is used outside its loop"));
        return "0";
      }
      return it->second;
    }
    case ExprKind::kDiv:
      if (e->type.is_float()) return bin("/");
      if (IsConst(e->operands[1]) && e->operands[1]->int_value > 0 &&
          provably_nonneg(e->operands[0])) {
        return bin("/");
      }
      return absl::StrCat("lathe_floordiv<", IdxType(), ">(", E(e->operands[0]), ", ",
                          E(e->operands[1]), ")");
    case ExprKind::kMod:
      if (IsConst(e->operands[1]) && e->operands[1]->int_value > 0 &&
          provably_nonneg(e->operands[0])) {
        return bin("%");
      }
      return absl::StrCat("lathe_floormod<", IdxType(), ">(", E(e->operands[0]), ", ",
                          E(e->operands[1]), ")");
    case ExprKind::kMin:  // integers (CudaOperatorText prints float ones)
    case ExprKind::kMax:
      return absl::StrCat(e->kind == ExprKind::kMin ? "lathe_min<" : "lathe_max<",
                          TypeName(e->type), ">(", E(e->operands[0]), ", ", E(e->operands[1]), ")");
    case ExprKind::kCast:
      return absl::StrCat("((", TypeName(e->type), ")(", E(e->operands[0]), "))");
    case ExprKind::kCall:  // one CudaOperatorText has no CUDA function for
      Fail(absl::UnimplementedError("cuda codegen: no CUDA function for call '" + e->name + "'"));
      return "0";
    case ExprKind::kLoad:
      if (e->operands.size() > 1 || e->type.is_vector()) {
        Fail(absl::UnimplementedError("cuda codegen: vector load of buffer '" + e->buffer->name +
                                      "'"));
        return "0";
      }
      used_.insert(e->buffer.get());
      return Access(e->buffer, E(e->operands[0]));
    case ExprKind::kTensorRead:
    case ExprKind::kReduce:
      Fail(absl::InternalError(
          absl::StrCat("cuda codegen: unlowered ", ExprKindName(e->kind), " node")));
      return "0";
    case ExprKind::kRamp:
    case ExprKind::kBroadcast:
      Fail(absl::UnimplementedError(absl::StrCat("cuda codegen: vector ", ExprKindName(e->kind),
                                                 " is not supported (loops stay scalar)")));
      return "0";
    default:  // CudaOperatorText's kinds, printed above
      break;
  }
  return "0";
}

void Emitter::Barrier(const std::string& why) {
  // Thread loops are not loops on a GPU: a barrier inside one is reached by every thread,
  // unless a guard (a thread loop shorter than the block, a condition) leaves some out.
  if (divergent_ > 0) {
    Fail(absl::InvalidArgumentError("cuda codegen: shared buffer '" + why +
                                    "' is filled under thread-dependent control flow, where "
                                    "__syncthreads() is not allowed"));
  }
  Line("__syncthreads();");
}

void Emitter::EmitFor(const Stmt& s) {
  std::string v = VarName(s->var);
  int64_t ext = -1, mn = -1;
  bool const_ext = AsConstInt(s->extent, &ext);
  bool const_min = AsConstInt(s->min, &mn);
  if (const_ext && const_min) ranges_[s->var.get()] = {mn, mn + std::max<int64_t>(ext, 1) - 1};
  int tag = s->for_kind == ForKind::kThreadBinding ? GpuTagIndex(s->thread_tag) : -1;
  if (tag >= 0) {
    if (!const_ext) {
      Fail(absl::InvalidArgumentError("cuda codegen: loop '" + s->var->name + "' bound to " +
                                      s->thread_tag + " has a non-constant extent"));
      return;
    }
    // A threadIdx loop inside another of the same tag (a shared stage filled cooperatively
    // where the threads compute) is the same thread index: threads are not loops.
    const bool nested = active_tags_.count(s->thread_tag) > 0;
    if (nested && tag < 3) {
      Fail(absl::InvalidArgumentError("cuda codegen: loop '" + s->var->name + "' is bound to " +
                                      s->thread_tag + " inside another loop bound to it"));
      return;
    }
    active_tags_.insert(s->thread_tag);
    bool guard = ext < dims_[tag];
    Line("{");
    ++indent_;
    std::string init = absl::StrCat("(", IdxType(), ")", s->thread_tag);
    if (!(const_min && mn == 0)) init = absl::StrCat(E(s->min), " + ", init);
    Line(absl::StrCat("const ", IdxType(), " ", v, " = ", init, ";"));
    if (guard) {
      Line(absl::StrCat("if (", v, " < ", E(s->min), " + ", ext, ") {"));
      ++indent_;
      ++divergent_;
    }
    bool thread = tag >= 3;
    if (thread) thread_vars_.push_back(s->var.get());
    S(s->body);
    if (thread) thread_vars_.pop_back();
    if (guard) {
      --divergent_;
      --indent_;
      Line("}");
    }
    --indent_;
    Line("}");
    if (!nested) active_tags_.erase(s->thread_tag);
    return;
  }
  if (bindings_.count(s.get())) {
    // A pipelined loop's fill: one iteration, printed as a binding of its variable.
    if (!const_min) ranges_[s->var.get()] = ConstBound(s->min, ranges_);
    Line("{");
    ++indent_;
    Line(absl::StrCat("const ", IdxType(), " ", v, " = ", E(s->min), ";"));
    S(s->body);
    --indent_;
    Line("}");
    return;
  }
  // vthread loops are left to the compiler: unrolled they copy everything inside them (a
  // whole reduction, its tiles and barriers) once per virtual thread.
  bool unroll = s->for_kind == ForKind::kUnrolled || s->for_kind == ForKind::kVectorized;
  if (unroll) Line(const_ext && ext <= 64 ? "#pragma unroll" : "#pragma unroll 8");
  Line(absl::StrCat("for (", IdxType(), " ", v, " = ", E(s->min), "; ", v, " < ", E(s->min), " + ",
                    E(s->extent), "; ++", v, ") {"));
  ++indent_;
  S(s->body);
  if (auto it = iteration_barriers_.find(s.get()); it != iteration_barriers_.end()) {
    Barrier(it->second);
  }
  --indent_;
  Line("}");
}

// Only 4-lane accesses that VectorizeGpuAccesses proved aligned are unit Ramps.
void Emitter::EmitVectorStore(const Stmt& st) {
  const Expr& index = st->index;
  const Expr& value = st->value;
  auto unit_ramp = [](const Expr& e) {
    return e->kind == ExprKind::kRamp && e->type.lanes == 4 && IsConstInt(e->operands[1], 1);
  };
  auto lane = [&](const Expr& e, int i) {
    // A lane-invariant term of a sum (the half of a doubled tile) stays apart from the lane's
    // index, which is simplified alone.
    if (e->kind == ExprKind::kAdd && e->operands[0]->kind == ExprKind::kBroadcast) {
      return Add(e->operands[0]->operands[0], Simplify(VectorLane(e->operands[1], i), ranges_));
    }
    return Simplify(VectorLane(e, i), ranges_);
  };
  std::string load;
  if (value->kind == ExprKind::kLoad && value->operands.size() == 1 &&
      unit_ramp(value->operands[0])) {
    load = absl::StrCat("*reinterpret_cast<const float4*>(&",
                        Access(value->buffer, E(value->operands[0]->operands[0])), ")");
  }
  if (st->predicate || index->type.lanes != 4 || value->type.lanes != 4 ||
      !value->type.is_float() || (!unit_ramp(index) && load.empty())) {
    Fail(absl::UnimplementedError("cuda codegen: vector store to buffer '" + st->buffer->name +
                                  "'"));
    return;
  }
  used_.insert(st->buffer.get());
  written_.insert(st->buffer.get());
  if (!load.empty()) used_.insert(value->buffer.get());
  if (unit_ramp(index)) {
    std::string rhs = load;
    if (load.empty()) {
      std::vector<std::string> lanes;
      for (int i = 0; i < 4; ++i) lanes.push_back(E(lane(value, i)));
      rhs = absl::StrCat("make_float4(", absl::StrJoin(lanes, ", "), ")");
    }
    Line(absl::StrCat("*reinterpret_cast<float4*>(&", Access(st->buffer, E(index->operands[0])),
                      ") = ", rhs, ";"));
    return;
  }
  // A vector load scattered into scalar stores (a tile stored transposed).
  Line("{");
  ++indent_;
  Line(absl::StrCat("const float4 lathe_f4 = ", load, ";"));
  static const char* const kLanes[4] = {"x", "y", "z", "w"};
  for (int i = 0; i < 4; ++i) {
    Line(absl::StrCat(Access(st->buffer, E(lane(index, i))), " = lathe_f4.", kLanes[i], ";"));
  }
  --indent_;
  Line("}");
}

// Inside a thread loop every thread runs the fill: what it fills must not depend on which
// thread it is (the lowering infers a shared stage's region over the block's threads), or
// threads would overwrite each other's regions.
void Emitter::CheckThreadInvariantFill(const Stmt& item, const std::string& names) {
  std::string used;
  VisitStmt(
      item,
      [&](const Expr& root) {
        Visit(root, [&](const Expr& e) {
          if (e->kind == ExprKind::kVar && used.empty() &&
              std::find(thread_vars_.begin(), thread_vars_.end(), e.get()) != thread_vars_.end()) {
            used = e->name;
          }
        });
      },
      [](const Stmt&) {});
  if (!used.empty()) {
    Fail(absl::InvalidArgumentError("cuda codegen: shared buffer '" + names +
                                    "' is filled with a region that depends on thread variable '" +
                                    used + "', so each thread would fill a different one"));
  }
}

namespace {

// True if `s` stores into one of `buffers`.
bool StoresInto(const Stmt& s, const std::set<const BufferNode*>& buffers) {
  bool writes = false;
  VisitStmt(
      s, [](const Expr&) {},
      [&](const Stmt& x) {
        if (x->kind == StmtKind::kStore && buffers.count(x->buffer.get())) writes = true;
      });
  return writes;
}

// The loop of a pipeline over shared tiles (DoubleBufferSharedTiles) when `body`, under the
// tiles' allocations, is one: fills of the tiles, then a serial loop whose body starts with a
// guarded fill (the next iteration's) before its reads. Null otherwise.
Stmt PipelinedLoop(const Stmt& body, const std::set<const BufferNode*>& tiles) {
  if (body->kind != StmtKind::kSeq || body->seq.size() < 2) return nullptr;
  const Stmt& loop = body->seq.back();
  if (loop->kind != StmtKind::kFor || loop->for_kind != ForKind::kSerial ||
      loop->body->kind != StmtKind::kSeq) {
    return nullptr;
  }
  const Stmt& ahead = loop->body->seq.front();
  if (ahead->kind != StmtKind::kIfThenElse || ahead->else_body || !StoresInto(ahead, tiles)) {
    return nullptr;
  }
  for (size_t i = 0; i + 1 < body->seq.size(); ++i) {
    if (!StoresInto(body->seq[i], tiles)) return nullptr;
  }
  return loop;
}

}  // namespace

// Allocations nest; the statement under a chain of them is usually a sequence of producer
// nests followed by the consumer. Shared buffers of the chain are fenced: a barrier before the
// producers (the previous iteration of an enclosing loop may still read them) and after the
// last one.
void Emitter::EmitAllocChain(const Stmt& s) {
  Stmt cur = s;
  std::set<const BufferNode*> shared;
  int opened = 0;
  std::string names;
  while (cur && cur->kind == StmtKind::kAllocate) {
    const Buffer& b = cur->buffer;
    std::string n = BufName(b);
    int64_t bytes = b->size() * b->dtype.bytes();
    if (b->scope == "shared") {
      shared_decls_.push_back({n, b->size()});
      shared.insert(b.get());
      names += (names.empty() ? "" : ", ") + b->name;
    } else {
      if (bytes > kMaxLocalBytes) {
        Fail(absl::InvalidArgumentError(absl::StrCat(
            "cuda codegen: per-thread buffer '", b->name, "' of ", b->size(),
            " elements is too large (at most ", kMaxLocalBytes, " bytes per thread)")));
        return;
      }
      Line("{");
      ++indent_;
      ++opened;
      Line(absl::StrCat(TypeName(b->dtype.Element()), " __align__(16) ", n, "[", b->size(), "];"));
    }
    cur = cur->body;
  }
  if (shared.empty() || !cur) {
    S(cur);
  } else if (const Stmt loop = PipelinedLoop(cur, shared)) {
    // The first fill, a barrier, then the loop: each iteration fills the other half ahead
    // and reads this one, and a barrier ends it (the half read is refilled next).
    const std::vector<Stmt>& items = cur->seq;
    auto bind = [&](const Stmt& x) {
      if (x->kind == StmtKind::kFor && x->for_kind == ForKind::kSerial &&
          IsConstInt(x->extent, 1)) {
        bindings_.insert(x.get());
      }
    };
    for (size_t i = 0; i + 1 < items.size(); ++i) {
      CheckThreadInvariantFill(items[i], names);
      if (!status_.ok()) return;
      bind(items[i]);
    }
    bind(loop->body->seq.front()->body);
    for (size_t i = 0; i + 1 < items.size(); ++i) S(items[i]);
    Barrier(names);
    iteration_barriers_[loop.get()] = names;
    S(loop);
  } else {
    std::vector<Stmt> items = cur->kind == StmtKind::kSeq ? cur->seq : std::vector<Stmt>{cur};
    int last = -1;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!StoresInto(items[i], shared)) continue;
      last = static_cast<int>(i);
      CheckThreadInvariantFill(items[i], names);
      if (!status_.ok()) return;
    }
    Barrier(names);
    for (size_t i = 0; i < items.size(); ++i) {
      S(items[i]);
      if (static_cast<int>(i) == last) Barrier(names);
    }
  }
  for (; opened > 0; --opened) {
    --indent_;
    Line("}");
  }
}

void Emitter::S(const Stmt& s) {
  if (!s || !status_.ok()) return;
  switch (s->kind) {
    case StmtKind::kFor:
      EmitFor(s);
      return;
    case StmtKind::kStore:
      if (s->index->type.is_vector()) {
        EmitVectorStore(s);
        return;
      }
      if (s->predicate || s->value->type.is_vector()) {
        Fail(absl::UnimplementedError("cuda codegen: vector store to buffer '" + s->buffer->name +
                                      "'"));
        return;
      }
      used_.insert(s->buffer.get());
      written_.insert(s->buffer.get());
      Line(absl::StrCat(Access(s->buffer, E(s->index)), " = ", E(s->value), ";"));
      return;
    case StmtKind::kIfThenElse:
      Line(absl::StrCat("if (", E(s->cond), ") {"));
      ++indent_;
      ++divergent_;
      S(s->body);
      if (s->else_body) {
        --indent_;
        Line("} else {");
        ++indent_;
        S(s->else_body);
      }
      --divergent_;
      --indent_;
      Line("}");
      return;
    case StmtKind::kSeq:
      for (const Stmt& x : s->seq) S(x);
      return;
    case StmtKind::kAllocate:
      EmitAllocChain(s);
      return;
  }
}

absl::Status Emitter::CollectTags(const Stmt& s, TagExtents* tags) {
  absl::Status st;
  VisitStmt(
      s, [](const Expr&) {},
      [&](const Stmt& x) {
        if (x->kind != StmtKind::kFor || x->for_kind != ForKind::kThreadBinding) return;
        if (GpuTagIndex(x->thread_tag) < 0) return;  // vthread
        int64_t ext;
        if (!AsConstInt(x->extent, &ext)) {
          if (st.ok()) {
            st = absl::InvalidArgumentError("cuda codegen: loop '" + x->var->name + "' bound to " +
                                            x->thread_tag + " has a non-constant extent");
          }
          return;
        }
        tags->extents[x->thread_tag].insert(ext);
      });
  return st;
}

absl::StatusOr<KernelLaunch> Emitter::EmitKernel(const Stmt& nest, int index, std::string* code) {
  KernelLaunch k;
  k.name = absl::StrCat(f_.name, "_k", index);
  TagExtents tags;
  if (auto st = CollectTags(nest, &tags); !st.ok()) return st;
  if (tags.extents.empty()) {
    std::string what;
    VisitStmt(
        nest, [](const Expr&) {},
        [&](const Stmt& x) {
          if (x->kind == StmtKind::kStore && what.empty()) what = x->buffer->name;
        });
    return absl::InvalidArgumentError(
        "cuda codegen: the loop nest computing '" + what +
        "' is not bound to GPU blocks or threads (bind its loops to blockIdx/threadIdx)");
  }
  for (int i = 0; i < 6; ++i) dims_[i] = 1;
  for (const auto& [tag, exts] : tags.extents) {
    int t = GpuTagIndex(tag);
    if (t < 3 && exts.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("cuda codegen: loops bound to ", tag, " in kernel '", k.name,
                       "' have different extents (", absl::StrJoin(exts, ", "), ")"));
    }
    dims_[t] = std::max<int64_t>(*exts.rbegin(), 1);
  }
  for (int i = 0; i < 3; ++i) {
    k.grid[i] = dims_[i];
    k.block[i] = dims_[3 + i];
  }
  body_.clear();
  indent_ = 1;
  ranges_.clear();
  active_tags_.clear();
  thread_vars_.clear();
  divergent_ = 0;
  shared_decls_.clear();
  used_.clear();
  written_.clear();
  iteration_barriers_.clear();
  bindings_.clear();
  S(nest);
  if (!status_.ok()) return status_;

  std::vector<std::string> params;
  auto add_arg = [&](const Buffer& b) {
    if (!used_.count(b.get())) return;
    k.args.push_back(b->name);
    params.push_back(
        absl::StrCat(written_.count(b.get()) ? "" : "const ", "float* __restrict__ ", BufName(b)));
  };
  for (const Buffer& b : f_.args) add_arg(b);
  for (const Buffer& b : temps_) add_arg(b);
  // At least two blocks per SM for blocks of up to 256 threads: ptxas then keeps a register
  // tile within 65536 / (2 x threads) registers (128 for 256 threads), so one block waiting
  // at a barrier leaves another to run.
  const int64_t threads = k.threads_per_block();
  std::string bounds = threads <= 256 ? absl::StrCat(threads, ", 2") : absl::StrCat(threads);
  std::string out = absl::StrCat("extern \"C\" __global__ void __launch_bounds__(", bounds, ") ",
                                 k.name, "(", absl::StrJoin(params, ", "), ") {\n");
  for (const auto& [n, size] : shared_decls_) {
    absl::StrAppend(&out, "  __shared__ __align__(16) float ", n, "[", size, "];\n");
    k.shared_bytes += size * 4;
  }
  absl::StrAppend(&out, body_, "}\n\n");
  *code += out;
  return k;
}

absl::StatusOr<CudaSource> Emitter::Run() {
  CudaSource src;
  src.plan.name = f_.name;
  for (const Buffer& b : f_.args) {
    src.plan.args.push_back(b->name);
    global_bufs_.insert(b.get());
    BufName(b);
    if (b->size() > std::numeric_limits<int32_t>::max()) use64_ = true;
  }
  Stmt cur = f_.body;
  while (cur && cur->kind == StmtKind::kAllocate) {
    const Buffer& b = cur->buffer;
    if (b->scope != "global") {
      return absl::InvalidArgumentError(
          "cuda codegen: stage '" + b->name + "' is computed at root in " + b->scope +
          " memory; only global buffers live across kernels (compute it at a loop of its "
          "consumer or keep it global)");
    }
    temps_.push_back(b);
    global_bufs_.insert(b.get());
    BufName(b);
    if (b->size() > std::numeric_limits<int32_t>::max()) use64_ = true;
    src.plan.temporaries.push_back({b->name, b->size() * b->dtype.bytes()});
    cur = cur->body;
  }
  std::vector<Stmt> items;
  if (cur) items = cur->kind == StmtKind::kSeq ? cur->seq : std::vector<Stmt>{cur};
  for (size_t i = 0; i < items.size(); ++i) {
    auto k = EmitKernel(items[i], static_cast<int>(i), &src.kernels);
    if (!k.ok()) return k.status();
    src.plan.kernels.push_back(std::move(*k));
  }
  src.prelude = CudaPrelude();
  src.source = src.prelude + src.kernels;
  return src;
}

}  // namespace

const std::string& CudaPrelude() {
  static const std::string* kPrelude = new std::string(R"(// generated by lathe
#define LATHE_INF __int_as_float(0x7f800000)
template <typename T>
__device__ __forceinline__ T lathe_floordiv(T a, T b) {
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T>
__device__ __forceinline__ T lathe_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T>
__device__ __forceinline__ T lathe_min(T a, T b) { return a < b ? a : b; }
template <typename T>
__device__ __forceinline__ T lathe_max(T a, T b) { return a > b ? a : b; }

)");
  return *kPrelude;
}

std::string ToText(const LaunchPlan& plan) {
  std::string out = absl::StrCat("plan ", plan.name, "(", absl::StrJoin(plan.args, ", "), ")\n");
  for (const TempBuffer& t : plan.temporaries) {
    absl::StrAppend(&out, "  temp ", t.name, ": ", t.bytes, " bytes\n");
  }
  for (const KernelLaunch& k : plan.kernels) {
    absl::StrAppend(&out, "  kernel ", k.name, " grid(", k.grid[0], ", ", k.grid[1], ", ",
                    k.grid[2], ") block(", k.block[0], ", ", k.block[1], ", ", k.block[2],
                    ") shared ", k.shared_bytes,
                    k.dynamic_shared_bytes ? absl::StrCat(" dynamic ", k.dynamic_shared_bytes) : "",
                    " args(", absl::StrJoin(k.args, ", "), ")\n");
  }
  return out;
}

absl::StatusOr<CudaSource> GenerateCuda(const LoweredFunc& f) {
  Emitter e(f);
  return e.Run();
}

}  // namespace lathe::codegen::cuda
