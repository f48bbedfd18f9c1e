// The lathe CLI as a user runs it: exit codes and outputs of `lathe build` and friends.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/tools/run_lathe.h"

namespace {

using Result = lathe::testing::CliResult;
using lathe::testing::Lathe;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lathe_cli_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

// `--db` takes a SQLite path or a postgresql:// URL; a URL is never taken for a path (no
// "postgresql:" or "foo:" directory appears), and an unknown scheme is a usage error naming it.
TEST_F(CliTest, DbUrlsAreNeverFilePaths) {
  const std::string in_dir = "cd " + dir_ + " &&";
  for (const std::string args :
       {"query --workload matmul:m=8,n=8,k=8 --db foo://x/t.db", "db stats --db mysql://h/lathe",
        "tune --workload matmul:m=8,n=8,k=8 --trials 1 --db foo://x"}) {
    Result r = Lathe(args, in_dir);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("scheme"), std::string::npos) << args << ": " << r.out;
  }
  // A server that is not there: a failure (exit 1) that names the database, and no file.
  Result r = Lathe("query --workload matmul:m=8,n=8,k=8 --db 'postgresql:///lathe?host=" + dir_ +
                       "&connect_timeout=2'",
                   in_dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("postgresql:///lathe"), std::string::npos) << r.out;
#ifdef LATHED_BIN
  // lathed used to create a SQLite file in a new directory named "postgresql:".
  std::string cmd = in_dir + " timeout 60 " + std::string(LATHED_BIN) +
                    " --listen 127.0.0.1:0 --db 'postgresql:///lathe?host=" + dir_ +
                    "&connect_timeout=2' >/dev/null 2>&1";
  int st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  cmd =
      in_dir + " " + std::string(LATHED_BIN) + " --listen 127.0.0.1:0 --db foo://x >/dev/null 2>&1";
  st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << st;
#endif
  EXPECT_TRUE(std::filesystem::is_empty(dir_)) << "something was created for a URL";
}

TEST_F(CliTest, BuildDefaultScheduleWritesAWorkingLibrary) {
  std::string so = dir_ + "/mm.so";
  Result r = Lathe("build --workload matmul:m=8,n=8,k=8 --schedule default --name mm --out " + so);
  ASSERT_EQ(r.code, 0) << r.out;
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto fn = reinterpret_cast<int (*)(void* const*, int)>(dlsym(h, "mm"));
  ASSERT_NE(fn, nullptr);
  float a[64], b[64], c[64];
  for (int i = 0; i < 64; ++i) {
    a[i] = (i % 8 == i / 8) ? 1.0f : 0.0f;  // identity
    b[i] = static_cast<float>(i);
  }
  void* args[] = {a, b, c};
  ASSERT_EQ(fn(args, 3), 0);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(c[i], b[i]);
  dlclose(h);
}

