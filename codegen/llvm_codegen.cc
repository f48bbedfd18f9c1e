#include "codegen/llvm_codegen.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "codegen/host.h"
#include "codegen/llvm_target.h"
#include "codegen/transpose_copy.h"
#include "ir/arith.h"
#include "ir/functor.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT

// LLVM 14's x86 backend loads masked-off lanes of masked loads whose width splits into a
// partial native vector (9 lanes on AVX2). Powers of two and whole native vectors are safe;
// other masked accesses take the gather/scatter path, which it scalarizes correctly.
bool SafeMaskedWidth(int lanes) {
  int native = std::max(4, codegen::HostCpu().vector_bits / 32);
  return llvm::isPowerOf2_32(static_cast<uint32_t>(lanes)) || lanes % native == 0;
}

// The scalar index of lane `lane` of the integer vector `e` built from ramps, broadcasts and
// arithmetic; null for anything else (a vector load, a select).
Expr LaneOf(const Expr& e, int64_t lane) {
  if (e->type.lanes == 1) return e;
  switch (e->kind) {
    case ExprKind::kRamp:
      return Add(e->operands[0], Mul(e->operands[1], IntImm(lane)));
    case ExprKind::kBroadcast:
      return e->operands[0];
    default:
      break;
  }
  if (!IsBinary(e->kind) || IsCompare(e->kind) || e->kind == ExprKind::kAnd ||
      e->kind == ExprKind::kOr) {
    return nullptr;
  }
  Expr a = LaneOf(e->operands[0], lane);
  Expr b = a ? LaneOf(e->operands[1], lane) : nullptr;
  return b ? MakeBinary(e->kind, a, b) : nullptr;
}

// A vector index that is not one ramp but whose lanes are runs of consecutive elements: a
// vector over two fused loops, such as CpuSpace's paired channel blocks of a blocked
// convolution, whose weights are one 8-channel block after another. The scalar index of each
// run's first lane (runs of the longest width from 4 up that fits), or empty: the access then
// takes the gather/scatter path. Run widths are powers of two, so their masks are safe.
std::vector<Expr> ContiguousRuns(const Expr& index, int lanes) {
  if (!index->type.is_int() || index->kind == ExprKind::kRamp ||
      index->kind == ExprKind::kBroadcast || lanes < 8 || (lanes & (lanes - 1)) != 0) {
    return {};
  }
  Expr first = LaneOf(index, 0);
  if (!first) return {};
  std::vector<Expr> lane(static_cast<size_t>(lanes));
  lane[0] = Simplify(first);
  // Offsets from lane 0; a lane whose offset is no constant ends every candidate run at it.
  std::vector<int64_t> off(static_cast<size_t>(lanes), 0);
  std::vector<bool> known(static_cast<size_t>(lanes), false);
  known[0] = true;
  for (int i = 1; i < lanes; ++i) {
    lane[i] = Simplify(LaneOf(index, i));
    known[i] = AsConstInt(Simplify(Sub(lane[i], lane[0])), &off[i]);
  }
  for (int run = lanes / 2; run >= 4; run /= 2) {
    bool ok = true;
    for (int i = 0; i < lanes && ok; ++i) {
      if (i % run == 0) continue;
      // Within a run, each lane is its predecessor's next element.
      ok = known[i] && known[i - 1] ? off[i] == off[i - 1] + 1
                                    : IsConstInt(Simplify(Sub(lane[i], lane[i - 1])), 1);
    }
    if (!ok) continue;
    std::vector<Expr> starts;
    for (int i = 0; i < lanes; i += run) starts.push_back(lane[i]);
    return starts;
  }
  return {};
}

// Allocations up to this size live on the stack of the function that runs them.
constexpr int64_t kMaxStackBytes = 512 * 1024;

class CodeGen {
 public:
  CodeGen(llvm::LLVMContext& ctx, llvm::Module& mod, const llvm::TargetMachine& tm)
      : ctx_(ctx), mod_(mod), tm_(tm), b_(ctx) {
    llvm::FastMathFlags fmf;
    fmf.setAllowContract(true);  // lets a*b+c become an FMA
    b_.setFastMathFlags(fmf);
    i64_ = b_.getInt64Ty();
    i32_ = b_.getInt32Ty();
    i8p_ = b_.getInt8PtrTy();
  }

  absl::Status AddFunction(const LoweredFunc& f);

 private:
  struct Scope {
    std::vector<const ExprNode*> vars;
    std::vector<const BufferNode*> bufs;
  };

  llvm::Type* ElemType(const Type& t) {
    switch (t.kind) {
      case ScalarKind::kFloat32:
        return b_.getFloatTy();
      case ScalarKind::kInt64:
        return i64_;
      case ScalarKind::kBool:
        return b_.getInt1Ty();
    }
    return nullptr;
  }
  llvm::Type* LType(const Type& t) {
    llvm::Type* e = ElemType(t);
    return t.lanes > 1 ? llvm::FixedVectorType::get(e, t.lanes) : e;
  }

