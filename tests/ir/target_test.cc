// Targets parsed once: every accepted form, its canonical text, the refusals, and the kinds
// of device classes.
#include "ir/target.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lathe::ir {
namespace {

using ::testing::HasSubstr;

TEST(TargetTest, ParsesEveryForm) {
  auto cpu = ParseTarget("cpu");
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu->kind, TargetKind::kCpu);
  EXPECT_FALSE(cpu->is_gpu());
  EXPECT_EQ(cpu->ToString(), "cpu");

  auto cuda = ParseTarget("cuda");
  ASSERT_TRUE(cuda.ok());
  EXPECT_EQ(cuda->kind, TargetKind::kCuda);
  EXPECT_EQ(cuda->ordinal, 0);
  EXPECT_EQ(cuda->ToString(), "cuda:0");

  auto gpu3 = ParseTarget("cuda:3");
  ASSERT_TRUE(gpu3.ok());
  EXPECT_EQ(gpu3->ordinal, 3);
  EXPECT_TRUE(gpu3->arch.empty());

  for (const char* arch : {"sm_80", "sm_90a", "sm_100", "sm_120f"}) {
    auto t = ParseTarget(std::string("cuda:") + arch);
    ASSERT_TRUE(t.ok()) << arch;
    EXPECT_EQ(t->kind, TargetKind::kCuda);
    EXPECT_EQ(t->ordinal, -1);
    EXPECT_EQ(t->arch, arch);
    EXPECT_EQ(t->ToString(), std::string("cuda:") + arch);
  }

  auto emu = ParseTarget("cuda-emu:sm_90");
  ASSERT_TRUE(emu.ok());
  EXPECT_TRUE(emu->emulated());
  EXPECT_TRUE(emu->is_gpu());
  EXPECT_EQ(emu->arch, "sm_90");
  EXPECT_EQ(emu->ToString(), "cuda-emu:sm_90");
  // Code for the emulator is built for the architecture it emulates.
  EXPECT_EQ(emu->Built().ToString(), "cuda:sm_90");
  EXPECT_EQ(cuda->Built(), *cuda);
}

TEST(TargetTest, RefusesMalformedTargetsNamingThem) {
  for (const char* bad :
       {"", "gpu", "CPU", "cudax", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "cuda:sm_9",
        "cuda:sm_9000", "cuda:sm_90b", "cuda-emu:", "cuda-emu:3", "cuda-emu:sm_", "cpu:"}) {
    auto t = ParseTarget(bad);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(t.status().message(), HasSubstr(std::string("'") + bad + "'")) << bad;
  }
}

TEST(TargetTest, DeviceClassesByKind) {
  EXPECT_EQ(*DeviceClassKind("cpu:AMD EPYC:avx512:2c"), TargetKind::kCpu);
  EXPECT_EQ(*DeviceClassKind("cuda:NVIDIA H100 80GB HBM3 (sm_90)"), TargetKind::kCuda);
  EXPECT_EQ(*DeviceClassKind("cuda-emu:sm_90"), TargetKind::kCudaEmu);
  EXPECT_FALSE(DeviceClassKind("tpu:v5").ok());

  auto gpu = TargetOfDeviceClass("cuda:NVIDIA H100 80GB HBM3 (sm_90)");
  ASSERT_TRUE(gpu.ok());
  EXPECT_EQ(gpu->ToString(), "cuda:sm_90");
  auto emu = TargetOfDeviceClass("cuda-emu:sm_86");
  ASSERT_TRUE(emu.ok());
  EXPECT_TRUE(emu->emulated());
  EXPECT_EQ(TargetOfDeviceClass("cpu:AMD EPYC:avx2:2c")->kind, TargetKind::kCpu);
  auto no_arch = TargetOfDeviceClass("cuda:Some GPU");
  ASSERT_FALSE(no_arch.ok());
  EXPECT_THAT(no_arch.status().message(), HasSubstr("names no architecture"));
  EXPECT_FALSE(TargetOfDeviceClass("cuda:GPU (sm_x)").ok());
}

}  // namespace
}  // namespace lathe::ir
