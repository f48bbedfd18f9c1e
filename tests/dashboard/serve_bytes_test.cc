// DashboardServer::ServeBytes, the in-memory connection the fuzzer drives
// (fuzz/dashboard_http_fuzzer.cc): the same gate and routes as a socket, pipelined requests,
// and inputs that once misbehaved under the fuzzer.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "dashboard/server.h"
#include "tests/daemon/service_fixture.h"

namespace lathe::daemon::service_testing {
namespace {

constexpr char kToken[] = "serve-bytes-token";

class ServeBytesTest : public ServiceTest {
 protected:
  void SetUp() override {
    ServiceTest::SetUp();
    StartServer(Options());
    dashboard::ServerOptions o;
    o.token = kToken;
    o.data.db_path = db_path_;
    auto s = dashboard::DashboardServer::Start(service_.get(), o);
    ASSERT_TRUE(s.ok()) << s.status();
    dashboard_ = std::move(*s);
  }
  void TearDown() override {
    dashboard_.reset();
    ServiceTest::TearDown();
  }

  std::unique_ptr<dashboard::DashboardServer> dashboard_;
};

TEST_F(ServeBytesTest, ServesTheGateAndTheRoutesLikeASocket) {
  EXPECT_TRUE(absl::StartsWith(dashboard_->ServeBytes("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
                               "HTTP/1.1 200 OK"));
  EXPECT_TRUE(
      absl::StartsWith(dashboard_->ServeBytes("GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"),
                       "HTTP/1.1 401"));
  EXPECT_TRUE(
      absl::StartsWith(dashboard_->ServeBytes("GET /api/state HTTP/1.1\r\nHost: evil.example\r\n"
                                              "Authorization: Bearer serve-bytes-token\r\n\r\n"),
                       "HTTP/1.1 403"));
  const std::string two = dashboard_->ServeBytes(
      "GET /api/state HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer serve-bytes-token\r\n"
      "\r\nGET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(two, "HTTP/1.1 200 OK")) << two;
  EXPECT_NE(two.find("\"workers_idle\""), std::string::npos) << two;
  EXPECT_NE(two.find("HTTP/1.1 200 OK", 1), std::string::npos) << "the pipelined request";
}

}  // namespace
}  // namespace lathe::daemon::service_testing