  // Creates `name(i64 vars..., T* noalias bufs...) -> i32` whose body is `body`, with the
  // given variables and buffers in scope.
  absl::StatusOr<llvm::Function*> EmitBodyFunction(const std::string& name, const Stmt& body,
                                                   const Scope& scope);
  absl::Status Emit(const Stmt& s);
  absl::Status EmitFor(const Stmt& s);
  absl::Status EmitParallel(const Stmt& s);
  absl::Status EmitAllocate(const Stmt& s);
  // Row loads and an in-register transposition for a copy of gathers (transpose_copy.h).
  void EmitTransposedCopy(const TransposedCopy& tc);
  llvm::Value* Emit(const Expr& e);
  llvm::Value* EmitBinary(const Expr& e);
  // Whether a truncated remainder `rem` of a division by `divisor` needs the floor fix-up.
  llvm::Value* FloorAdjust(llvm::Value* rem, llvm::Value* divisor);
  llvm::Value* EmitLoad(const Expr& e);
  llvm::Value* EmitSelect(const Expr& e);
  llvm::Value* EmitCall(const Expr& e);
  // exp and tanh of float scalars and vectors, inline (ExpF32): LLVM 14 without a vector
  // math library turns llvm.exp of a vector into one expf call per lane.
  llvm::Value* ExpF32(llvm::Value* x);
  llvm::Value* TanhF32(llvm::Value* x);
  llvm::Value* Address(const Buffer& buf, llvm::Value* index);
  // When `index` is Ramp(base, 1, n): the address of the first lane, else null.
  llvm::Value* ContiguousAddress(const Buffer& buf, const Expr& index);
  llvm::Value* Mask(const Expr& pred, int lanes);
  // Lanes [first, first + n) of vector `v`.
  llvm::Value* Slice(llvm::Value* v, int first, int n);
  llvm::Value* ReturnIfNonZero(llvm::Value* code);
  llvm::AllocaInst* EntryAlloca(llvm::Type* t, llvm::Value* count, uint64_t align);

  llvm::LLVMContext& ctx_;
  llvm::Module& mod_;
  const llvm::TargetMachine& tm_;
  llvm::IRBuilder<> b_;
  llvm::Type *i64_, *i32_, *i8p_;
  llvm::Function* fn_ = nullptr;
  std::unordered_map<const ExprNode*, llvm::Value*> vars_;
  std::unordered_map<const BufferNode*, std::pair<Buffer, llvm::Value*>> bufs_;
  std::string func_name_;
  int outlined_ = 0;
  absl::Status error_;
};

llvm::AllocaInst* CodeGen::EntryAlloca(llvm::Type* t, llvm::Value* count, uint64_t align) {
  llvm::IRBuilder<> eb(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  llvm::AllocaInst* a = eb.CreateAlloca(t, count);
  a->setAlignment(llvm::Align(align));
  return a;
}

absl::StatusOr<llvm::Function*> CodeGen::EmitBodyFunction(const std::string& name, const Stmt& body,
                                                          const Scope& scope) {
  std::vector<llvm::Type*> params;
  for (size_t i = 0; i < scope.vars.size(); ++i) params.push_back(i64_);
  for (const BufferNode* b : scope.bufs) params.push_back(LType(b->dtype)->getPointerTo());
  auto* fty = llvm::FunctionType::get(i32_, params, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::InternalLinkage, name, mod_);
  ApplyHostAttributes(*fn, tm_);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  // Save the enclosing function's state; the body is generated in its own scope.
  auto saved_vars = std::move(vars_);
  auto saved_bufs = bufs_;
  llvm::Function* saved_fn = fn_;
  auto saved_ip = b_.saveIP();
  vars_.clear();
  fn_ = fn;
  auto arg = fn->arg_begin();
  for (const ExprNode* v : scope.vars) vars_[v] = &*arg++;
  std::unordered_map<const BufferNode*, std::pair<Buffer, llvm::Value*>> inner;
  for (const BufferNode* bn : scope.bufs) {
    llvm::Argument* a = &*arg++;
    a->addAttr(llvm::Attribute::NoAlias);
    inner[bn] = {saved_bufs.at(bn).first, a};
  }
  bufs_ = std::move(inner);
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn));
  absl::Status st = Emit(body);
  if (st.ok() && !b_.GetInsertBlock()->getTerminator()) b_.CreateRet(b_.getInt32(0));
  vars_ = std::move(saved_vars);
  bufs_ = std::move(saved_bufs);
  fn_ = saved_fn;
  b_.restoreIP(saved_ip);
  if (!st.ok()) return st;
  return fn;
}

absl::Status CodeGen::AddFunction(const LoweredFunc& f) {
  func_name_ = f.name;
  // The body is compiled as lowered: Lower()'s CPU recipe has versioned and vectorized it.
  const Stmt& body = f.body;
  Scope scope;
  for (const Buffer& b : f.args) {
    scope.bufs.push_back(b.get());
    bufs_[b.get()] = {b, nullptr};
  }
  auto impl = EmitBodyFunction(f.name + ".impl", body, scope);
  bufs_.clear();
  if (!impl.ok()) return impl.status();
  if (!error_.ok()) return error_;

  // int NAME(void* const* args, int num_args)
  auto* fty = llvm::FunctionType::get(i32_, {i8p_->getPointerTo(), i32_}, false);
  auto* fn = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, f.name, mod_);
  ApplyHostAttributes(*fn, tm_);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", fn);
  auto* bad = llvm::BasicBlock::Create(ctx_, "bad_args", fn);
  auto* good = llvm::BasicBlock::Create(ctx_, "call", fn);
  b_.SetInsertPoint(entry);
  llvm::Value* args = fn->getArg(0);
  llvm::Value* n = fn->getArg(1);
  llvm::Value* ok =
      b_.CreateAnd(b_.CreateICmpEQ(n, b_.getInt32(f.args.size())),
                   b_.CreateICmpNE(args, llvm::Constant::getNullValue(args->getType())));
  b_.CreateCondBr(ok, good, bad);
  b_.SetInsertPoint(bad);
  b_.CreateRet(b_.getInt32(1));
  b_.SetInsertPoint(good);
  std::vector<llvm::Value*> call_args;
  for (size_t i = 0; i < f.args.size(); ++i) {
    llvm::Value* p = b_.CreateLoad(i8p_, b_.CreateConstGEP1_64(i8p_, args, i));
    call_args.push_back(b_.CreateBitCast(p, LType(f.args[i]->dtype)->getPointerTo()));
  }
  b_.CreateRet(b_.CreateCall(*impl, call_args));
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyModule(mod_, &os)) {
    return absl::InternalError("generated llvm module does not verify: " + os.str());
  }
  return absl::OkStatus();
}

