// lathed --http against a real lathed process: the page and the data endpoints over HTTP,
// the token (every page and endpoint refuses a request without it; the login form hands out
// a session), cancelling from the page, HTTPS with the gRPC side's certificate, and bad
// addresses.
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/e2e_util.h"

namespace lathe::e2e {
namespace {

using json = nlohmann::json;

constexpr char kToken[] = "dashboard-test-token-8c1f";

// The dashboard URL lathed printed ("http://127.0.0.1:PORT").
std::string DashboardUrl(Cluster& c) {
  std::optional<std::string> url = c.daemon()->WaitForLine("lathed: dashboard on ", 10000);
  EXPECT_TRUE(url.has_value()) << ReadAll(c.daemon()->log());
  return url.value_or("");
}

httplib::Headers Bearer(const std::string& token = kToken) {
  return {{"Authorization", "Bearer " + token}};
}

TEST(DashboardServerTest, ServesThePageAndLiveDataOfARealFleet) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon({"--http", "127.0.0.1:0", "--heartbeat-ms", "300"}));
  httplib::Client http(DashboardUrl(c));
  ASSERT_NE(c.StartWorker(), nullptr);
  auto client = c.Client();
  ASSERT_TRUE(c.WaitForWorkers(*client, 1));

  auto page = http.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/app.js"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"),
            std::string::npos);
  for (const char* part : {"/app.js", "/style.css"}) {
    auto r = http.Get(part);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << part;
    EXPECT_GT(r->body.size(), 1000u) << part;
  }

  const std::string workload = "matmul:m=32,n=32,k=32";
  absl::StatusOr<std::string> job = client->SubmitJob(SmallJob(workload, 8, 4));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(WaitForJob(*client, *job, 120).ok());

  auto state = http.Get("/api/state");
  ASSERT_TRUE(state);
  ASSERT_EQ(state->status, 200);
  EXPECT_NE(state->get_header_value("Content-Type").find("application/json"), std::string::npos);
  json st = json::parse(state->body);
  ASSERT_EQ(st["workers"].size(), 1u);
  EXPECT_EQ(st["workers"][0]["state"], "idle");
  EXPECT_GE(st["workers"][0]["measured"].get<int>(), 8);
  ASSERT_EQ(st["jobs"].size(), 1u);
  const json& j = st["jobs"][0];
  EXPECT_EQ(j["id"], *job);
  EXPECT_EQ(j["state"], "done");
  EXPECT_EQ(j["trials_done"], 8);
  EXPECT_GT(j["tasks"][0]["best_gflops"].get<double>(), 0);
  const std::string dc = j["device_class"];

  httplib::Params q = {{"workload", workload}, {"device_class", dc}, {"job", *job}};
  auto curve = http.Get("/api/curve", q, httplib::Headers{});
  ASSERT_TRUE(curve);
  ASSERT_EQ(curve->status, 200) << curve->body;
  json cv = json::parse(curve->body);
  EXPECT_GE(cv["trials"].get<int>(), 8);
  EXPECT_FALSE(cv["points"].empty());

  auto records = http.Get("/api/records", {{"job", *job}}, httplib::Headers{});
  ASSERT_TRUE(records);
  ASSERT_EQ(records->status, 200) << records->body;
  EXPECT_TRUE(json::parse(records->body)["records"][0]["found"].get<bool>());

  auto bad = http.Get("/api/best", {{"workload", "matmul:m=0,n=1,k=1"}}, httplib::Headers{});
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(json::parse(bad->body)["error"].get<std::string>().find("'m'"), std::string::npos);
  auto unknown = http.Get("/api/records", {{"job", "job-nope"}}, httplib::Headers{});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto missing = http.Get("/no/such/page");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  // Cancel from the page: a job far from done, cancelled by POST.
  absl::StatusOr<std::string> big = client->SubmitJob(SmallJob(workload, 100000, 4));
  ASSERT_TRUE(big.ok());
  auto cancel = http.Post("/api/jobs/" + *big + "/cancel");
  ASSERT_TRUE(cancel);
  ASSERT_EQ(cancel->status, 200) << cancel->body;
  EXPECT_EQ(json::parse(cancel->body)["state"], "cancelled");
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok());
  for (const auto& js : *jobs) {
    if (js.job_id() == *big) {
      EXPECT_EQ(js.state(), lathe::v1::CANCELLED);
    }
  }
}