// --schedule rule: the space's rule-picked first candidate, no database needed (a depthwise
// 5x5 window unrolled whole, no guarded second copy of it; its padding inlined, no copy at
// root); an unknown --schedule is a usage error.
// (20 channels: no whole vector of them on AVX2 or AVX-512, so the rule vectorizes the columns.)
TEST_F(CliTest, BuildTheRulePickedSchedule) {
  Result r = Lathe(
      "build --workload conv2d:n=1,c=20,h=28,w=28,k=20,r=5,s=5,pad=2,groups=20 --schedule rule "
      "--emit lowered --db " +
      dir_ + "/none.db --out " + dir_ + "/dw.txt");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = ReadText(dir_ + "/dw.txt");
  EXPECT_NE(text.find("parallel"), std::string::npos) << text;
  EXPECT_NE(text.find("ramp("), std::string::npos) << text;
  EXPECT_NE(text.find("unrolled Y.local.rx in 0..5"), std::string::npos) << text;
  EXPECT_EQ(text.find("alloc pad"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/none.db"));
  // --emit trace: the same schedule as a trace file, which --trace builds again.
  r = Lathe(
      "build --workload conv2d:n=1,c=20,h=28,w=28,k=20,r=5,s=5,pad=2,groups=20 --schedule rule "
      "--emit trace --out " +
      dir_ + "/dw.json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = Lathe("build --workload conv2d:n=1,c=20,h=28,w=28,k=20,r=5,s=5,pad=2,groups=20 --trace " +
            dir_ + "/dw.json --emit lowered --out " + dir_ + "/dw2.txt");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string again = ReadText(dir_ + "/dw2.txt");
  EXPECT_EQ(again, text);
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --schedule best --out " + dir_ + "/x.so");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("expected default, rule or rule:N"), std::string::npos) << r.out;
  // rule:N: the N-th rule-picked candidate; past the last one, a clear failure.
  r = Lathe("build --workload matmul:m=64,n=64,k=64 --schedule rule:2 --emit lowered --out " +
            dir_ + "/m2.txt");
  EXPECT_EQ(r.code, 0) << r.out;
  r = Lathe("build --workload matmul:m=64,n=64,k=64 --schedule rule:999 --out " + dir_ + "/m.so");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("rule-picked candidates, not 999"), std::string::npos) << r.out;
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --schedule rule:0 --out " + dir_ + "/m.so");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST_F(CliTest, BuildFromTheShippedTraceAndEmitLlvm) {
  Result r = Lathe("build --workload matmul:m=1024,n=1024,k=1024 --trace " LATHE_SOURCE_DIR
                   "/examples/traces/matmul-1024.json --emit llvm --out " +
                   dir_ + "/g.ll");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = ReadText(dir_ + "/g.ll");
  EXPECT_NE(text.find("define"), std::string::npos);
  EXPECT_NE(text.find("lathe_parallel_for"), std::string::npos);
}

// --emit lowered: the loop program after lowering, as a reader of a schedule wants to see it
// (the shipped trace's parallel and vectorized loops, vector accesses as ramps).
TEST_F(CliTest, EmitLoweredPrintsTheLoopProgram) {
  Result r = Lathe("build --workload matmul:m=1024,n=1024,k=1024 --trace " LATHE_SOURCE_DIR
                   "/examples/traces/matmul-1024.json --emit lowered --name mm --out " +
                   dir_ + "/g.txt");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = ReadText(dir_ + "/g.txt");
  EXPECT_EQ(text.rfind("func mm(", 0), 0u) << text.substr(0, 200);
  EXPECT_NE(text.find("parallel "), std::string::npos);
  EXPECT_NE(text.find("ramp("), std::string::npos);
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --schedule default --emit tir --out " + dir_ +
            "/x.txt");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("lowered"), std::string::npos) << r.out;
}

TEST_F(CliTest, BadUsageExitsTwoNamingTheProblem) {
  Result r = Lathe("build --workload matmul:m=8,n=8 --schedule default --out " + dir_ + "/x.so");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("'k'"), std::string::npos) << r.out;
  r = Lathe("build --workload conv3d:n=1 --schedule default --out " + dir_ + "/x.so");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("conv3d"), std::string::npos) << r.out;
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --schedule fast --out " + dir_ + "/x.so");
  EXPECT_EQ(r.code, 2);
  r = Lathe("build --out x.so");
  EXPECT_EQ(r.code, 2);
  r = Lathe("frobnicate");
  EXPECT_EQ(r.code, 2);
}

TEST_F(CliTest, TraceForAnotherWorkloadOrMalformedTraceFailsWithOne) {
  Result r = Lathe("build --workload matmul:m=8,n=8,k=8 --trace " LATHE_SOURCE_DIR
                   "/examples/traces/matmul-1024.json --out " +
                   dir_ + "/x.so");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("not 'matmul"), std::string::npos) << r.out;
  std::ofstream(dir_ + "/bad.json") << "{\"version\": 1, \"instructions\": [{\"kind\": \"split\", "
                                       "\"stage\": \"C\", \"loops\": [\"i\"], \"factors\": [0]}]}";
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --trace " + dir_ + "/bad.json --out " + dir_ +
            "/x.so");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("split"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("factor 0"), std::string::npos) << r.out;
  EXPECT_EQ(access((dir_ + "/x.so").c_str(), F_OK), -1) << "no output on failure";
}

TEST_F(CliTest, BuildFromAnEmptyDatabaseExitsThree) {
  Result r = Lathe("build --workload matmul:m=8,n=8,k=8 --db " + dir_ + "/none.db --out " + dir_ +
                   "/x.so");
  EXPECT_EQ(r.code, 3) << r.out;
  r = Lathe("query --workload matmul:m=8,n=8,k=8 --db " + dir_ + "/none.db");
  EXPECT_EQ(r.code, 3) << r.out;
}

