// QueryBestMany (many best records in one call, for compilers) and the current lease that
// ListWorkers shows (for the dashboard), through the real gRPC server and a real database.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/daemon/service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

TEST_F(ServiceTest, QueryBestManyAnswersEveryQueryInOrder) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  const std::string job = Submit(/*trials=*/8, /*batch=*/8);
  std::vector<std::string> seen;
  RunWorker(worker, job, &seen);
  ASSERT_EQ(Job(job).state(), v1::DONE);

  v1::QueryBestManyRequest req;
  const std::vector<std::string> asked = {kSpec, "matmul:m=32,n=32,k=32", "matmul:n=16,k=16,m=16"};
  for (const std::string& w : asked) {
    v1::QueryBestRequest* q = req.add_queries();
    q->set_workload(w);
    q->set_device_class(kDeviceClass);
  }
  v1::QueryBestManyResponse resp;
  grpc::Status st = tuner_->QueryBestMany(Ctx().get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(resp.results_size(), 3);
  // The first and the third are one workload written two ways; the second was never tuned.
  EXPECT_TRUE(resp.results(0).found());
  EXPECT_FALSE(resp.results(1).found());
  EXPECT_NE(resp.results(1).explanation().find("no records"), std::string::npos)
      << resp.results(1).explanation();
  EXPECT_TRUE(resp.results(2).found());
  EXPECT_EQ(resp.results(0).workload(), "matmul:epilogue=none,k=16,m=16,n=16");
  EXPECT_EQ(resp.results(2).workload(), resp.results(0).workload());
  EXPECT_EQ(resp.results(0).trace_json(), resp.results(2).trace_json());
  // The same answer as QueryBest, field by field.
  v1::QueryBestResponse one;
  ASSERT_TRUE(tuner_->QueryBest(Ctx().get(), req.queries(0), &one).ok());
  EXPECT_EQ(one.SerializeAsString(), resp.results(0).SerializeAsString());
}

TEST_F(ServiceTest, QueryBestManyNamesTheMalformedQuery) {
  StartServer(Options());
  v1::QueryBestManyRequest req;
  req.add_queries()->set_workload(kSpec);
  req.add_queries()->set_workload("matmul:m=0,n=1,k=1");
  v1::QueryBestManyResponse resp;
  grpc::Status st = tuner_->QueryBestMany(Ctx().get(), req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("queries[1]"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("'m'"), std::string::npos) << st.error_message();

  v1::QueryBestManyRequest too_many;
  for (int i = 0; i <= TunerService::kMaxQueryBestMany; ++i) {
    too_many.add_queries()->set_workload(kSpec);
  }
  st = tuner_->QueryBestMany(Ctx().get(), too_many, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, QueryBestManyNeedsTheToken) {
  StartServer(Options(), "s3cret");
  v1::QueryBestManyRequest req;
  req.add_queries()->set_workload(kSpec);
  v1::QueryBestManyResponse resp;
  EXPECT_EQ(tuner_->QueryBestMany(Ctx().get(), req, &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(tuner_->QueryBestMany(Ctx("s3cret").get(), req, &resp).ok());
}

TEST_F(ServiceTest, ListWorkersShowsTheCurrentLease) {
  StartServer(Options());
  const std::string worker = RegisterWorker("host-a");
  const std::string idle = RegisterWorker("host-b");
  const std::string job = Submit(/*trials=*/16, /*batch=*/8);
  v1::LeaseResponse l = Lease(worker, 3);
  ASSERT_EQ(l.tasks_size(), 3);

  auto info = [&](const std::string& id) {
    v1::ListWorkersResponse ws;
    EXPECT_TRUE(tuner_->ListWorkers(Ctx().get(), {}, &ws).ok());
    for (const v1::WorkerInfo& w : ws.workers()) {
      if (w.worker_id() == id) return w;
    }
    ADD_FAILURE() << "worker " << id << " not listed";
    return v1::WorkerInfo();
  };
  v1::WorkerInfo busy = info(worker);
  EXPECT_EQ(busy.state(), "busy");
  EXPECT_EQ(busy.leased_tasks(), 3);
  ASSERT_EQ(busy.lease_job_ids_size(), 1);
  EXPECT_EQ(busy.lease_job_ids(0), job);
  // The deadline is the lease's (unix ms), within a second of what the lease said.
  EXPECT_NEAR(static_cast<double>(busy.lease_deadline_ms()), static_cast<double>(l.deadline_ms()),
              1000.0);
  EXPECT_EQ(info(idle).leased_tasks(), 0);
  EXPECT_EQ(info(idle).lease_deadline_ms(), 0);

  Report(OkReport(worker, l));
  v1::WorkerInfo after = info(worker);
  EXPECT_EQ(after.leased_tasks(), 0);
  EXPECT_EQ(after.measured(), 3);
}

}  // namespace
}  // namespace lathe::daemon::service_testing
