// The lease registry of lathed on its own (no database, no gRPC): what a lease takes from the
// queue when tasks are large.
#include "tuner/lease_registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lathe::tuner {
namespace {

namespace v1 = lathe::v1;

constexpr char kDeviceClass[] = "cpu:Test CPU:avx2:2c";
constexpr int64_t kDefaultClientLimit = 4 << 20;  // what gRPC clients receive by default

// `n` tasks of job "job-1" whose traces are `trace_bytes` long.
std::vector<v1::Task> Tasks(int n, size_t trace_bytes, const std::string& prefix = "c") {
  std::vector<v1::Task> tasks;
  for (int i = 0; i < n; ++i) {
    v1::Task t;
    t.set_candidate_id(prefix + std::to_string(i));
    t.set_job_id("job-1");
    t.set_device_class(kDeviceClass);
    t.mutable_request()->set_candidate_id(t.candidate_id());
    t.mutable_request()->set_workload("matmul:m=16,n=16,k=16");
    t.mutable_request()->set_trace_json(std::string(trace_bytes, 'x'));
    tasks.push_back(std::move(t));
  }
  return tasks;
}

class LeaseRegistryTest : public ::testing::Test {
 protected:
  void Start(const LeaseRegistryOptions& o) {
    registry_ = std::make_unique<LeaseRegistry>(o);
    registry_->Start();
    v1::RegisterRequest req;
    req.set_hostname("host-a");
    req.add_devices()->set_device_class(kDeviceClass);
    auto resp = registry_->Register(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    worker_ = resp->worker_id();
  }

  v1::LeaseResponse Lease(int max_tasks) {
    v1::LeaseRequest req;
    req.set_worker_id(worker_);
    req.set_device_class(kDeviceClass);
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(0);
    auto resp = registry_->Lease(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : v1::LeaseResponse();
  }

  std::unique_ptr<LeaseRegistry> registry_;
  std::string worker_;
};

TEST_F(LeaseRegistryTest, LeaseOfLargeTasksStaysUnderTheClientsReceiveLimit) {
  Start(LeaseRegistryOptions());
  // 1 MiB traces: 10 of them would make a 10 MiB response.
  ASSERT_EQ(registry_->Enqueue(0, Tasks(10, 1 << 20)), 10);
  std::vector<std::string> leased;
  for (int i = 0; i < 10 && registry_->Queued() > 0; ++i) {
    v1::LeaseResponse l = Lease(10);
    EXPECT_LE(static_cast<int64_t>(l.ByteSizeLong()), LeaseRegistryOptions().max_lease_bytes);
    EXPECT_LT(static_cast<int64_t>(l.ByteSizeLong()), kDefaultClientLimit);
    // Two tasks fit in 3 MiB, a third would not.
    EXPECT_EQ(l.tasks_size(), 2);
    for (const v1::Task& t : l.tasks()) leased.push_back(t.candidate_id());
  }
  // Nothing lost, nothing twice, in queue order: the task that did not fit led the next lease.
  ASSERT_EQ(leased.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(leased[i], "c" + std::to_string(i));
}

TEST_F(LeaseRegistryTest, TaskLargerThanTheBudgetGoesAlone) {
  LeaseRegistryOptions o;
  o.max_lease_bytes = 4096;
  Start(o);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(2, 8192, "big")), 2);
  ASSERT_EQ(registry_->Enqueue(0, Tasks(3, 100, "small")), 3);
  EXPECT_EQ(Lease(8).tasks_size(), 1);  // big0 alone
  EXPECT_EQ(Lease(8).tasks_size(), 1);  // big1 alone: small ones do not jump ahead of it
  v1::LeaseResponse rest = Lease(8);
  ASSERT_EQ(rest.tasks_size(), 3);
  EXPECT_EQ(rest.tasks(0).candidate_id(), "small0");
  EXPECT_EQ(registry_->Queued(), 0);
}

TEST_F(LeaseRegistryTest, SmallTasksAreBoundByMaxTasksOnly) {
  Start(LeaseRegistryOptions());
  ASSERT_EQ(registry_->Enqueue(0, Tasks(1024, 200)), 1024);
  EXPECT_EQ(Lease(1024).tasks_size(), 1024);
}

}  // namespace
}  // namespace lathe::tuner
