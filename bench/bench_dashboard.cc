#include "bench/bench_dashboard.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/service_harness.h"
#include "client/client.h"
#include "codegen/host.h"
#include "daemon/grpc_server.h"
#include "daemon/service.h"
#include "dashboard/server.h"
#include "db/database.h"
#include "ir/workload.h"
#include "lathe/v1/service.grpc.pb.h"

namespace lathe::bench {

namespace {

using lathe::bench::Clock;
using lathe::bench::In;
using lathe::bench::Percentile;
namespace v1 = lathe::v1;

constexpr char kToken[] = "bench-dashboard-token";
constexpr int kManyWorkloads = 1000;
constexpr int kLongCurveTrials = 20000;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Records that the jobs never touch (softmax: the jobs tune matmul, and a new workload is
// seeded only from records of its own op): one ok record for each of the 1,000 workloads that
// best_many asks for, and a long history of one more workload for the curve.
bool Prefill(const std::string& db_path, const std::string& dc) {
  auto db = db::Database::Open(db_path);
  if (!db.ok()) {
    std::printf("   database: %s\n", db.status().ToString().c_str());
    return false;
  }
  auto record = [&](const std::string& spec, int i, double median) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(spec);
    db::Record r;
    r.candidate_id = absl::StrCat(spec, "#", i);
    r.workload = w->canonical;
    r.workload_key = w->key;
    r.device_class = dc;
    r.trace_json = "{\"prefilled\":true}";
    r.repeats_us = {median, median, median};
    r.median_us = median;
    r.flops = w->flops;
    r.worker = "prefill";
    r.measured_at_ms = 1700000000000 + i;
    return r;
  };
  std::vector<db::Record> batch;
  for (int i = 0; i < kManyWorkloads; ++i) {
    batch.push_back(record(absl::StrCat("softmax:m=", 8 + i, ",n=64"), 0, 10.0 + i % 7));
  }
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> us(20, 200);
  for (int i = 0; i < kLongCurveTrials; ++i) {
    batch.push_back(record("softmax:m=4096,n=1024", i, us(rng)));
  }
  for (size_t at = 0; at < batch.size(); at += 2000) {
    std::vector<db::Record> part(batch.begin() + at,
                                 batch.begin() + std::min(batch.size(), at + 2000));
    if (auto r = (*db)->InsertBatch(part); !r.ok()) {
      std::printf("   prefill: %s\n", r.status().ToString().c_str());
      return false;
    }
  }
  return true;
}

// GETs `path` (with the token) from `threads` pollers, each every `period_ms`, for `seconds`;
// returns every latency in ms, or an empty vector after the first failure (printed).
std::vector<double> Poll(const std::string& url, const std::string& path, int threads,
                         int period_ms, double seconds) {
  std::mutex mu;
  std::vector<double> all;
  std::atomic<bool> failed{false};
  std::vector<std::thread> pollers;
  for (int t = 0; t < threads; ++t) {
    pollers.emplace_back([&] {
      httplib::Client http(url);
      http.set_keep_alive(true);
      const httplib::Headers auth = {{"Authorization", absl::StrCat("Bearer ", kToken)}};
      std::vector<double> mine;
      const auto until = Clock::now() + std::chrono::duration<double>(seconds);
      while (Clock::now() < until && !failed.load()) {
        const auto a = Clock::now();
        auto r = http.Get(path.c_str(), auth);
        const auto b = Clock::now();
        if (!r || r->status != 200) {
          if (!failed.exchange(true)) {
            std::printf("   GET %s failed: %s\n", path.c_str(),
                        r ? absl::StrCat(r->status, " ", r->body.substr(0, 200)).c_str()
                          : httplib::to_string(r.error()).c_str());
          }
          return;
        }
        mine.push_back(Ms(b - a));
        std::this_thread::sleep_until(a + std::chrono::milliseconds(period_ms));
      }
      std::lock_guard<std::mutex> lock(mu);
      all.insert(all.end(), mine.begin(), mine.end());
    });
  }
  for (auto& p : pollers) p.join();
  if (failed.load()) all.clear();
  return all;
}

void PrintLatency(const char* what, const std::vector<double>& ms, double target_p99 = 0) {
  if (ms.empty()) {
    std::printf("   %-34s no answer\n", what);
    return;
  }
  const double p99 = Percentile(ms, 0.99);
  std::printf("   %-34s p50 %7.2f ms  p99 %7.2f ms  (%zu requests)", what, Percentile(ms, 0.5), p99,
              ms.size());
  if (target_p99 > 0) {
    std::printf("   target p99 <= %.0f ms  %s", target_p99, p99 <= target_p99 ? "ok" : "MISSED");
  }
  std::printf("\n");
}

// A simulated worker: registers, then leases one task at a time, "measures" it (a sleep) and
// reports a fake result, until `stop`.
void SimulatedWorker(const std::string& address, const std::string& dc, int i, int measure_ms,
                     const std::atomic<bool>& stop, std::atomic<int>& registered) {
  grpc::ChannelArguments args;
  args.SetInt("grpc.use_local_subchannel_pool", 1);
  auto stub = v1::WorkerService::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(In(30000));
    c->AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
    return c;
  };
  v1::RegisterRequest reg;
  reg.set_hostname(absl::StrCat("sim-", i / 8));
  v1::DeviceInfo* d = reg.add_devices();
  d->set_device_class(dc);
  d->set_kind("cpu");
  reg.set_lathe_version("bench");
  v1::RegisterResponse who;
  if (!stub->Register(ctx().get(), reg, &who).ok()) return;
  ++registered;
  std::mt19937 rng(i);
  std::uniform_int_distribution<int> measure(measure_ms / 2, measure_ms * 3 / 2);
  std::uniform_real_distribution<double> us(50, 500);
  std::this_thread::sleep_for(std::chrono::milliseconds(measure(rng)));
  while (!stop.load()) {
    v1::LeaseRequest req;
    req.set_worker_id(who.worker_id());
    req.set_worker_secret(who.worker_secret());
    req.set_device_class(dc);
    req.set_max_tasks(1);
    v1::LeaseResponse lease;
    if (!stub->Lease(ctx().get(), req, &lease).ok() || lease.tasks().empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(measure(rng)));
    v1::ReportRequest rep;
    rep.set_worker_id(who.worker_id());
    rep.set_worker_secret(who.worker_secret());
    rep.set_lease_id(lease.lease_id());
    rep.set_device_class(dc);
    for (const v1::Task& t : lease.tasks()) {
      v1::MeasureResult* r = rep.add_results();
      r->set_candidate_id(t.candidate_id());
      r->set_error_class(v1::OK);
      const double m = us(rng);
      for (double f : {0.99, 1.0, 1.01}) r->add_repeats_us(m * f);
      r->set_median_us(m);
    }
    v1::ReportResponse ack;
    (void)stub->Report(ctx().get(), rep, &ack);
  }
}

}  // namespace