TEST(DashboardServerTest, TokenGuardsEveryPageAndEndpoint) {
  Cluster c;
  const std::string token_file = c.dir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ASSERT_TRUE(c.StartDaemon({"--http", "127.0.0.1:0", "--token-file", token_file}));
  httplib::Client http(DashboardUrl(c));
  auto client = c.Client(kToken);
  absl::StatusOr<std::string> job = client->SubmitJob(SmallJob("matmul:m=32,n=32,k=32", 1000, 4));
  ASSERT_TRUE(job.ok()) << job.status();

  const std::vector<std::string> gets = {"/",
                                         "/app.js",
                                         "/style.css",
                                         "/api/state",
                                         "/api/records?job=" + *job,
                                         "/api/curve?workload=matmul:m=32,n=32,k=32&device_class=x",
                                         "/api/best?workload=matmul:m=8,n=8,k=8",
                                         "/favicon.ico"};
  for (const std::string& path : gets) {
    for (const httplib::Headers& h : {httplib::Headers{}, Bearer("wrong-token")}) {
      auto r = http.Get(path, h);
      ASSERT_TRUE(r) << path;
      EXPECT_EQ(r->status, 401) << path;
      // Nothing of the fleet: no job id, no script, at most the login form.
      EXPECT_EQ(r->body.find(*job), std::string::npos) << path;
      EXPECT_EQ(r->body.find("app.js"), std::string::npos) << path;
      EXPECT_EQ(r->body.find("poll"), std::string::npos) << path;
    }
    auto ok = http.Get(path, Bearer());
    ASSERT_TRUE(ok) << path;
    EXPECT_NE(ok->status, 401) << path;
  }
  auto refused = http.Post("/api/jobs/" + *job + "/cancel");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // The browser's way in: the login form's POST sets a session cookie.
  auto wrong = http.Post("/login", httplib::Params{{"token", "nope"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_FALSE(wrong->has_header("Set-Cookie"));
  auto login = http.Post("/login", httplib::Params{{"token", kToken}});
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  const std::string set_cookie = login->get_header_value("Set-Cookie");
  EXPECT_NE(set_cookie.find("HttpOnly"), std::string::npos);
  EXPECT_NE(set_cookie.find("SameSite=Strict"), std::string::npos);
  EXPECT_EQ(set_cookie.find(kToken), std::string::npos);
  const std::string cookie = set_cookie.substr(0, set_cookie.find(';'));
  httplib::Headers with_cookie = {{"Cookie", cookie}};
  auto state = http.Get("/api/state", with_cookie);
  ASSERT_TRUE(state);
  EXPECT_EQ(state->status, 200);
  EXPECT_NE(state->body.find(*job), std::string::npos);

  // A POST with only the cookie must come from the page (X-Lathe-Request).
  auto forged = http.Post("/api/jobs/" + *job + "/cancel", with_cookie, "", "text/plain");
  ASSERT_TRUE(forged);
  EXPECT_EQ(forged->status, 403);
  httplib::Headers from_page = with_cookie;
  from_page.emplace("X-Lathe-Request", "1");
  auto cancel = http.Post("/api/jobs/" + *job + "/cancel", from_page, "", "text/plain");
  ASSERT_TRUE(cancel);
  EXPECT_EQ(cancel->status, 200) << cancel->body;

  auto logout = http.Post("/logout", with_cookie, "", "text/plain");
  ASSERT_TRUE(logout);
  EXPECT_EQ(logout->status, 303);
  auto after = http.Get("/api/state", with_cookie);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 401);

  // Neither the token nor a session id is ever logged.
  const std::string log = ReadAll(c.daemon()->log());
  EXPECT_EQ(log.find(kToken), std::string::npos);
  EXPECT_EQ(log.find(cookie.substr(cookie.find('=') + 1)), std::string::npos);
  EXPECT_NE(log.find("event=dashboard_login result=refused"), std::string::npos);
}

TEST(DashboardServerTest, ServesHttpsWithTheGrpcCertificate) {
  Cluster c;
  const std::string dir = c.dir();
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no openssl to make a test certificate";
  ASSERT_TRUE(c.StartDaemon(
      {"--http", "127.0.0.1:0", "--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"}));
  const std::string url = DashboardUrl(c);
  ASSERT_EQ(url.rfind("https://", 0), 0u) << url;
  httplib::SSLClient https("127.0.0.1", std::stoi(url.substr(url.rfind(':') + 1)));
  https.set_ca_cert_path((dir + "/cert.pem").c_str());
  https.enable_server_certificate_verification(true);
  auto r = https.Get("/api/state");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  // Plain HTTP gets no answer from the TLS port.
  httplib::Client plain("http://127.0.0.1:" + url.substr(url.rfind(':') + 1));
  plain.set_read_timeout(2);
  auto p = plain.Get("/api/state");
  EXPECT_TRUE(!p || p->status != 200);
}

TEST(DashboardServerTest, BadHttpAddressesAreRefusedAtStart) {
  Cluster c;
  auto [rc, out] =
      RunCommand("timeout 30 " + std::string(LATHED_BIN) + " --listen 127.0.0.1:0 --db " + c.db() +
                 " --http not-an-address 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("not-an-address"), std::string::npos) << out;
  // A port already taken (by a first daemon's dashboard).
  ASSERT_TRUE(c.StartDaemon({"--http", "127.0.0.1:0"}));
  const std::string url = DashboardUrl(c);
  const std::string taken = url.substr(url.find("//") + 2);
  std::tie(rc, out) =
      RunCommand("timeout 30 " + std::string(LATHED_BIN) + " --listen 127.0.0.1:0 --db " + c.dir() +
                 "/other.db --http " + taken + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("cannot listen"), std::string::npos) << out;
}

// Token or not, a request must name this dashboard as its Host and, with an Origin, come from
// its own origin: a page of another site cannot cancel a job of a token-less lathed, nor can
// a DNS-rebinding page (Host: its own name) read its state.
TEST(DashboardServerTest, HostAndOriginAreCheckedTokenOrNot) {
  Cluster c;
  ASSERT_TRUE(c.StartDaemon({"--http", "127.0.0.1:0", "--http-host", "lathe.example"}));
  const std::string url = DashboardUrl(c);
  const std::string port = url.substr(url.rfind(':') + 1);
  httplib::Client http(url);
  auto client = c.Client();
  absl::StatusOr<std::string> job = client->SubmitJob(SmallJob("matmul:m=32,n=32,k=32", 1000, 4));
  ASSERT_TRUE(job.ok()) << job.status();

  for (const std::string& host :
       std::vector<std::string>{"evil.example", "evil.example:" + port, "127.0.0.1.evil.example"}) {
    auto r = http.Get("/api/state", {{"Host", host}});
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 403) << host;
    EXPECT_EQ(r->body.find(*job), std::string::npos) << host;
  }
  for (const std::string& host :
       std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "LATHE.example"}) {
    auto r = http.Get("/api/state", {{"Host", host}});
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 200) << host;
  }
  auto health = http.Get("/healthz", {{"Host", "10.1.2.3:" + port}});  // a probe by pod IP
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  const std::string cancel = "/api/jobs/" + *job + "/cancel";
  for (const std::string& origin :
       {std::string("http://evil.example"), std::string("null"),
        "http://127.0.0.1:" + std::to_string(std::stoi(port) + 1), "https://127.0.0.1:" + port}) {
    auto r = http.Post(cancel, {{"Origin", origin}}, "", "text/plain");
    ASSERT_TRUE(r) << origin;
    EXPECT_EQ(r->status, 403) << origin;
  }
  absl::StatusOr<std::vector<lathe::v1::JobStatus>> jobs = client->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_NE(jobs->front().state(), lathe::v1::CANCELLED) << "a cross-origin POST cancelled it";
  auto same = http.Post(cancel, {{"Origin", "http://127.0.0.1:" + port}}, "", "text/plain");
  ASSERT_TRUE(same);
  EXPECT_EQ(same->status, 200) << same->body;
}