llvm::Value* CodeGen::ReturnIfNonZero(llvm::Value* code) {
  auto* fail = llvm::BasicBlock::Create(ctx_, "fail", fn_);
  auto* cont = llvm::BasicBlock::Create(ctx_, "cont", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(code, b_.getInt32(0)), fail, cont);
  b_.SetInsertPoint(fail);
  b_.CreateRet(code);
  b_.SetInsertPoint(cont);
  return code;
}

absl::Status CodeGen::Emit(const Stmt& s) {
  if (!s) return absl::OkStatus();
  switch (s->kind) {
    case StmtKind::kFor:
      return EmitFor(s);
    case StmtKind::kSeq:
      for (const Stmt& x : s->seq) {
        if (auto st = Emit(x); !st.ok()) return st;
      }
      return absl::OkStatus();
    case StmtKind::kAllocate:
      return EmitAllocate(s);
    case StmtKind::kIfThenElse: {
      if (s->cond->type.lanes > 1) {
        return absl::InternalError("vector condition outside a vectorized loop");
      }
      llvm::Value* c = Emit(s->cond);
      // A constant condition (a guard inside unrolled loops, zero_taps.h) emits its side only.
      if (auto* k = llvm::dyn_cast<llvm::ConstantInt>(c)) {
        return Emit(k->isOne() ? s->body : s->else_body);
      }
      auto* then_bb = llvm::BasicBlock::Create(ctx_, "then", fn_);
      auto* else_bb = s->else_body ? llvm::BasicBlock::Create(ctx_, "else", fn_) : nullptr;
      auto* end_bb = llvm::BasicBlock::Create(ctx_, "endif", fn_);
      b_.CreateCondBr(c, then_bb, else_bb ? else_bb : end_bb);
      b_.SetInsertPoint(then_bb);
      if (auto st = Emit(s->body); !st.ok()) return st;
      b_.CreateBr(end_bb);
      if (else_bb) {
        b_.SetInsertPoint(else_bb);
        if (auto st = Emit(s->else_body); !st.ok()) return st;
        b_.CreateBr(end_bb);
      }
      b_.SetInsertPoint(end_bb);
      return absl::OkStatus();
    }
    case StmtKind::kStore: {
      llvm::Value* val = Emit(s->value);
      const Buffer& buf = s->buffer;
      int lanes = s->value->type.lanes;
      if (lanes == 1) {
        b_.CreateAlignedStore(val, Address(buf, Emit(s->index)), llvm::Align(buf->dtype.bytes()));
        return absl::OkStatus();
      }
      llvm::Value* mask = s->predicate ? Mask(s->predicate, lanes) : nullptr;
      llvm::Align al(buf->dtype.bytes());
      bool odd_mask = mask && !SafeMaskedWidth(lanes);
      if (llvm::Value* base = odd_mask ? nullptr : ContiguousAddress(buf, s->index)) {
        llvm::Value* vp = b_.CreateBitCast(base, val->getType()->getPointerTo());
        if (mask) {
          b_.CreateMaskedStore(val, vp, al, mask);
        } else {
          b_.CreateAlignedStore(val, vp, al);
        }
        return absl::OkStatus();
      }
      if (std::vector<Expr> runs = ContiguousRuns(s->index, lanes); !runs.empty()) {
        const int run = lanes / static_cast<int>(runs.size());
        for (size_t r = 0; r < runs.size(); ++r) {
          llvm::Value* part = Slice(val, static_cast<int>(r) * run, run);
          llvm::Value* vp =
              b_.CreateBitCast(Address(buf, Emit(runs[r])), part->getType()->getPointerTo());
          if (mask) {
            b_.CreateMaskedStore(part, vp, al, Slice(mask, static_cast<int>(r) * run, run));
          } else {
            b_.CreateAlignedStore(part, vp, al);
          }
        }
        return absl::OkStatus();
      }
      llvm::Value* ptrs = Address(buf, Emit(s->index));
      b_.CreateMaskedScatter(val, ptrs, al, mask);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status CodeGen::EmitAllocate(const Stmt& s) {
  const Buffer& buf = s->buffer;
  llvm::Type* et = LType(buf->dtype);
  int64_t bytes = buf->size() * buf->dtype.bytes();
  llvm::Value* ptr;
  bool heap = buf->scope == "global" && bytes > kMaxStackBytes;
  if (!heap) {
    ptr = EntryAlloca(et, b_.getInt64(buf->size()), 64);
  } else {
    llvm::FunctionCallee alloc =
        mod_.getOrInsertFunction("lathe_alloc", llvm::FunctionType::get(i8p_, {i64_}, false));
    llvm::Value* raw = b_.CreateCall(alloc, {b_.getInt64(bytes)});
    auto* fail = llvm::BasicBlock::Create(ctx_, "oom", fn_);
    auto* cont = llvm::BasicBlock::Create(ctx_, "alloc_ok", fn_);
    b_.CreateCondBr(b_.CreateIsNull(raw), fail, cont);
    b_.SetInsertPoint(fail);
    b_.CreateRet(b_.getInt32(2));
    b_.SetInsertPoint(cont);
    ptr = b_.CreateBitCast(raw, et->getPointerTo());
  }
  bufs_[buf.get()] = {buf, ptr};
  absl::Status st = Emit(s->body);
  bufs_.erase(buf.get());
  if (heap) {
    llvm::FunctionCallee fr = mod_.getOrInsertFunction(
        "lathe_free", llvm::FunctionType::get(b_.getVoidTy(), {i8p_}, false));
    b_.CreateCall(fr, {b_.CreateBitCast(ptr, i8p_)});
  }
  return st;
}

absl::Status CodeGen::EmitFor(const Stmt& s) {
  if (s->for_kind == ForKind::kThreadBinding) {
    return absl::InvalidArgumentError("loop '" + s->var->name + "' is bound to " + s->thread_tag +
                                      ", which the cpu target cannot run");
  }
  if (s->for_kind == ForKind::kParallel) return EmitParallel(s);
  if (s->for_kind == ForKind::kVectorized) {
    return absl::InvalidArgumentError(
        "loop '" + s->var->name +
        "' is still marked vectorized: lower with the cpu recipe (codegen::LowerOptions), "
        "which vectorizes it");
  }
  int64_t n = 0;
  bool const_extent = AsConstInt(s->extent, &n);
  if (s->for_kind == ForKind::kUnrolled && const_extent && n <= 4096) {
    if (std::optional<TransposedCopy> tc = MatchTransposedCopy(s)) {
      EmitTransposedCopy(*tc);
      return absl::OkStatus();
    }
    llvm::Value* mn = Emit(s->min);
    for (int64_t i = 0; i < n; ++i) {
      vars_[s->var.get()] = b_.CreateAdd(mn, b_.getInt64(i));
      if (auto st = Emit(s->body); !st.ok()) return st;
    }
    vars_.erase(s->var.get());
    return absl::OkStatus();
  }
  llvm::Value* mn = Emit(s->min);
  llvm::Value* end = b_.CreateAdd(mn, Emit(s->extent));
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  auto* head = llvm::BasicBlock::Create(ctx_, "for." + s->var->name, fn_);
  auto* body = llvm::BasicBlock::Create(ctx_, "body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "end." + s->var->name, fn_);
  b_.CreateBr(head);
  b_.SetInsertPoint(head);
  llvm::PHINode* iv = b_.CreatePHI(i64_, 2, s->var->name);
  iv->addIncoming(mn, pre);
  b_.CreateCondBr(b_.CreateICmpSLT(iv, end), body, exit);
  b_.SetInsertPoint(body);
  vars_[s->var.get()] = iv;
  if (auto st = Emit(s->body); !st.ok()) return st;
  vars_.erase(s->var.get());
  llvm::Value* next = b_.CreateAdd(iv, b_.getInt64(1), "", /*HasNUW=*/true, /*HasNSW=*/true);
  iv->addIncoming(next, b_.GetInsertBlock());
  b_.CreateBr(head);
  b_.SetInsertPoint(exit);
  return absl::OkStatus();
}

void CodeGen::EmitTransposedCopy(const TransposedCopy& tc) {
  const int lanes = tc.lanes;
  auto* vty = llvm::FixedVectorType::get(ElemType(tc.src->dtype), static_cast<unsigned>(lanes));
  const llvm::Align src_align(tc.src->dtype.bytes()), dst_align(tc.dst->dtype.bytes());
  llvm::Value* stride = Emit(tc.row_stride);
  for (const TransposedCopy::Block& block : tc.blocks) {
    int cols = 0;
    bool guarded = false;
    for (const TransposedCopy::Column& c : block.columns) {
      cols = std::max(cols, c.offset + 1);
      guarded = guarded || c.guard != nullptr;
    }
    // Row j of the block: the first `cols` elements from src_base + j * stride (the masked-off
    // lanes are not read: they are no element of the copy). Where the gather was masked (an
    // inlined padding's bounds), a column's lane is read only where its guard holds (0 where
    // not, as the masked gather gave) and lanes of no column not at all.
    const bool all_on = cols == lanes && !guarded;
    std::vector<llvm::Constant*> on(static_cast<size_t>(lanes));
    for (int i = 0; i < lanes; ++i) on[i] = b_.getInt1(i < cols && !guarded);
    for (const TransposedCopy::Column& c : block.columns) {
      if (!c.guard) on[c.offset] = b_.getInt1(true);
    }
    llvm::Value* mask = llvm::ConstantVector::get(on);
    for (const TransposedCopy::Column& c : block.columns) {
      if (c.guard) mask = b_.CreateInsertElement(mask, Emit(c.guard), b_.getInt64(c.offset));
    }
    llvm::Value* base = Emit(block.src_base);
    std::vector<llvm::Value*> rows(static_cast<size_t>(lanes));
    for (int j = 0; j < lanes; ++j) {
      llvm::Value* at = b_.CreateAdd(base, b_.CreateMul(stride, b_.getInt64(j)));
      llvm::Value* vp = b_.CreateBitCast(Address(tc.src, at), vty->getPointerTo());
      rows[j] =
          all_on ? static_cast<llvm::Value*>(b_.CreateAlignedLoad(vty, vp, src_align))
                 : b_.CreateMaskedLoad(vty, vp, src_align, mask, llvm::Constant::getNullValue(vty));
    }
    // Transposed in log2(lanes) steps: step b swaps bit b of the row index with bit b of the
    // column index (rows p and p + b trade their elements whose columns differ in bit b).
    for (int bit = lanes / 2; bit >= 1; bit /= 2) {
      std::vector<int> low(static_cast<size_t>(lanes)), high(static_cast<size_t>(lanes));
      for (int c = 0; c < lanes; ++c) {
        low[c] = (c & bit) ? lanes + c - bit : c;
        high[c] = (c & bit) ? lanes + c : c + bit;
      }
      for (int p = 0; p < lanes; ++p) {
        if (p & bit) continue;
        llvm::Value* a = b_.CreateShuffleVector(rows[p], rows[p + bit], low);
        llvm::Value* b = b_.CreateShuffleVector(rows[p], rows[p + bit], high);
        rows[p] = a;
        rows[p + bit] = b;
      }
    }
    for (const TransposedCopy::Column& c : block.columns) {
      vars_[tc.tile.get()] = rows[c.offset];
      llvm::Value* v = Emit(c.value);
      llvm::Value* vp =
          b_.CreateBitCast(Address(tc.dst, Emit(c.dst_base)), v->getType()->getPointerTo());
      b_.CreateAlignedStore(v, vp, dst_align);
    }
    vars_.erase(tc.tile.get());
  }
}

absl::Status CodeGen::EmitParallel(const Stmt& s) {
  // Everything in scope travels in a closure: the loop variables as i64, the buffers as
  // pointers. The task body is a function with noalias buffer parameters.
  Scope scope;
  std::vector<llvm::Value*> values;
  for (const auto& [v, val] : vars_) {
    scope.vars.push_back(v);
    values.push_back(val);
  }
  for (const auto& [bn, entry] : bufs_) {
    scope.bufs.push_back(bn);
    values.push_back(entry.second);
  }
  Scope body_scope = scope;
  body_scope.vars.insert(body_scope.vars.begin(), s->var.get());
  // The loop variable is the first parameter: task + min.
  std::string base = absl::StrCat(func_name_, ".par", outlined_++);
  Stmt body = s->body;
  if (!IsConstInt(s->min, 0)) {
    Expr task = MakeVar(s->var->name + ".task");
    body = Substitute(body, {{s->var.get(), Add(task, s->min)}});
    body_scope.vars[0] = task.get();
  }
  auto body_fn = EmitBodyFunction(base + ".body", body, body_scope);
  if (!body_fn.ok()) return body_fn.status();

  std::vector<llvm::Type*> fields;
  for (llvm::Value* v : values) fields.push_back(v->getType());
  llvm::StructType* cty = llvm::StructType::create(ctx_, fields, base + ".closure");
  // int task_fn(int64_t task, void* closure)
  auto* tty = llvm::FunctionType::get(i32_, {i64_, i8p_}, false);
  auto* tfn = llvm::Function::Create(tty, llvm::Function::InternalLinkage, base, mod_);
  ApplyHostAttributes(*tfn, tm_);
  {
    llvm::IRBuilder<> tb(llvm::BasicBlock::Create(ctx_, "entry", tfn));
    llvm::Value* cl = tb.CreateBitCast(tfn->getArg(1), cty->getPointerTo());
    std::vector<llvm::Value*> args = {tfn->getArg(0)};
    for (size_t i = 0; i < fields.size(); ++i) {
      args.push_back(tb.CreateLoad(fields[i], tb.CreateStructGEP(cty, cl, i)));
    }
    tb.CreateRet(tb.CreateCall(*body_fn, args));
  }
  llvm::AllocaInst* cl = EntryAlloca(cty, nullptr, 8);
  for (size_t i = 0; i < values.size(); ++i)
    b_.CreateStore(values[i], b_.CreateStructGEP(cty, cl, i));
  llvm::FunctionCallee pf = mod_.getOrInsertFunction(
      "lathe_parallel_for", llvm::FunctionType::get(i32_, {i64_, tfn->getType(), i8p_}, false));
  llvm::Value* rc = b_.CreateCall(pf, {Emit(s->extent), tfn, b_.CreateBitCast(cl, i8p_)});
  ReturnIfNonZero(rc);
  return absl::OkStatus();
}

llvm::Value* CodeGen::Address(const Buffer& buf, llvm::Value* index) {
  auto it = bufs_.find(buf.get());
  if (it == bufs_.end()) {
    error_ = absl::InternalError("buffer '" + buf->name + "' used outside its allocation");
    return llvm::UndefValue::get(LType(buf->dtype)->getPointerTo());
  }
  return b_.CreateInBoundsGEP(LType(buf->dtype), it->second.second, index);
}

llvm::Value* CodeGen::ContiguousAddress(const Buffer& buf, const Expr& index) {
  if (index->kind != ExprKind::kRamp || !IsConstInt(index->operands[1], 1)) return nullptr;
  return Address(buf, Emit(index->operands[0]));
}

llvm::Value* CodeGen::Mask(const Expr& pred, int lanes) {
  llvm::Value* m = Emit(pred);
  if (!m->getType()->isVectorTy()) m = b_.CreateVectorSplat(lanes, m);
  return m;
}

llvm::Value* CodeGen::EmitLoad(const Expr& e) {
  const Buffer& buf = e->buffer;
  const Expr& index = e->operands[0];
  int lanes = e->type.lanes;
  llvm::Align al(buf->dtype.bytes());
  llvm::Type* ty = LType(e->type);
  if (lanes == 1) return b_.CreateAlignedLoad(ty, Address(buf, Emit(index)), al);
  llvm::Value* mask = e->operands.size() > 1 ? Mask(e->operands[1], lanes) : nullptr;
  llvm::Value* zero = llvm::Constant::getNullValue(ty);
  llvm::Value* base = mask && !SafeMaskedWidth(lanes) ? nullptr : ContiguousAddress(buf, index);
  if (base) {
    llvm::Value* vp = b_.CreateBitCast(base, ty->getPointerTo());
    if (mask) return b_.CreateMaskedLoad(ty, vp, al, mask, zero);
    return b_.CreateAlignedLoad(ty, vp, al);
  }
  if (index->kind == ExprKind::kBroadcast && !mask) {
    llvm::Value* s =
        b_.CreateAlignedLoad(ElemType(e->type), Address(buf, Emit(index->operands[0])), al);
    return b_.CreateVectorSplat(lanes, s);
  }
  if (std::vector<Expr> runs = ContiguousRuns(index, lanes); !runs.empty()) {
    // One load per run, joined pairwise.
    const int run = lanes / static_cast<int>(runs.size());
    auto* rty = llvm::FixedVectorType::get(ElemType(e->type), static_cast<unsigned>(run));
    std::vector<llvm::Value*> parts;
    for (size_t r = 0; r < runs.size(); ++r) {
      llvm::Value* vp = b_.CreateBitCast(Address(buf, Emit(runs[r])), rty->getPointerTo());
      parts.push_back(mask ? static_cast<llvm::Value*>(b_.CreateMaskedLoad(
                                 rty, vp, al, Slice(mask, static_cast<int>(r) * run, run),
                                 llvm::Constant::getNullValue(rty)))
                           : b_.CreateAlignedLoad(rty, vp, al));
    }
    for (int width = run; parts.size() > 1; width *= 2) {
      std::vector<int> both(static_cast<size_t>(2 * width));
      for (int i = 0; i < 2 * width; ++i) both[i] = i;
      std::vector<llvm::Value*> next;
      for (size_t i = 0; i < parts.size(); i += 2) {
        next.push_back(b_.CreateShuffleVector(parts[i], parts[i + 1], both));
      }
      parts = std::move(next);
    }
    return parts[0];
  }
  // Lanes a small constant stride apart (the columns of a stride-2 convolution or pooling
  // vectorized along its output columns): the span they cover read by one masked load that
  // touches only the lanes' elements (and none past the last lane's; masked lanes too), then
  // the lanes picked by one shuffle (vpermt2ps on AVX-512), rather than gathered one by one.
  if (int64_t stride = 0; index->kind == ExprKind::kRamp &&
                          AsConstInt(index->operands[1], &stride) && stride >= 2 && stride <= 4 &&
                          SafeMaskedWidth(static_cast<int>(stride) * lanes)) {
    const int s = static_cast<int>(stride), span = s * lanes;
    llvm::Value* on = mask ? mask
                           : llvm::ConstantInt::getTrue(llvm::FixedVectorType::get(
                                 b_.getInt1Ty(), static_cast<unsigned>(lanes)));
    std::vector<int> expand(static_cast<size_t>(span));
    for (int j = 0; j < span; ++j) expand[j] = j % s == 0 ? j / s : lanes;
    llvm::Value* span_mask =
        b_.CreateShuffleVector(on, llvm::Constant::getNullValue(on->getType()), expand);
    auto* sty = llvm::FixedVectorType::get(ElemType(e->type), static_cast<unsigned>(span));
    llvm::Value* vp = b_.CreateBitCast(Address(buf, Emit(index->operands[0])), sty->getPointerTo());
    llvm::Value* all =
        b_.CreateMaskedLoad(sty, vp, al, span_mask, llvm::Constant::getNullValue(sty));
    std::vector<int> pick(static_cast<size_t>(lanes));
    for (int i = 0; i < lanes; ++i) pick[i] = i * s;
    return b_.CreateShuffleVector(all, pick);
  }
  llvm::Value* ptrs = Address(buf, Emit(index));
  return b_.CreateMaskedGather(ty, ptrs, al, mask, zero);
}

llvm::Value* CodeGen::Slice(llvm::Value* v, int first, int n) {
  std::vector<int> idx(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) idx[i] = first + i;
  return b_.CreateShuffleVector(v, idx);
}

llvm::Value* CodeGen::EmitSelect(const Expr& e) {
  const auto& o = e->operands;
  // A constant condition (a case of an unrolled position, e.g. ir/ops_winograd.cc's
  // transforms) emits the chosen side only: both sides of a chain of cases would multiply the
  // code LLVM must then delete, for every unrolled copy.
  llvm::Value* cond = Emit(o[0]);
  if (auto* k = llvm::dyn_cast<llvm::Constant>(cond)) {
    llvm::Constant* v = k->getType()->isVectorTy() ? k->getSplatValue() : k;
    if (auto* ci = llvm::dyn_cast_or_null<llvm::ConstantInt>(v))
      return Emit(o[ci->isOne() ? 1 : 2]);
  }
  bool has_load = false;
  for (int i = 1; i < 3; ++i) {
    Visit(o[i], [&](const Expr& x) {
      if (x->kind == ExprKind::kLoad && x->operands.size() == 1) has_load = true;
    });
  }
  llvm::Value* c = cond;
  if (!has_load || e->type.lanes > 1) {
    llvm::Value* t = Emit(o[1]);
    llvm::Value* f = Emit(o[2]);
    return b_.CreateSelect(c, t, f);
  }
  // Only the chosen side may run: it may read memory that the other side guards.
  auto* tb = llvm::BasicBlock::Create(ctx_, "sel.t", fn_);
  auto* fb = llvm::BasicBlock::Create(ctx_, "sel.f", fn_);
  auto* end = llvm::BasicBlock::Create(ctx_, "sel.end", fn_);
  b_.CreateCondBr(c, tb, fb);
  b_.SetInsertPoint(tb);
  llvm::Value* t = Emit(o[1]);
  llvm::BasicBlock* tend = b_.GetInsertBlock();
  b_.CreateBr(end);
  b_.SetInsertPoint(fb);
  llvm::Value* f = Emit(o[2]);
  llvm::BasicBlock* fend = b_.GetInsertBlock();
  b_.CreateBr(end);
  b_.SetInsertPoint(end);
  llvm::PHINode* phi = b_.CreatePHI(t->getType(), 2);
  phi->addIncoming(t, tend);
  phi->addIncoming(f, fend);
  return phi;
}

llvm::Value* CodeGen::EmitCall(const Expr& e) {
  llvm::Value* x = Emit(e->operands[0]);
  llvm::Type* ty = x->getType();
  const std::string& fnm = e->name;
  auto intrinsic = [&](llvm::Intrinsic::ID id) {
    llvm::Function* f = llvm::Intrinsic::getDeclaration(&mod_, id, {ty});
    return b_.CreateCall(f, {x});
  };
  if (fnm == "sqrt") return intrinsic(llvm::Intrinsic::sqrt);
  if (fnm == "abs") return intrinsic(llvm::Intrinsic::fabs);
  // Float32 is the only float type (ir/type.h).
  if (fnm == "exp") return ExpF32(x);
  if (fnm == "log") return intrinsic(llvm::Intrinsic::log);
  if (fnm == "tanh") return TanhF32(x);
  error_ = absl::InvalidArgumentError("unknown function '" + fnm + "'");
  return x;
}

// exp(x) = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 in [-ln 2 / 2, ln 2 / 2] (ln 2
// split in a part exact in float and a correction, so that n ln 2 subtracts exactly); e^r =
// 1 + r + r^2 p(r) with p the degree-5 minimax polynomial of single-precision expf (within 2
// ulp on the reduced range), computed doubled (2 + 2r + r^2 2p(r)); 2^n built in the exponent
// bits as 2 * 2^(n-1), so that n = 128 (x near the top) stays finite. x is clamped to
// [-87.5, 89.5] first, where the exponent field n + 126 runs from 0 to 255: below about
// -125.5 ln 2 (x < -86.99, results below 2^-125.5) the field is 0 and the result exactly 0;
// above 128.5 ln 2 (x > 89.07) it is 255 and the result +inf, as the product overflows
// between 88.72 and there; no compare-and-select for the ends (a vector exp is a long chain of
// dependent operations: each one it loses is latency the out-of-order window no longer has to
// hide). NaN stays NaN.
llvm::Value* CodeGen::ExpF32(llvm::Value* x) {
  llvm::Type* ty = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(ty, v); };
  llvm::Type* ity = ty->isVectorTy() ? llvm::VectorType::get(i32_, llvm::cast<llvm::VectorType>(ty))
                                     : static_cast<llvm::Type*>(i32_);
  auto ic = [&](int v) { return llvm::ConstantInt::get(ity, v); };
  constexpr double kHi = 89.5, kLo = -87.5;
  // Ordered compares: a NaN x takes neither clamp.
  llvm::Value* xc = b_.CreateSelect(b_.CreateFCmpOGT(x, c(kHi)), c(kHi), x);
  xc = b_.CreateSelect(b_.CreateFCmpOLT(xc, c(kLo)), c(kLo), xc);
  llvm::Function* floor = llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::floor, {ty});
  llvm::Value* n =
      b_.CreateCall(floor, {b_.CreateFAdd(b_.CreateFMul(xc, c(1.4426950408889634)), c(0.5))});
  llvm::Value* r = b_.CreateFSub(xc, b_.CreateFMul(n, c(0.693359375)));
  r = b_.CreateFSub(r, b_.CreateFMul(n, c(-2.12194440e-4)));
  static constexpr double kP[] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                  4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
  llvm::Value* p = c(2 * kP[0]);
  for (int i = 1; i < 6; ++i) p = b_.CreateFAdd(b_.CreateFMul(p, r), c(2 * kP[i]));
  llvm::Value* y2 =  // 2 e^r
      b_.CreateFAdd(b_.CreateFMul(p, b_.CreateFMul(r, r)),
                    b_.CreateFAdd(b_.CreateFMul(r, c(2.0)), c(2.0)));
  // fptosi of a NaN is poison: a NaN n becomes 0 first (its y2 is NaN already).
  llvm::Value* ni = b_.CreateFPToSI(b_.CreateSelect(b_.CreateFCmpUNO(n, n), c(0.0), n), ity);
  llvm::Value* half_pow =  // 2^(n-1); n - 1 + 127 is in [0, 255]
      b_.CreateBitCast(b_.CreateShl(b_.CreateAdd(ni, ic(126)), ic(23)), ty);
  return b_.CreateFMul(y2, half_pow);
}

// tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)) for |x| >= 1/8 (absolute error about one ulp of
// 1); below, the odd Taylor series to x^9 (the subtraction above would lose the low bits).
llvm::Value* CodeGen::TanhF32(llvm::Value* x) {
  llvm::Type* ty = x->getType();
  auto c = [&](double v) { return llvm::ConstantFP::get(ty, v); };
  llvm::Function* fabs = llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::fabs, {ty});
  llvm::Function* copysign =
      llvm::Intrinsic::getDeclaration(&mod_, llvm::Intrinsic::copysign, {ty});
  llvm::Value* a = b_.CreateCall(fabs, {x});
  llvm::Value* e = ExpF32(b_.CreateFMul(a, c(2.0)));
  llvm::Value* t = b_.CreateFSub(c(1.0), b_.CreateFDiv(c(2.0), b_.CreateFAdd(e, c(1.0))));
  t = b_.CreateCall(copysign, {t, x});
  llvm::Value* x2 = b_.CreateFMul(x, x);
  llvm::Value* p = c(62.0 / 2835);
  for (double k : {-17.0 / 315, 2.0 / 15, -1.0 / 3}) p = b_.CreateFAdd(b_.CreateFMul(p, x2), c(k));
  llvm::Value* small = b_.CreateFAdd(x, b_.CreateFMul(b_.CreateFMul(x, x2), p));
  return b_.CreateSelect(b_.CreateFCmpOLT(a, c(0.125)), small, t);
}

llvm::Value* CodeGen::FloorAdjust(llvm::Value* rem, llvm::Value* divisor) {
  llvm::Value* zero = llvm::Constant::getNullValue(rem->getType());
  return b_.CreateAnd(b_.CreateICmpNE(rem, zero), b_.CreateICmpNE(b_.CreateICmpSLT(rem, zero),
                                                                  b_.CreateICmpSLT(divisor, zero)));
}

llvm::Value* CodeGen::EmitBinary(const Expr& e) {
  llvm::Value* a = Emit(e->operands[0]);
  llvm::Value* b = Emit(e->operands[1]);
  const Type& t = e->operands[0]->type;
  bool f = t.is_float();
  switch (e->kind) {
    case ExprKind::kAdd:
      return f ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
    case ExprKind::kSub:
      return f ? b_.CreateFSub(a, b) : b_.CreateSub(a, b);
    case ExprKind::kMul:
      return f ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
    case ExprKind::kDiv: {
      if (f) return b_.CreateFDiv(a, b);
      // Floor division: the truncated quotient, one less when the remainder is non-zero and
      // its sign differs from the divisor's.
      llvm::Value* q = b_.CreateSDiv(a, b);
      return b_.CreateSub(q, b_.CreateZExt(FloorAdjust(b_.CreateSRem(a, b), b), a->getType()));
    }
    case ExprKind::kMod: {
      llvm::Value* r = b_.CreateSRem(a, b);
      return b_.CreateSelect(FloorAdjust(r, b), b_.CreateAdd(r, b), r);
    }
    case ExprKind::kMin:
      return b_.CreateSelect(f ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b), a, b);
    case ExprKind::kMax:
      return b_.CreateSelect(f ? b_.CreateFCmpOGT(a, b) : b_.CreateICmpSGT(a, b), a, b);
    case ExprKind::kEQ:
      return f ? b_.CreateFCmpOEQ(a, b) : b_.CreateICmpEQ(a, b);
    case ExprKind::kNE:
      return f ? b_.CreateFCmpUNE(a, b) : b_.CreateICmpNE(a, b);
    case ExprKind::kLT:
      return f ? b_.CreateFCmpOLT(a, b) : b_.CreateICmpSLT(a, b);
    case ExprKind::kLE:
      return f ? b_.CreateFCmpOLE(a, b) : b_.CreateICmpSLE(a, b);
    case ExprKind::kGT:
      return f ? b_.CreateFCmpOGT(a, b) : b_.CreateICmpSGT(a, b);
    case ExprKind::kGE:
      return f ? b_.CreateFCmpOGE(a, b) : b_.CreateICmpSGE(a, b);
    case ExprKind::kAnd:
      return b_.CreateAnd(a, b);
    case ExprKind::kOr:
      return b_.CreateOr(a, b);
    default:
      return a;
  }
}

