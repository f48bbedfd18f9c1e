// `lathe verify` as a user runs it: GPU schedules checked by NVRTC, ptxas and the emulator,
// exit 0 only when all agree, 1 naming the failing schedule, 2 for usage errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/tools/run_lathe.h"

namespace {

using Result = lathe::testing::CliResult;
using lathe::testing::Lathe;

bool CanEmulate() {
  // The emulator compiles with the host C++ compiler; NVRTC is built in.
  return std::system("command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1") == 0;
}

#ifdef LATHE_HAVE_CUDA_BACKEND

class CliVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CanEmulate()) GTEST_SKIP() << "no host C++ compiler for the GPU emulator";
    char tmpl[] = "/tmp/lathe_verify_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  std::string dir_;
};

TEST_F(CliVerifyTest, DefaultScheduleAgreesAndShowsPtxasFigures) {
  Result r = Lathe("verify --target cuda:sm_90 --workload matmul:m=33,n=20,k=9,epilogue=bias_relu");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("default: ok: candidate_k0: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" registers, 0 bytes spilled"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blocks/SM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 of 1 schedules agree"), std::string::npos) << r.out;
}

TEST_F(CliVerifyTest, RandomCandidatesAsJson) {
  Result r =
      Lathe("verify --target cuda:sm_80 --workload softmax:m=5,n=17 --random 3 --seed 7 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"agree\":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"total\":3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"schedule\":\"random 3\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"registers\":"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"trace\":{"), std::string::npos) << r.out;
}

TEST_F(CliVerifyTest, ARefusedScheduleExitsOneNamingIt) {
  // A trace that binds nothing to the GPU: no CUDA for it.
  std::string trace = dir_ + "/t.json";
  std::ofstream(trace) << R"({"version":1,"workload":"matmul:epilogue=none,k=8,m=8,n=8",)"
                          R"("target":"cuda","instructions":[]})";
  Result r = Lathe("verify --target cuda:sm_90 --workload matmul:m=8,n=8,k=8 --trace " + trace);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("lathe verify: " + trace + ": invalid schedule: "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("not bound to GPU"), std::string::npos) << r.out;
}

TEST_F(CliVerifyTest, UsageErrorsExitTwo) {
  Result r = Lathe("verify --target cuda:0 --workload matmul:m=8,n=8,k=8");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cuda:sm_XX"), std::string::npos) << r.out;
  r = Lathe("verify --target cuda:sm_90 --workload matmul:m=8,n=8");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Lathe(
      "verify --target cuda:sm_90 --workload matmul:m=8,n=8,k=8 --random 2 --schedule default");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("mutually exclusive"), std::string::npos) << r.out;
  r = Lathe("verify --workload matmul:m=8,n=8,k=8");
  EXPECT_EQ(r.code, 2) << r.out;
}

// `--gpu-math tf32`: the rule is the TF32 tensor-core GEMM (mma.sync on the emulator), checked
// within the TF32 tolerance; fp32 (the default) never uses it; a convolution's rule is the
// implicit GEMM; other values are usage errors.
TEST_F(CliVerifyTest, GpuMathTf32RuleIsTheTensorCoreGemm) {
  // Contractions large enough for the register-tiled rules (a block per SM of an H100 with
  // 32x32 tiles, K >= 256); smaller ones get the flat mapping first.
  Result r = Lathe(
      "verify --target cuda:sm_90 --workload matmul:m=384,n=384,k=256 --schedule rule "
      "--gpu-math tf32 --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"gpu_math\":\"tf32\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("contraction_mma_tf32"), std::string::npos) << r.out;
  r = Lathe(
      "verify --target cuda:sm_90 --workload matmul:m=384,n=384,k=256 --schedule rule --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("contraction_mma_tf32"), std::string::npos) << r.out;
  r = Lathe(
      "verify --target cuda:sm_90 --workload conv2d:n=1,c=32,h=48,w=48,k=64,r=3,s=3,pad=1 "
      "--schedule rule --json");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("contraction_fma"), std::string::npos) << r.out;
  r = Lathe("verify --target cuda:sm_90 --workload matmul:m=8,n=8,k=8 --gpu-math fp16");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST_F(CliVerifyTest, NoHostCompilerIsAClearFailure) {
  Result r = Lathe("verify --target cuda:sm_90 --workload matmul:m=8,n=8,k=8",
                   "LATHE_EMU_CXX=/nonexistent/c++");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("cannot verify on this machine"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("LATHE_EMU_CXX='/nonexistent/c++' is not an executable file"),
            std::string::npos)
      << r.out;
}

#endif  // LATHE_HAVE_CUDA_BACKEND

}  // namespace
