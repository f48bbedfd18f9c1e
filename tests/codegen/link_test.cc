// \file
// Tests of the LLVM plumbing under codegen/: a hand-built module that calls the runtime is
// optimised, emitted as an object, linked in-process into a shared library (dlopen'd and
// called) and JIT-compiled.
#include "codegen/link.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "codegen/host.h"
#include "codegen/jit.h"
#include "codegen/llvm_target.h"
#include "gtest/gtest.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace lathe::codegen {
namespace {

namespace fs = std::filesystem;

using KernelFn = int (*)(void* const* args, int num_args);
constexpr int kTasks = 16;
constexpr int kPerTask = 64;
constexpr int kElements = kTasks * kPerTask;

// int add_one(void* const* args, int n): adds 1.0f to the kElements floats at args[0], in
// kTasks tasks run by lathe_parallel_for; returns 1 when n != 1. With `call_missing`, it also
// calls an external function that nothing defines.
std::unique_ptr<llvm::Module> BuildAddOne(llvm::LLVMContext& ctx, bool call_missing) {
  auto module = std::make_unique<llvm::Module>("add_one_module", ctx);
  llvm::IRBuilder<> b(ctx);
  llvm::Type* i8p = b.getInt8PtrTy();
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* f32 = b.getFloatTy();

  // int add_one_task(int64_t task, void* closure)
  auto* task_type = llvm::FunctionType::get(i32, {i64, i8p}, false);
  auto* task = llvm::Function::Create(task_type, llvm::Function::InternalLinkage, "add_one_task",
                                      module.get());
  {
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", task);
    auto* loop = llvm::BasicBlock::Create(ctx, "loop", task);
    auto* exit = llvm::BasicBlock::Create(ctx, "exit", task);
    b.SetInsertPoint(entry);
    llvm::Value* data = b.CreateBitCast(task->getArg(1), f32->getPointerTo());
    llvm::Value* base = b.CreateMul(task->getArg(0), b.getInt64(kPerTask));
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    llvm::PHINode* i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(b.getInt64(0), entry);
    llvm::Value* ptr = b.CreateInBoundsGEP(f32, data, b.CreateAdd(base, i));
    llvm::Value* value = b.CreateFAdd(b.CreateLoad(f32, ptr), llvm::ConstantFP::get(f32, 1.0));
    b.CreateStore(value, ptr);
    llvm::Value* next = b.CreateAdd(i, b.getInt64(1));
    i->addIncoming(next, loop);
    b.CreateCondBr(b.CreateICmpULT(next, b.getInt64(kPerTask)), loop, exit);
    b.SetInsertPoint(exit);
    b.CreateRet(b.getInt32(0));
  }

  auto* parallel_for_type =
      llvm::FunctionType::get(i32, {i64, task_type->getPointerTo(), i8p}, false);
  llvm::FunctionCallee parallel_for =
      module->getOrInsertFunction("lathe_parallel_for", parallel_for_type);

  auto* kernel_type = llvm::FunctionType::get(i32, {i8p->getPointerTo(), i32}, false);
  auto* kernel =
      llvm::Function::Create(kernel_type, llvm::Function::ExternalLinkage, "add_one", module.get());
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", kernel);
  auto* bad = llvm::BasicBlock::Create(ctx, "bad_args", kernel);
  auto* run = llvm::BasicBlock::Create(ctx, "run", kernel);
  b.SetInsertPoint(entry);
  b.CreateCondBr(b.CreateICmpNE(kernel->getArg(1), b.getInt32(1)), bad, run);
  b.SetInsertPoint(bad);
  b.CreateRet(b.getInt32(1));
  b.SetInsertPoint(run);
  llvm::Value* buffer = b.CreateLoad(i8p, kernel->getArg(0));
  if (call_missing) {
    llvm::FunctionCallee missing = module->getOrInsertFunction(
        "lathe_missing_symbol", llvm::FunctionType::get(b.getVoidTy(), false));
    b.CreateCall(missing);
  }
  b.CreateRet(b.CreateCall(parallel_for, {b.getInt64(kTasks), task, buffer}));
  return module;
}

absl::StatusOr<std::string> CompileToObject(bool call_missing) {
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> module = BuildAddOne(ctx, call_missing);
  auto tm = CreateHostTargetMachine(/*jit=*/false);
  if (!tm.ok()) return tm.status();
  for (llvm::Function& fn : *module) {
    if (!fn.isDeclaration()) ApplyHostAttributes(fn, **tm);
  }
  if (absl::Status s = OptimizeModule(*module, **tm); !s.ok()) return s;
  return EmitObject(*module, **tm);
}

void CheckAddOne(KernelFn fn) {
  std::vector<float> data(kElements);
  for (int i = 0; i < kElements; ++i) data[i] = static_cast<float>(i);
  void* args[] = {data.data()};
  EXPECT_EQ(fn(args, 2), 1);  // wrong argument count: nothing touched
  EXPECT_EQ(data[5], 5.0f);
  ASSERT_EQ(fn(args, 1), 0);
  for (int i = 0; i < kElements; ++i) ASSERT_EQ(data[i], static_cast<float>(i) + 1.0f) << i;
}

class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lathe-link-test-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST(HostTest, DetectsTheCpu) {
  const CpuInfo& info = HostCpu();
  EXPECT_EQ(&info, &HostCpu());  // cached
  EXPECT_FALSE(info.model.empty());
  EXPECT_FALSE(info.llvm_cpu.empty());
  EXPECT_GE(info.cores, 1);
  EXPECT_TRUE(info.vector_bits == 128 || info.vector_bits == 256 || info.vector_bits == 512);
  const bool avx512 =
      std::find(info.features.begin(), info.features.end(), "+avx512f") != info.features.end();
  EXPECT_EQ(avx512, info.isa == "avx512");
  if (avx512) {
    EXPECT_EQ(info.vector_bits, 512);
  }
  EXPECT_GT(info.l1d_bytes, 0);
  const std::string device_class = HostDeviceClass();
  EXPECT_EQ(device_class.rfind("cpu:", 0), 0u) << device_class;
  EXPECT_NE(device_class.find(":" + info.isa + ":"), std::string::npos) << device_class;
  EXPECT_EQ(device_class.find("  "), std::string::npos) << device_class;
  std::printf("host: %s (llvm cpu %s, %d-bit vectors, L1d %lld, L2 %lld, L3 %lld)\n",
              device_class.c_str(), info.llvm_cpu.c_str(), info.vector_bits,
              static_cast<long long>(info.l1d_bytes), static_cast<long long>(info.l2_bytes),
              static_cast<long long>(info.l3_bytes));
}

TEST(HostTest, DeviceClassCollapsesWhitespace) {
  CpuInfo info;
  info.model = "  Some   CPU\t@ 2.0GHz ";
  info.isa = "avx2";
  info.cores = 4;
  EXPECT_EQ(CpuDeviceClass(info), "cpu:Some CPU @ 2.0GHz:avx2:4c");
}

TEST(RuntimeObjectTest, IsAnElfObject) {
  const std::string_view bytes = RuntimeObjectBytes();
  ASSERT_GT(bytes.size(), 64u);
  EXPECT_EQ(bytes.substr(0, 4), std::string_view("\x7f"
                                                 "ELF",
                                                 4));
}

using LinkTest = TempDirTest;

TEST_F(LinkTest, SharedLibraryRunsAndNeedsOnlyLibc) {
  absl::StatusOr<std::string> object = CompileToObject(/*call_missing=*/false);
  ASSERT_TRUE(object.ok()) << object.status();
  const std::string so = (dir_ / "libadd_one.so").string();
  absl::Status status = LinkSharedLibrary({*object}, so);
  ASSERT_TRUE(status.ok()) << status;

  absl::StatusOr<std::vector<std::string>> needed = SharedLibraryNeeded(so);
  ASSERT_TRUE(needed.ok()) << needed.status();
  EXPECT_NE(std::find(needed->begin(), needed->end(), "libc.so.6"), needed->end());
  for (const std::string& lib : *needed) {
    EXPECT_TRUE(lib == "libc.so.6" || lib == "libm.so.6") << "unexpected DT_NEEDED " << lib;
  }
  // Only the kernel's temporary files were used: nothing else left next to the output.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);

  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  auto fn = reinterpret_cast<KernelFn>(dlsym(handle, "add_one"));
  ASSERT_NE(fn, nullptr);
  CheckAddOne(fn);
  // The embedded runtime is hidden; the task function is internal.
  EXPECT_EQ(dlsym(handle, "lathe_parallel_for"), nullptr);
  EXPECT_EQ(dlsym(handle, "add_one_task"), nullptr);
  // Safe to call from several threads at once.
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([fn] { CheckAddOne(fn); });
  for (std::thread& thread : threads) thread.join();
  dlclose(handle);
}

TEST_F(LinkTest, UndefinedSymbolIsAnError) {
  absl::StatusOr<std::string> object = CompileToObject(/*call_missing=*/true);
  ASSERT_TRUE(object.ok()) << object.status();
  const std::string so = (dir_ / "libbroken.so").string();
  absl::Status status = LinkSharedLibrary({*object}, so);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("lathe_missing_symbol"), std::string::npos) << status;
  EXPECT_FALSE(fs::exists(so));
}

