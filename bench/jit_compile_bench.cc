// \file
// bench_jit_compile: how long a typical tiled-GEMM candidate takes to compile. Builds, with
// IRBuilder, the kind of module lowering produces for a register-tiled matmul (parallel outer
// loop through lathe_parallel_for, a 3-deep loop nest, R x V accumulators of <16 x float>,
// the reduction loop unrolled U times), then times the O3 pipeline, codegen at several
// optimisation levels, and the whole JitModule::Create; checks the JIT'd kernel's result.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "codegen/llvm_target.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Intrinsics.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

namespace {

using lathe::codegen::ApplyHostAttributes;
using lathe::codegen::CreateHostTargetMachine;
using lathe::codegen::EmitObject;
using lathe::codegen::JitModule;
using lathe::codegen::OptimizeModule;

constexpr int kVec = 16;  // <16 x float>, as lowering emits for vectorised loops

struct Shape {
  int m, n, k;             // GEMM sizes
  int rows, vecs, unroll;  // register tile: rows x (vecs * 16) columns, k unrolled
};

// int gemm(void* const* args, int n): args = A[m,k], B[k,n], C[m,n].
std::unique_ptr<llvm::Module> BuildGemm(llvm::LLVMContext& ctx, const Shape& s) {
  auto module = std::make_unique<llvm::Module>("gemm", ctx);
  llvm::IRBuilder<> b(ctx);
  llvm::Type* i8p = b.getInt8PtrTy();
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* f32 = b.getFloatTy();
  llvm::Type* fp = f32->getPointerTo();
  auto* vty = llvm::FixedVectorType::get(f32, kVec);
  llvm::Function* fma =
      llvm::Intrinsic::getDeclaration(module.get(), llvm::Intrinsic::fmuladd, {vty});

  auto* task_type = llvm::FunctionType::get(i32, {i64, i8p}, false);
  auto* task =
      llvm::Function::Create(task_type, llvm::Function::InternalLinkage, "gemm_task", module.get());
  {
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", task);
    auto* j_head = llvm::BasicBlock::Create(ctx, "j", task);
    auto* k_body = llvm::BasicBlock::Create(ctx, "k", task);
    auto* j_tail = llvm::BasicBlock::Create(ctx, "j_tail", task);
    auto* exit = llvm::BasicBlock::Create(ctx, "exit", task);
    b.SetInsertPoint(entry);
    llvm::Value* args = b.CreateBitCast(task->getArg(1), i8p->getPointerTo());
    llvm::Value* a = b.CreateBitCast(b.CreateLoad(i8p, b.CreateConstGEP1_64(i8p, args, 0)), fp);
    llvm::Value* bm = b.CreateBitCast(b.CreateLoad(i8p, b.CreateConstGEP1_64(i8p, args, 1)), fp);
    llvm::Value* c = b.CreateBitCast(b.CreateLoad(i8p, b.CreateConstGEP1_64(i8p, args, 2)), fp);
    llvm::Value* row0 = b.CreateMul(task->getArg(0), b.getInt64(s.rows));
    b.CreateBr(j_head);

    b.SetInsertPoint(j_head);
    llvm::PHINode* jo = b.CreatePHI(i64, 2, "jo");
    jo->addIncoming(b.getInt64(0), entry);
    llvm::Value* col0 = b.CreateMul(jo, b.getInt64(s.vecs * kVec));
    b.CreateBr(k_body);

    b.SetInsertPoint(k_body);
    llvm::PHINode* ko = b.CreatePHI(i64, 2, "ko");
    ko->addIncoming(b.getInt64(0), j_head);
    std::vector<llvm::PHINode*> acc_phi;
    std::vector<llvm::Value*> acc;
    for (int i = 0; i < s.rows * s.vecs; ++i) {
      acc_phi.push_back(b.CreatePHI(vty, 2, "acc"));
      acc_phi.back()->addIncoming(llvm::ConstantAggregateZero::get(vty), j_head);
      acc.push_back(acc_phi.back());
    }
    for (int u = 0; u < s.unroll; ++u) {
      llvm::Value* kk = b.CreateAdd(b.CreateMul(ko, b.getInt64(s.unroll)), b.getInt64(u));
      std::vector<llvm::Value*> bv;
      for (int v = 0; v < s.vecs; ++v) {
        llvm::Value* idx =
            b.CreateAdd(b.CreateMul(kk, b.getInt64(s.n)), b.CreateAdd(col0, b.getInt64(v * kVec)));
        llvm::Value* ptr = b.CreateBitCast(b.CreateInBoundsGEP(f32, bm, idx), vty->getPointerTo());
        bv.push_back(b.CreateAlignedLoad(vty, ptr, llvm::Align(4)));
      }
      for (int r = 0; r < s.rows; ++r) {
        llvm::Value* idx =
            b.CreateAdd(b.CreateMul(b.CreateAdd(row0, b.getInt64(r)), b.getInt64(s.k)), kk);
        llvm::Value* splat =
            b.CreateVectorSplat(kVec, b.CreateLoad(f32, b.CreateInBoundsGEP(f32, a, idx)));
        for (int v = 0; v < s.vecs; ++v) {
          acc[r * s.vecs + v] = b.CreateCall(fma, {splat, bv[v], acc[r * s.vecs + v]});
        }
      }
    }
    llvm::Value* ko_next = b.CreateAdd(ko, b.getInt64(1));
    ko->addIncoming(ko_next, k_body);
    for (size_t i = 0; i < acc.size(); ++i) acc_phi[i]->addIncoming(acc[i], k_body);
    b.CreateCondBr(b.CreateICmpULT(ko_next, b.getInt64(s.k / s.unroll)), k_body, j_tail);

    b.SetInsertPoint(j_tail);
    for (int r = 0; r < s.rows; ++r) {
      for (int v = 0; v < s.vecs; ++v) {
        llvm::Value* idx =
            b.CreateAdd(b.CreateMul(b.CreateAdd(row0, b.getInt64(r)), b.getInt64(s.n)),
                        b.CreateAdd(col0, b.getInt64(v * kVec)));
        llvm::Value* ptr = b.CreateBitCast(b.CreateInBoundsGEP(f32, c, idx), vty->getPointerTo());
        b.CreateAlignedStore(acc[r * s.vecs + v], ptr, llvm::Align(4));
      }
    }
    llvm::Value* jo_next = b.CreateAdd(jo, b.getInt64(1));
    jo->addIncoming(jo_next, j_tail);
    b.CreateCondBr(b.CreateICmpULT(jo_next, b.getInt64(s.n / (s.vecs * kVec))), j_head, exit);
    b.SetInsertPoint(exit);
    b.CreateRet(b.getInt32(0));
  }
  auto* pf_type = llvm::FunctionType::get(i32, {i64, task_type->getPointerTo(), i8p}, false);
  llvm::FunctionCallee parallel_for = module->getOrInsertFunction("lathe_parallel_for", pf_type);
  auto* kernel =
      llvm::Function::Create(llvm::FunctionType::get(i32, {i8p->getPointerTo(), i32}, false),
                             llvm::Function::ExternalLinkage, "gemm", module.get());
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", kernel);
  b.SetInsertPoint(entry);
  b.CreateRet(b.CreateCall(
      parallel_for, {b.getInt64(s.m / s.rows), task, b.CreateBitCast(kernel->getArg(0), i8p)}));
  return module;
}

double Ms(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

// Compile phases are single-threaded: time them in this thread's CPU time, which other load
// on the machine inflates far less than wall time.
struct CpuClock {
  using duration = std::chrono::steady_clock::duration;
  struct time_point {
    std::chrono::nanoseconds ns;
    duration operator-(const time_point& o) const {
      return std::chrono::duration_cast<duration>(ns - o.ns);
    }
  };
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return {std::chrono::nanoseconds(int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec)};
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool Run(const Shape& s) {
  using Clock = CpuClock;
  constexpr int kReps = 15;
  std::vector<double> build_ms, o3_ms, jit_ms, total_ms;
  std::vector<std::vector<double>> emit_ms(4);
  std::unique_ptr<JitModule> jit;
  for (int rep = 0; rep < kReps; ++rep) {
    const auto t0 = Clock::now();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> module = BuildGemm(*ctx, s);
    auto tm = CreateHostTargetMachine(/*jit=*/true);
    if (!tm.ok()) {
      std::fprintf(stderr, "%s\n", tm.status().ToString().c_str());
      return false;
    }
    for (llvm::Function& fn : *module) {
      if (!fn.isDeclaration()) ApplyHostAttributes(fn, **tm);
    }
    const auto t1 = Clock::now();
    if (absl::Status st = OptimizeModule(*module, **tm); !st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      return false;
    }
    const auto t2 = Clock::now();
    // Codegen alone at each level, on clones of the optimised module.
    const llvm::CodeGenOpt::Level levels[] = {llvm::CodeGenOpt::None, llvm::CodeGenOpt::Less,
                                              llvm::CodeGenOpt::Default,
                                              llvm::CodeGenOpt::Aggressive};
    for (int l = 0; l < 4; ++l) {
      auto emit_tm = CreateHostTargetMachine(/*jit=*/true);
      (*emit_tm)->setOptLevel(levels[l]);
      if (levels[l] == llvm::CodeGenOpt::None) (*emit_tm)->setFastISel(true);
      llvm::LLVMContext emit_ctx;
      auto clone_ctx = std::make_unique<llvm::LLVMContext>();
      std::unique_ptr<llvm::Module> clone = BuildGemm(*clone_ctx, s);
      for (llvm::Function& fn : *clone) {
        if (!fn.isDeclaration()) ApplyHostAttributes(fn, **emit_tm);
      }
      (void)OptimizeModule(*clone, **emit_tm);
      const auto e0 = Clock::now();
      auto object = EmitObject(*clone, **emit_tm);
      emit_ms[l].push_back(Ms(Clock::now() - e0));
    }
    const auto t3 = Clock::now();
    auto created = JitModule::Create(std::move(module), std::move(ctx));
    if (!created.ok()) {
      std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
      return false;
    }
    const auto t4 = Clock::now();
    build_ms.push_back(Ms(t1 - t0));
    o3_ms.push_back(Ms(t2 - t1));
    jit_ms.push_back(Ms(t4 - t3));
    total_ms.push_back(Ms(t1 - t0) + Ms(t2 - t1) + Ms(t4 - t3));
    jit = std::move(*created);
  }

  // Check and time the kernel.
  std::vector<float> a(size_t(s.m) * s.k), bm(size_t(s.k) * s.n), c(size_t(s.m) * s.n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (float& x : a) x = dist(rng);
  for (float& x : bm) x = dist(rng);
  auto fn = reinterpret_cast<int (*)(void* const*, int)>(*jit->Lookup("gemm"));
  void* args[] = {a.data(), bm.data(), c.data()};
  fn(args, 3);
  double max_err = 0, max_ref = 0;
  for (int i = 0; i < s.m; i += 7) {
    for (int j = 0; j < s.n; j += 5) {
      double ref = 0;
      for (int l = 0; l < s.k; ++l) ref += double(a[size_t(i) * s.k + l]) * bm[size_t(l) * s.n + j];
      max_ref = std::max(max_ref, std::abs(ref));
      max_err = std::max(max_err, std::abs(ref - c[size_t(i) * s.n + j]));
    }
  }
  std::vector<double> run_us;
  using Wall = std::chrono::steady_clock;
  const auto r0 = Wall::now();
  while (Ms(Wall::now() - r0) < 300) {
    const auto q = Wall::now();
    fn(args, 3);
    run_us.push_back(Ms(Wall::now() - q) * 1000);
  }
  const double gflops = 2.0 * s.m * s.n * s.k / (Median(run_us) * 1e-6) / 1e9;
  std::printf(
      "%4dx%4dx%4d tile %dx%d unroll %2d | cpu ms: build %5.1f  O3 %6.1f  jit(codegen O3-agg) "
      "%6.1f  "
      "total %6.1f | emit-only none/fastisel %5.1f less %5.1f default %5.1f aggressive %5.1f "
      "| %6.1f GFLOP/s err %.1e\n",
      s.m, s.n, s.k, s.rows, s.vecs * kVec, s.unroll, Median(build_ms), Median(o3_ms),
      Median(jit_ms), Median(total_ms), Median(emit_ms[0]), Median(emit_ms[1]), Median(emit_ms[2]),
      Median(emit_ms[3]), gflops, max_err / max_ref);
  return max_err / max_ref < 1e-3;
}

}  // namespace

// With arguments `--dump-ir FILE m n k rows vecs unroll`, writes that module before
// optimisation (for opt/llc -time-passes) instead of benchmarking.
int main(int argc, char** argv) {
  if (argc == 9 && std::string(argv[1]) == "--dump-ir") {
    const Shape s{atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                  atoi(argv[6]), atoi(argv[7]), atoi(argv[8])};
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::Module> module = BuildGemm(ctx, s);
    auto tm = CreateHostTargetMachine(/*jit=*/true);
    for (llvm::Function& fn : *module) {
      if (!fn.isDeclaration()) ApplyHostAttributes(fn, **tm);
    }
    std::error_code ec;
    llvm::raw_fd_ostream out(argv[2], ec);
    module->print(out, nullptr);
    return ec ? 1 : 0;
  }
  bool ok = true;
  ok &= Run({512, 512, 512, 4, 1, 4});
  ok &= Run({512, 512, 512, 4, 2, 8});
  ok &= Run({384, 384, 384, 6, 2, 8});
  ok &= Run({384, 384, 384, 6, 4, 8});
  ok &= Run({384, 384, 384, 6, 4, 16});
  ok &= Run({512, 512, 512, 8, 4, 32});
  return ok ? 0 : 1;
}