// $LATHE_CPU_ISA=avx2 caps the code below the host's ISA: AVX2 instructions only (no AVX-512
// feature, 8-lane vectors), records of their own device class; a value it cannot honour is a
// usage error naming it.
TEST_F(CliTest, CpuIsaCapBuildsAndTunesForAvx2) {
  Result r =
      Lathe("build --workload matmul:m=8,n=8,k=8 --out " + dir_ + "/x.so", "LATHE_CPU_ISA=sse");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("LATHE_CPU_ISA=sse: expected host, avx2 or avx512"), std::string::npos)
      << r.out;
  if (!__builtin_cpu_supports("avx512f")) {
    r = Lathe("query --workload matmul:m=8,n=8,k=8 --db " + dir_ + "/none.db",
              "LATHE_CPU_ISA=avx512");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("has no avx512"), std::string::npos) << r.out;
  }
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "this CPU has no AVX2 and FMA";
  }
  const std::string mm = "matmul:m=64,n=64,k=64";
  r = Lathe("build --workload " + mm + " --schedule rule --emit llvm --out " + dir_ + "/mm.ll",
            "LATHE_CPU_ISA=avx2");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string ir = ReadText(dir_ + "/mm.ll");
  EXPECT_NE(ir.find("-avx512f"), std::string::npos) << ir.substr(0, 2000);
  EXPECT_EQ(ir.find("+avx512"), std::string::npos);
  EXPECT_EQ(ir.find("\"prefer-vector-width\"=\"512\""), std::string::npos);
  // Tuned under the cap: measured in AVX2 code, recorded for the AVX2 class of this CPU.
  const std::string db = dir_ + "/t.db";
  r = Lathe("tune --workload " + mm + " --trials 4 --batch 4 --no-baseline --remeasure-top 0 " +
                "--min-repeat-ms 5 --seed 1 --db " + db,
            "LATHE_CPU_ISA=avx2");
  ASSERT_EQ(r.code, 0) << r.out;
  r = Lathe("query --workload " + mm + " --json --db " + db, "LATHE_CPU_ISA=avx2", false);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(":avx2:"), std::string::npos) << r.out;
  if (__builtin_cpu_supports("avx512f")) {
    // The host's own class has no record: the AVX2 one is not taken for it.
    r = Lathe("query --workload " + mm + " --db " + db);
    EXPECT_EQ(r.code, 3) << r.out;
  }
}

}  // namespace

namespace {

#ifdef LATHE_HAVE_CUDA_BACKEND
TEST_F(CliTest, CudaBuildsWithoutAGpu) {
  Result r = Lathe(
      "build --workload matmul:m=64,n=64,k=64 --target cuda:sm_80 --emit ptx "
      "--schedule default --out " +
      dir_ + "/mm.ptx");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = ReadText(dir_ + "/mm.ptx");
  EXPECT_NE(text.find(".target sm_80"), std::string::npos) << text.substr(0, 400);
  r = Lathe(
      "build --workload softmax:m=8,n=40 --target cuda:sm_90 --emit cuda --schedule default "
      "--out " +
      dir_ + "/sm.cu");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string src = ReadText(dir_ + "/sm.cu");
  EXPECT_NE(src.find("__global__"), std::string::npos);
  r = Lathe(
      "build --workload matmul:m=8,n=8,k=8 --target cuda:sm_80 --emit so --schedule default "
      "--out " +
      dir_ + "/x.so");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Lathe("build --workload matmul:m=8,n=8,k=8 --target tpu --schedule default --out " + dir_ +
            "/x.so");
  EXPECT_EQ(r.code, 2) << r.out;
}

// --gpu-math tf32 lets the GPU rule pick the tensor-core template; the trace says so.
TEST_F(CliTest, CudaRuleTraceWithTf32) {
  const std::string mm = "matmul:m=1024,n=1024,k=1024";
  Result r = Lathe("build --workload " + mm +
                   " --target cuda:sm_90 --schedule rule --gpu-math tf32 --emit trace --out " +
                   dir_ + "/tf32.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(ReadText(dir_ + "/tf32.json").find("contraction_mma_tf32"), std::string::npos);
  r = Lathe("build --workload " + mm + " --target cuda:sm_90 --schedule rule --emit trace --out " +
            dir_ + "/fp32.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(ReadText(dir_ + "/fp32.json").find("contraction_mma_tf32"), std::string::npos);
  // tf32 without a rule to pick, or on the CPU: a usage error.
  r = Lathe("build --workload " + mm + " --target cuda:sm_90 --schedule default --gpu-math tf32 " +
            "--emit cuda --out " + dir_ + "/x.cu");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Lathe("build --workload " + mm + " --schedule rule --gpu-math tf32 --out " + dir_ + "/x.so");
  EXPECT_EQ(r.code, 2) << r.out;
}
#endif

}  // namespace