TEST_F(LinkTest, RejectsNoObjectsAndGarbage) {
  EXPECT_EQ(LinkSharedLibrary({}, (dir_ / "a.so").string()).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status status = LinkSharedLibrary({"not an object file"}, (dir_ / "b.so").string());
  EXPECT_FALSE(status.ok());
  EXPECT_FALSE(fs::exists(dir_ / "b.so"));
}

TEST_F(LinkTest, LinksRepeatedly) {
  absl::StatusOr<std::string> object = CompileToObject(/*call_missing=*/false);
  ASSERT_TRUE(object.ok()) << object.status();
  for (int i = 0; i < 5; ++i) {
    const std::string so = (dir_ / ("librepeat" + std::to_string(i) + ".so")).string();
    ASSERT_TRUE(LinkSharedLibrary({*object}, so).ok());
  }
}

absl::StatusOr<std::unique_ptr<JitModule>> JitAddOne() {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module = BuildAddOne(*ctx, /*call_missing=*/false);
  auto tm = CreateHostTargetMachine(/*jit=*/true);
  if (!tm.ok()) return tm.status();
  for (llvm::Function& fn : *module) {
    if (!fn.isDeclaration()) ApplyHostAttributes(fn, **tm);
  }
  if (absl::Status s = OptimizeModule(*module, **tm); !s.ok()) return s;
  return JitModule::Create(std::move(module), std::move(ctx));
}

TEST(JitTest, CompilesAndRuns) {
  absl::StatusOr<std::unique_ptr<JitModule>> jit = JitAddOne();
  ASSERT_TRUE(jit.ok()) << jit.status();
  absl::StatusOr<void*> fn = (*jit)->Lookup("add_one");
  ASSERT_TRUE(fn.ok()) << fn.status();
  CheckAddOne(reinterpret_cast<KernelFn>(*fn));
  EXPECT_EQ((*jit)->Lookup("no_such_function").status().code(), absl::StatusCode::kNotFound);
}

TEST(JitTest, UnresolvedSymbolFailsAtCreate) {
  auto ctx = std::make_unique<llvm::LLVMContext>();
  std::unique_ptr<llvm::Module> module = BuildAddOne(*ctx, /*call_missing=*/true);
  absl::StatusOr<std::unique_ptr<JitModule>> jit =
      JitModule::Create(std::move(module), std::move(ctx));
  ASSERT_FALSE(jit.ok());
  EXPECT_NE(jit.status().message().find("lathe_missing_symbol"), std::string::npos) << jit.status();
}

TEST(JitTest, ManyJitsInParallel) {
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&failures] {
      for (int i = 0; i < 3; ++i) {
        absl::StatusOr<std::unique_ptr<JitModule>> jit = JitAddOne();
        if (!jit.ok()) {
          failures.fetch_add(1);
          continue;
        }
        absl::StatusOr<void*> fn = (*jit)->Lookup("add_one");
        if (!fn.ok()) {
          failures.fetch_add(1);
          continue;
        }
        CheckAddOne(reinterpret_cast<KernelFn>(*fn));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace lathe::codegen
