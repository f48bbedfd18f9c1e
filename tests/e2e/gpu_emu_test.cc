// End-to-end on the emulated GPU: a real lathed, a lathe-worker registering `cuda-emu:sm_90`
// and `lathe tune --tuner ... --target cuda-emu:sm_90` run a GPU job through the whole GPU path
// (job, lease, NVRTC, ptxas, emulated run, check against the reference, record). The job's
// records are ok and keyed by the emulated device class; a candidate made to read out of
// bounds (the test-only fault, attached by a proxy to one task) is an illegal-address error
// for itself alone. Skips without the CUDA backend or a host C++ compiler.
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "ir/workload.h"
#include "lathe/v1/service.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/worker_proxy.h"
#include "tests/measure/fault_plan.h"

namespace lathe::e2e {
namespace {

constexpr char kWorkload[] = "matmul:m=32,n=48,k=40";
constexpr char kDevice[] = "cuda-emu:sm_90";

bool CanEmulate(std::string* why) {
#ifndef LATHE_HAVE_CUDA_BACKEND
  *why = "this build has no CUDA backend";
  return false;
#else
  if (std::system("command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1") != 0) {
    *why = "no host C++ compiler for the GPU emulator";
    return false;
  }
  return true;
#endif
}

TEST(GpuEmuClusterTest, EmulatedGpuWorkerCompletesAGpuJobAndAnOutOfBoundsCandidateFailsAlone) {
  std::string why;
  if (!CanEmulate(&why)) GTEST_SKIP() << why;
  Cluster c;
  ASSERT_TRUE(c.StartDaemon());
  std::mutex mu;
  std::string faulted;  // the candidate made to read out of bounds
  test_support::FaultPlan plan;
  int handed = 0;
  WorkerProxy proxy(c.address(), [&](int, lathe::v1::LeaseResponse* lease) {
    std::lock_guard<std::mutex> lock(mu);
    for (lathe::v1::Task& t : *lease->mutable_tasks()) {
      if (t.remeasure() || ++handed != 5) continue;
      plan.Add(t.request().candidate_id(), "illegal_access");
      faulted = t.candidate_id();
    }
  });
  ASSERT_TRUE(proxy.ok());
  // The measurement child inherits the plan's LATHE_TEST_FAULTS from the worker.
  Process* worker = c.StartWorker({"--device", kDevice, "--batch", "2", "--timeout-s", "120"},
                                  {plan.Env()}, proxy.address());
  ASSERT_NE(worker, nullptr);
  auto client = c.Client();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));

  auto [rc, out] = RunCommand(std::string(LATHE_BIN) + " tune --tuner " + c.address() +
                              " --target " + kDevice + " --workload " + kWorkload +
                              " --trials 16 --batch 8 --min-repeat-ms 2 --seed 5 "
                              "--remeasure-top 0 --json 2>" +
                              c.dir() + "/tune.err");
  ASSERT_EQ(rc, 0) << out << ReadAll(c.dir() + "/tune.err");
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["device_class"], kDevice);
  EXPECT_EQ(j["trials"], 16);
  EXPECT_EQ(j["state"], "done");
  EXPECT_GT(j["best_latency_us"].get<double>(), 0);

  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(faulted.empty()) << "the proxy never saw a fifth task";
  }
  db::OpenOptions o;
  o.create_if_missing = false;
  auto d = db::Database::Open(c.db(), o);
  ASSERT_TRUE(d.ok()) << d.status();
  const std::string key = ir::WorkloadKey(ir::MakeWorkload(kWorkload)->canonical);
  int records = 0, ok = 0;
  std::map<std::string, int> errors;
  absl::Status st = (*d)->ForEachRecord([&](const db::Record& r) {
    if (r.workload_key != key) return absl::OkStatus();
    ++records;
    EXPECT_EQ(r.device_class, kDevice) << "an emulated record under another device class";
    if (r.candidate_id == faulted) {
      EXPECT_EQ(r.error_class, db::ErrorClass::kRuntimeError) << r.error_msg;
      EXPECT_NE(r.error_msg.find("illegal address"), std::string::npos) << r.error_msg;
      EXPECT_NE(r.error_msg.find("of buffer 'A'"), std::string::npos) << r.error_msg;
      EXPECT_NE(r.error_msg.find("past its end"), std::string::npos) << r.error_msg;
      return absl::OkStatus();
    }
    if (r.error_class == db::ErrorClass::kOk) {
      ++ok;
      EXPECT_GT(r.median_us, 0);
    } else {
      ++errors[std::string(db::ErrorClassName(r.error_class))];
      ADD_FAILURE() << "candidate " << r.candidate_id << ": " << db::ErrorClassName(r.error_class)
                    << ": " << r.error_msg;
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(records, 16);
  EXPECT_EQ(ok, 15) << "every candidate but the faulted one is ok";
  EXPECT_TRUE(worker->running()) << "the worker did not survive the candidate's fault";
}

}  // namespace
}  // namespace lathe::e2e