llvm::Value* CodeGen::Emit(const Expr& e) {
  switch (e->kind) {
    case ExprKind::kIntImm:
      if (e->type.is_bool()) return b_.getInt1(e->int_value != 0);
      return b_.getInt64(e->int_value);
    case ExprKind::kFloatImm:
      return llvm::ConstantFP::get(b_.getFloatTy(), e->float_value);
    case ExprKind::kVar: {
      auto it = vars_.find(e.get());
      if (it != vars_.end()) return it->second;
      error_ = absl::InternalError("variable '" + e->name + "' used outside its loop");
      return b_.getInt64(0);
    }
    case ExprKind::kNot:
      return b_.CreateNot(Emit(e->operands[0]));
    case ExprKind::kSelect:
      return EmitSelect(e);
    case ExprKind::kCast: {
      llvm::Value* v = Emit(e->operands[0]);
      const Type& from = e->operands[0]->type;
      llvm::Type* to = LType(e->type);
      if (e->type.is_bool()) {
        return from.is_float() ? b_.CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()))
                               : b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
      }
      if (from.is_bool()) return e->type.is_float() ? b_.CreateUIToFP(v, to) : b_.CreateZExt(v, to);
      if (from.is_int() && e->type.is_float()) return b_.CreateSIToFP(v, to);
      if (from.is_float() && e->type.is_int()) return b_.CreateFPToSI(v, to);
      return v;
    }
    case ExprKind::kCall:
      return EmitCall(e);
    case ExprKind::kLoad:
      return EmitLoad(e);
    case ExprKind::kRamp: {
      int n = e->type.lanes;
      llvm::Value* base = b_.CreateVectorSplat(n, Emit(e->operands[0]));
      llvm::Value* stride = b_.CreateVectorSplat(n, Emit(e->operands[1]));
      std::vector<llvm::Constant*> steps;
      for (int i = 0; i < n; ++i) steps.push_back(b_.getInt64(i));
      return b_.CreateAdd(base, b_.CreateMul(stride, llvm::ConstantVector::get(steps)));
    }
    case ExprKind::kBroadcast:
      return b_.CreateVectorSplat(e->type.lanes, Emit(e->operands[0]));
    case ExprKind::kTensorRead:
    case ExprKind::kReduce:
      error_ = absl::InternalError(std::string(ExprKindName(e->kind)) + " survived lowering");
      return llvm::UndefValue::get(LType(e->type));
    default:
      return EmitBinary(e);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<llvm::Module>> GenerateModule(const std::vector<LoweredFunc>& funcs,
                                                             llvm::LLVMContext& ctx,
                                                             const llvm::TargetMachine& tm) {
  auto mod = std::make_unique<llvm::Module>("lathe", ctx);
  mod->setDataLayout(tm.createDataLayout());
  mod->setTargetTriple(tm.getTargetTriple().str());
  for (const LoweredFunc& f : funcs) {
    CodeGen cg(ctx, *mod, tm);
    if (auto st = cg.AddFunction(f); !st.ok()) return st;
  }
  return mod;
}

}  // namespace lathe::codegen