void DashboardUnderLoad(int workers, int jobs, int seconds, int measure_ms, int search_threads,
                        int search_nice) {
  std::printf(
      "\n4. dashboard and best_many: %d simulated workers (a task each %d ms +-50%%), %d jobs, "
      "HTTP with the token on loopback, %d s per measurement\n",
      workers, measure_ms, jobs, seconds);
  char tmpl[] = "/tmp/lathe_bench_dashboard_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string dc = codegen::HostDeviceClass();
  const std::string db_path = dir + "/tuning.db";
  if (!Prefill(db_path, dc)) return;

  daemon::ServiceOptions so;
  so.db_path = db_path;
  so.search.population = 256;  // light rounds: 20 jobs search on this machine's cores
  so.search.generations = 1;
  so.search.threads = search_threads;
  so.search_nice = search_nice;
  so.use_cost_model = false;
  so.remeasure_top = 0;
  auto service = daemon::TunerService::Create(so);
  if (!service.ok()) return (void)std::printf("   %s\n", service.status().ToString().c_str());
  daemon::GrpcServerOptions go;
  go.token = kToken;
  auto grpc_server = daemon::GrpcServer::Start(service->get(), go);
  if (!grpc_server.ok())
    return (void)std::printf("   %s\n", grpc_server.status().ToString().c_str());
  dashboard::ServerOptions ho;
  ho.token = kToken;
  ho.data.db_path = db_path;
  auto http = dashboard::DashboardServer::Start(service->get(), ho);
  if (!http.ok()) return (void)std::printf("   %s\n", http.status().ToString().c_str());
  const std::string url = (*http)->url();
  const std::string address = (*grpc_server)->address();

  // Baselines: the HTTP floor, and the state of a daemon with nothing on it.
  const double base_s = std::max(2, seconds / 3);
  PrintLatency("/healthz (HTTP floor)", Poll(url, "/healthz", 4, 100, base_s));
  PrintLatency("/api/state, no workers or jobs", Poll(url, "/api/state", 4, 100, base_s));

  client::ClientOptions co;
  co.address = address;
  co.token = kToken;
  auto client = client::TunerClient::Connect(co);
  if (!client.ok()) return (void)std::printf("   %s\n", client.status().ToString().c_str());
  std::vector<std::string> job_ids;
  for (int j = 0; j < jobs; ++j) {
    v1::JobSpec spec;
    spec.add_workloads(absl::StrCat("matmul:m=", 32 + 8 * j, ",n=64,k=64"));
    spec.set_device_class(dc);
    spec.set_trials(100000);
    spec.set_batch(64);
    spec.set_seed(j);
    spec.set_min_repeat_ms(1);
    auto id = (*client)->SubmitJob(spec);
    if (!id.ok()) return (void)std::printf("   submit: %s\n", id.status().ToString().c_str());
    job_ids.push_back(*id);
  }

  std::atomic<bool> stop{false};
  std::atomic<int> registered{0};
  std::vector<std::thread> fleet;
  for (int i = 0; i < workers; ++i) {
    fleet.emplace_back(SimulatedWorker, address, dc, i, measure_ms, std::cref(stop),
                       std::ref(registered));
  }
  for (auto until = Clock::now() + std::chrono::seconds(60);
       registered.load() < workers && Clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Let the fleet reach its pace (every worker through a lease or two) before timing.
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * measure_ms));
  std::printf("   %d workers registered, %d jobs running\n", registered.load(), jobs);

  // What building the answer costs, apart from HTTP and the wait for a core (no sharing).
  dashboard::DataOptions fresh_options = ho.data;
  fresh_options.state_cache_ms = 0;
  auto fresh = dashboard::DashboardData::Create(service->get(), fresh_options);
  if (!fresh.ok()) return (void)std::printf("   %s\n", fresh.status().ToString().c_str());
  std::vector<double> build_ms;
  for (int i = 0; i < 30; ++i) {
    const auto a = Clock::now();
    (void)(*fresh)->State();
    build_ms.push_back(Ms(Clock::now() - a));
  }
  std::printf("   DashboardData::State() built: p50 %.2f ms  p99 %.2f ms (30 builds)\n",
              Percentile(build_ms, 0.5), Percentile(build_ms, 0.99));
  // The same endpoint when every request builds its answer (state_cache_ms = 0), then as
  // lathed serves it (viewers polling within 200 ms share a build).
  dashboard::ServerOptions uncached = ho;
  uncached.data.state_cache_ms = 0;
  auto http_uncached = dashboard::DashboardServer::Start(service->get(), uncached);
  if (!http_uncached.ok()) {
    return (void)std::printf("   %s\n", http_uncached.status().ToString().c_str());
  }
  PrintLatency("/api/state, each request builds",
               Poll((*http_uncached)->url(), "/api/state", 4, 100, seconds), 50);
  (*http_uncached)->Stop();
  PrintLatency("/api/state (4 pollers, 10/s each)", Poll(url, "/api/state", 4, 100, seconds), 50);
  const std::string first_job = job_ids.front();
  PrintLatency("/api/records?job (1 task)",
               Poll(url, "/api/records?job=" + first_job, 2, 200, base_s));
  PrintLatency(
      absl::StrCat("/api/curve of a job's task").c_str(),
      Poll(url,
           httplib::append_query_params(
               "/api/curve",
               {{"workload", "matmul:m=32,n=64,k=64"}, {"device_class", dc}, {"job", first_job}}),
           2, 200, base_s));
  PrintLatency(
      absl::StrCat("/api/curve, ", kLongCurveTrials, " trials").c_str(),
      Poll(url,
           httplib::append_query_params(
               "/api/curve", {{"workload", "softmax:m=4096,n=1024"}, {"device_class", dc}}),
           2, 200, base_s));
  auto state = httplib::Client(url).Get(
      "/api/state", httplib::Headers{{"Authorization", absl::StrCat("Bearer ", kToken)}});
  if (state) std::printf("   /api/state answer: %zu bytes\n", state->body.size());

  // b. best_many, still under the fleet's load.
  std::vector<std::string> many;
  for (int i = 0; i < kManyWorkloads; ++i)
    many.push_back(absl::StrCat("softmax:m=", 8 + i, ",n=64"));
  std::vector<double> batched, one_by_one;
  int found = 0;
  for (int round = 0; round < 5; ++round) {
    auto a = Clock::now();
    auto r = (*client)->QueryBestMany(many, dc);
    batched.push_back(Ms(Clock::now() - a));
    if (!r.ok()) return (void)std::printf("   QueryBestMany: %s\n", r.status().ToString().c_str());
    found = static_cast<int>(
        std::count_if(r->begin(), r->end(), [](const auto& x) { return x.found(); }));
    a = Clock::now();
    for (const std::string& w : many) {
      auto one = (*client)->QueryBest(w, dc);
      if (!one.ok())
        return (void)std::printf("   QueryBest: %s\n", one.status().ToString().c_str());
    }
    one_by_one.push_back(Ms(Clock::now() - a));
  }
  const double med = Percentile(batched, 0.5);
  std::printf(
      "   best_many of %d workloads (%d found), one QueryBestMany: median %.1f ms of 5 "
      "(min %.1f)   target <= 200 ms  %s\n",
      kManyWorkloads, found, med, Percentile(batched, 0), med <= 200 ? "ok" : "MISSED");
  std::printf(
      "   baseline: the same %d as QueryBest calls one after another: median %.1f ms "
      "(%.1fx)\n",
      kManyWorkloads, Percentile(one_by_one, 0.5), Percentile(one_by_one, 0.5) / med);

  stop = true;
  for (auto& t : fleet) t.join();
  (*http)->Stop();
  (*grpc_server)->Shutdown(std::chrono::milliseconds(1000));
  (*service)->Shutdown();
  http->reset();
  grpc_server->reset();
  service->reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace lathe::bench
