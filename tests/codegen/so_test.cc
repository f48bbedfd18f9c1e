// Shared libraries written by the CPU backend: self-contained, correct, the C ABI honoured
// (wrong num_args refused without touching memory), safe to call from several threads.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cpu_kernel.h"
#include "codegen/link.h"
#include "codegen/lower.h"
#include "ir/check.h"
#include "ir/reference.h"
#include "ir/schedule.h"

namespace lathe {
namespace {

class SharedLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lathe_so_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (handle_) dlclose(handle_);
    std::system(("rm -rf " + dir_).c_str());
  }
  codegen::KernelFn BuildSo(const ir::Schedule& sch, const std::string& name) {
    auto f = codegen::Lower(sch, name);
    EXPECT_TRUE(f.ok()) << f.status();
    std::string path = dir_ + "/k.so";
    absl::Status st = codegen::WriteSharedLibrary({*f}, path);
    EXPECT_TRUE(st.ok()) << st;
    auto needed = codegen::SharedLibraryNeeded(path);
    EXPECT_TRUE(needed.ok()) << needed.status();
    for (const std::string& n : *needed) {
      EXPECT_TRUE(n == "libc.so.6" || n == "libm.so.6" || n == "libpthread.so.0") << n;
    }
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle_, nullptr) << dlerror();
    return handle_ ? reinterpret_cast<codegen::KernelFn>(dlsym(handle_, name.c_str())) : nullptr;
  }
  std::string dir_;
  void* handle_ = nullptr;
};

ir::Schedule TiledMatmul(const ir::Workload& w) {
  ir::Schedule s(w);
  EXPECT_TRUE(s.CacheWrite("C", "local").ok());
  EXPECT_TRUE(s.Split("C", "i", {4}).ok());
  EXPECT_TRUE(s.Split("C", "j", {8}).ok());
  EXPECT_TRUE(s.Reorder("C", {"i.0", "j.0", "i.1", "j.1"}).ok());
  EXPECT_TRUE(s.Parallel("C", "i.0").ok());
  EXPECT_TRUE(s.Vectorize("C", "j.1").ok());
  EXPECT_TRUE(s.ComputeAt("C.local", "C", "j.0").ok());
  EXPECT_TRUE(s.Reorder("C.local", {"k", "i", "j"}).ok());
  EXPECT_TRUE(s.Vectorize("C.local", "j").ok());
  return s;
}

TEST_F(SharedLibraryTest, TiledMatmulIsCorrectAndHonoursTheAbi) {
  auto w = ir::MakeWorkload("matmul:m=37,n=45,k=29,epilogue=bias_relu");
  ASSERT_TRUE(w.ok()) << w.status();
  ir::Schedule s(*w);
  ASSERT_TRUE(s.ComputeInline("C").ok() == false);  // the output cannot be inlined
  codegen::KernelFn fn = BuildSo(s, "mm");
  ASSERT_NE(fn, nullptr);

  auto args = ir::AllocateArgs(*w);
  ir::FillRandomInputs(args, 3);
  auto ref = args;
  ASSERT_TRUE(ir::ComputeReference(*w, ref).ok());
  std::vector<void*> ptrs;
  for (auto& a : args) ptrs.push_back(a.data());
  std::fill(args.back().begin(), args.back().end(), 777.0f);
  EXPECT_NE(fn(ptrs.data(), 3), 0);
  EXPECT_NE(fn(ptrs.data(), 5), 0);
  EXPECT_NE(fn(nullptr, 4), 0);
  for (float v : args.back()) ASSERT_EQ(v, 777.0f) << "a refused call touched the output";
  ASSERT_EQ(fn(ptrs.data(), 4), 0);
  EXPECT_TRUE(ir::CheckOutput(args.back(), ref.back(), w->output()->shape).ok());
}

TEST_F(SharedLibraryTest, ConcurrentCallsAgreeWithTheReference) {
  auto w = ir::MakeWorkload("matmul:m=64,n=72,k=33");
  ASSERT_TRUE(w.ok());
  codegen::KernelFn fn = BuildSo(TiledMatmul(*w), "tiled");
  ASSERT_NE(fn, nullptr);
  auto inputs = ir::AllocateArgs(*w);
  ir::FillRandomInputs(inputs, 11);
  auto ref = inputs;
  ASSERT_TRUE(ir::ComputeReference(*w, ref).ok());
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<float>>> per(kThreads, inputs);
  std::vector<int> rc(kThreads, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<void*> p;
      for (auto& a : per[t]) p.push_back(a.data());
      for (int rep = 0; rep < 20 && rc[t] <= 0; ++rep) rc[t] = fn(p.data(), 3);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(rc[t], 0);
    EXPECT_TRUE(ir::CheckOutput(per[t].back(), ref.back(), w->output()->shape).ok()) << t;
  }
}

}  // namespace
}  // namespace lathe