TEST(DashboardServerTest, LoginTakesTheTokenFromTheBodyOnlyAndBacksOff) {
  Cluster c;
  const std::string token_file = c.dir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  ASSERT_TRUE(c.StartDaemon({"--http", "127.0.0.1:0", "--token-file", token_file}));
  httplib::Client http(DashboardUrl(c));
  auto in_url = http.Post(std::string("/login?token=") + kToken, httplib::Params{});
  ASSERT_TRUE(in_url);
  EXPECT_EQ(in_url->status, 400);
  EXPECT_FALSE(in_url->has_header("Set-Cookie"));
  for (int i = 0; i < 3; ++i) {
    auto wrong = http.Post("/login", httplib::Params{{"token", "nope"}});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << i;
  }
  // Even the right token waits for the backoff.
  auto held = http.Post("/login", httplib::Params{{"token", kToken}});
  ASSERT_TRUE(held);
  EXPECT_EQ(held->status, 429);
  EXPECT_FALSE(held->has_header("Set-Cookie"));
  EXPECT_FALSE(held->get_header_value("Retry-After").empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto login = http.Post("/login", httplib::Params{{"token", kToken}});
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_TRUE(login->has_header("Set-Cookie"));
}

TEST(DashboardServerTest, MetricsAndDashboardOffLoopbackNeedAToken) {
  Cluster c;
  const std::string lathed =
      "timeout 30 " + std::string(LATHED_BIN) + " --listen 127.0.0.1:0 --db " + c.db();
  auto [rc, out] = RunCommand(lathed + " --metrics 0.0.0.0:0 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--metrics"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(lathed + " --http 0.0.0.0:0 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("dashboard"), std::string::npos) << out;
  // A worker token needs a client token beside it.
  const std::string token_file = c.dir() + "/token";
  std::ofstream(token_file) << kToken << "\n";
  std::tie(rc, out) = RunCommand(lathed + " --worker-token-file " + token_file + " 2>&1");
  EXPECT_EQ(rc, 2) << out;
}

}  // namespace
}  // namespace lathe::e2e
