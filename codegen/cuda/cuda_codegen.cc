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
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen::cuda {

namespace {

using namespace lathe::ir;  // NOLINT: code generation speaks IR throughout

// Per-thread arrays beyond this many bytes are rejected: they would spill to local memory
// far past any useful schedule.
constexpr int64_t kMaxLocalBytes = 64 * 1024;

const char* const kTags[6] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                              "threadIdx.x", "threadIdx.y", "threadIdx.z"};

int TagIndex(const std::string& tag) {
  for (int i = 0; i < 6; ++i) {
    if (tag == kTags[i]) return i;
  }
  return -1;
}

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
  // A vectorized loop of 4 lanes as one float4 access where alignment is provable; false
  // (nothing emitted) when it is not.
  bool EmitVector4(const Stmt& s);
  // A serial loop whose body fills shared tiles and then reads them, emitted with the tiles
  // doubled: the next iteration's fill overlaps this one's reads, one barrier per iteration.
  // False (nothing emitted) when the loop is not of that form or the doubled tiles do not fit.
  bool EmitDoubleBuffered(const Stmt& s);
  // Fails unless what `item` stores into shared memory is the same for every thread.
  void CheckThreadInvariantFill(const Stmt& item, const std::string& names);
  // `buffer[index]` (index already emitted), offset into the current half of a doubled tile.
  std::string Access(const Buffer& b, const std::string& index) {
    auto it = buf_offsets_.find(b.get());
    if (it == buf_offsets_.end()) return absl::StrCat(BufName(b), "[", index, "]");
    return absl::StrCat(BufName(b), "[", it->second, " + ", index, "]");
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
  // Doubled tiles: the offset of the half in use, as C; the kernel's shared bytes before
  // doubling, and those doubling has added.
  std::unordered_map<const BufferNode*, std::string> buf_offsets_;
  int64_t kernel_shared_bytes_ = 0, doubled_bytes_ = 0;
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
  int tag = s->for_kind == ForKind::kThreadBinding ? TagIndex(s->thread_tag) : -1;
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
  if (s->for_kind == ForKind::kVectorized && const_ext && ext == 4 && const_min && mn == 0 &&
      EmitVector4(s)) {
    return;
  }
  if (EmitDoubleBuffered(s)) return;
  // vthread loops are left to the compiler: unrolled they copy everything inside them (a
  // whole reduction, its tiles and barriers) once per virtual thread.
  bool unroll = s->for_kind == ForKind::kUnrolled || s->for_kind == ForKind::kVectorized;
  if (unroll) Line(const_ext && ext <= 64 ? "#pragma unroll" : "#pragma unroll 8");
  Line(absl::StrCat("for (", IdxType(), " ", v, " = ", E(s->min), "; ", v, " < ", E(s->min), " + ",
                    E(s->extent), "; ++", v, ") {"));
  ++indent_;
  S(s->body);
  --indent_;
  Line("}");
}

namespace {

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

}  // namespace

// Only the accesses proven to start at a multiple of 4 elements become float4 (buffers
// themselves are 16-byte aligned: arguments by the allocator, shared and local arrays by
// their declarations); each lane's value is otherwise computed as the scalar loop would.
bool Emitter::EmitVector4(const Stmt& s) {
  const Stmt& st = s->body;
  if (!st || st->kind != StmtKind::kStore || st->predicate || st->value->type.is_vector()) {
    return false;
  }
  const Expr& v = s->var;
  auto aligned = [&](const Expr& index) -> Expr {
    Expr base = UnitStrideBase(index, v, 4, ranges_);
    if (!base) return nullptr;
    int64_t d = KnownDivisor(base);
    return d == 0 || d % 4 == 0 ? base : nullptr;
  };
  auto lane = [&](const Expr& e, int i) {
    return Simplify(Substitute(e, {{v.get(), IntImm(i)}}), ranges_);
  };
  Expr dst = aligned(st->index);
  const Expr& value = st->value;
  Expr src = value->kind == ExprKind::kLoad && value->operands.size() == 1 && value->type.is_float()
                 ? aligned(value->operands[0])
                 : nullptr;
  if (!dst && !src) return false;
  used_.insert(st->buffer.get());
  written_.insert(st->buffer.get());
  std::string load;
  if (src) {
    used_.insert(value->buffer.get());
    load = absl::StrCat("*reinterpret_cast<const float4*>(&", Access(value->buffer, E(src)), ")");
  }
  if (dst) {
    std::string rhs = load;
    if (!src) {
      std::vector<std::string> lanes;
      for (int i = 0; i < 4; ++i) lanes.push_back(E(lane(value, i)));
      rhs = absl::StrCat("make_float4(", absl::StrJoin(lanes, ", "), ")");
    }
    Line(
        absl::StrCat("*reinterpret_cast<float4*>(&", Access(st->buffer, E(dst)), ") = ", rhs, ";"));
    return true;
  }
  // A vector load scattered into scalar stores (a tile stored transposed).
  std::string t = VarName(v) + "_v4";
  Line("{");
  ++indent_;
  Line(absl::StrCat("const float4 ", t, " = ", load, ";"));
  static const char* const kLanes[4] = {"x", "y", "z", "w"};
  for (int i = 0; i < 4; ++i) {
    Line(absl::StrCat(Access(st->buffer, E(lane(st->index, i))), " = ", t, ".", kLanes[i], ";"));
  }
  --indent_;
  Line("}");
  return true;
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

bool Emitter::EmitDoubleBuffered(const Stmt& s) {
  int64_t ext = 0, mn = 0;
  if (s->for_kind != ForKind::kSerial || !AsConstInt(s->extent, &ext) || ext < 2 ||
      !AsConstInt(s->min, &mn) || mn != 0 || divergent_ > 0) {
    return false;
  }
  // The loop's body: shared tiles (only), filled by a prefix of the statements under them
  // that stores nothing else, read by the rest, which store none of them.
  std::vector<Buffer> tiles;
  std::set<const BufferNode*> shared;
  Stmt cur = s->body;
  for (; cur && cur->kind == StmtKind::kAllocate; cur = cur->body) {
    if (cur->buffer->scope != "shared") return false;
    tiles.push_back(cur->buffer);
    shared.insert(cur->buffer.get());
  }
  if (tiles.empty() || !cur) return false;
  std::vector<Stmt> items = cur->kind == StmtKind::kSeq ? cur->seq : std::vector<Stmt>{cur};
  size_t fills = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    bool into_tiles = false, elsewhere = false, allocates = false;
    VisitStmt(
        items[i], [](const Expr&) {},
        [&](const Stmt& x) {
          if (x->kind == StmtKind::kStore)
            (shared.count(x->buffer.get()) ? into_tiles : elsewhere) = true;
          if (x->kind == StmtKind::kAllocate && x->buffer->scope == "shared") allocates = true;
        });
    if (allocates) return false;
    if (into_tiles && (elsewhere || i != fills)) return false;
    if (into_tiles) ++fills;
  }
  if (fills == 0 || fills == items.size()) return false;
  int64_t bytes = 0;
  std::string names;
  for (const Buffer& b : tiles) {
    bytes += b->size() * b->dtype.bytes();
    names += (names.empty() ? "" : ", ") + b->name;
  }
  // Where it fits: the doubled tiles within 32 KiB (two blocks per SM everywhere) and the
  // kernel's static shared memory within 48 KiB.
  if (2 * bytes > 32 * 1024 || kernel_shared_bytes_ + doubled_bytes_ + bytes > 48 * 1024) {
    return false;
  }
  for (size_t i = 0; i < fills; ++i) {
    CheckThreadInvariantFill(items[i], names);
    if (!status_.ok()) return true;
  }
  // Halves a multiple of 4 elements apart: float4 accesses stay 16-byte aligned in both.
  auto half = [](const Buffer& b) { return (b->size() + 3) / 4 * 4; };
  doubled_bytes_ += bytes;
  for (const Buffer& b : tiles) shared_decls_.push_back({BufName(b), half(b) + b->size()});
  const std::string v = VarName(s->var), it = IdxType();
  auto emit_fills = [&](const std::string& which) {
    for (const Buffer& b : tiles) {
      buf_offsets_[b.get()] = absl::StrCat("(", which, ") * ", half(b));
    }
    for (size_t i = 0; i < fills; ++i) S(items[i]);
  };
  // The first tiles, into the first half.
  Line("{");
  ++indent_;
  Line(absl::StrCat("const ", it, " ", v, " = 0;"));
  emit_fills("0");
  --indent_;
  Line("}");
  Barrier(names);
  Line(absl::StrCat("for (", it, " ", v, " = 0; ", v, " < ", ext, "; ++", v, ") {"));
  ++indent_;
  // The next iteration's tiles into the other half, while this one's are read.
  const std::string next = v + "_next";
  Line(absl::StrCat("if (", v, " + 1 < ", ext, ") {"));
  ++indent_;
  Line(absl::StrCat("const ", it, " ", next, " = ", v, " + 1;"));
  var_names_[s->var.get()] = next;
  emit_fills(next + " & 1");
  var_names_[s->var.get()] = v;
  --indent_;
  Line("}");
  for (const Buffer& b : tiles) buf_offsets_[b.get()] = absl::StrCat("(", v, " & 1) * ", half(b));
  for (size_t i = fills; i < items.size(); ++i) S(items[i]);
  for (const Buffer& b : tiles) buf_offsets_.erase(b.get());
  Barrier(names);
  --indent_;
  Line("}");
  return true;
}

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
  } else {
    std::vector<Stmt> items = cur->kind == StmtKind::kSeq ? cur->seq : std::vector<Stmt>{cur};
    int last = -1;
    for (size_t i = 0; i < items.size(); ++i) {
      bool writes = false;
      VisitStmt(
          items[i], [](const Expr&) {},
          [&](const Stmt& x) {
            if (x->kind == StmtKind::kStore && shared.count(x->buffer.get())) writes = true;
          });
      if (!writes) continue;
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
        if (TagIndex(x->thread_tag) < 0) return;  // vthread
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
    int t = TagIndex(tag);
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
  buf_offsets_.clear();
  kernel_shared_bytes_ = doubled_bytes_ = 0;
  VisitStmt(
      nest, [](const Expr&) {},
      [&](const Stmt& x) {
        if (x->kind == StmtKind::kAllocate && x->buffer->scope == "shared") {
          kernel_shared_bytes_ += x->buffer->size() * x->buffer->dtype.bytes();
        }
      });
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
