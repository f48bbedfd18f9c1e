// The GPU model compiler's schedule source (tools/cli_gpu_model.h): records of one GPU device
// class hold TF32 and fp32 kernels alike; a model run without TF32 (`--gpu-math fp32`, the
// default) takes the fastest fp32 record of a workload whose best record uses TF32, and the
// rule only where no fp32 record replays. With TF32 allowed the best record wins.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "codegen/cuda/contraction.h"
#include "db/database.h"
#include "ir/workload.h"
#include "proto/trace_io.h"
#include "tools/cli_gpu_model.h"

namespace lathe::tools {
namespace {

namespace cuda = codegen::cuda;

db::Record MakeRecord(const ir::Workload& w, const std::string& id, const std::string& tmpl,
                      const std::vector<int64_t>& params, double us) {
  ir::Schedule s(w, "cuda");
  EXPECT_TRUE(s.Tensorize("C", tmpl, params).ok());
  db::Record r;
  r.candidate_id = id;
  r.workload = w.canonical;
  r.workload_key = w.key;
  r.device_class = "cuda:sm_90:test";
  r.trace_json = traceio::TraceToJson(s.trace());
  r.repeats_us = {us, us, us};
  r.median_us = us;
  return r;
}

std::string Template(const ir::Schedule& s) {
  for (const ir::Stage& st : s.stages()) {
    if (!st.tensorize.empty()) return st.tensorize;
  }
  return "";
}

TEST(GpuModelSchedulesTest, Fp32RunsTakeTheFastestFp32Record) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "lathe_gpu_model_schedules_test.db").string();
  std::filesystem::remove(path);
  auto db = db::Database::Open(path);
  ASSERT_TRUE(db.ok()) << db.status();
  auto w = ir::MakeWorkload("matmul:m=128,n=128,k=64");
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*db)
                  ->Insert(MakeRecord(*w, "tf32", cuda::kContractionMmaTf32Async,
                                      {64, 64, 32, 2, 2, 3}, 5.0))
                  .ok());
  ASSERT_TRUE(
      (*db)
          ->Insert(MakeRecord(*w, "fp32-slow", cuda::kContractionFma, {64, 64, 8, 4, 4}, 30.0))
          .ok());
  ASSERT_TRUE(
      (*db)
          ->Insert(MakeRecord(*w, "fp32", cuda::kContractionFmaAsync, {64, 64, 16, 4, 4, 3}, 9.0))
          .ok());
  auto target = ir::ParseTarget("cuda:sm_90");
  ASSERT_TRUE(target.ok());
  std::string origin;
  auto fp32 = GpuModelSchedules(db->get(), *target, "cuda:sm_90:test", /*tf32=*/false);
  auto s = fp32->Get(*w, &origin);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Template(*s), cuda::kContractionFmaAsync) << origin;
  EXPECT_NE(origin.find("fastest fp32"), std::string::npos) << origin;
  auto tf32 = GpuModelSchedules(db->get(), *target, "cuda:sm_90:test", /*tf32=*/true);
  s = tf32->Get(*w, &origin);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(Template(*s), cuda::kContractionMmaTf32Async) << origin;
  db->reset();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace lathe::tools
