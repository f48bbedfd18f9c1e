// \file
// The harness bench_service's parts share: an in-process lathed (TunerService behind its gRPC
// server on 127.0.0.1:0), synthetic workers that lease and report fake results over their own
// channels, child processes, and the CPU-time readings the parts print.
#ifndef LATHE_BENCH_SERVICE_HARNESS_H_
#define LATHE_BENCH_SERVICE_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/host.h"
#include "daemon/grpc_server.h"
#include "daemon/service.h"
#include "lathe/v1/service.grpc.pb.h"

namespace lathe::bench {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d);
// The `p` quantile (0..1) of `v`, nearest rank; 0 for none.
double Percentile(std::vector<double> v, double p);
// A new directory under /tmp.
std::string TempDir();
// A deadline `ms` from now.
std::chrono::system_clock::time_point In(int ms);

// An in-process daemon on 127.0.0.1:0.
struct Daemon {
  std::unique_ptr<lathe::daemon::TunerService> service;
  std::unique_ptr<lathe::daemon::GrpcServer> server;
  std::string dir;

  // `search_threads` / `search_nice`: the daemon's search (lathed's --search-threads, the
  // niceness of its search threads).
  static std::unique_ptr<Daemon> Start(int population, int generations, int search_threads,
                                       int search_nice) {
    auto d = std::make_unique<Daemon>();
    d->dir = TempDir();
    lathe::daemon::ServiceOptions o;
    o.db_path = d->dir + "/tuning.db";
    o.search.population = population;
    o.search.generations = generations;
    o.search.threads = search_threads;
    o.search_nice = search_nice;
    o.use_cost_model = false;  // fake results would teach it nothing
    // No re-timing of the best at the end of a job: the parts time dispatch and measurement
    // throughput up to the last trial, and a job would stay open for the re-timing after it.
    o.remeasure_top = 0;
    o.heartbeat_interval_ms = 10000;
    o.lease_duration_ms = 120000;
    auto s = lathe::daemon::TunerService::Create(o);
    if (!s.ok()) {
      std::fprintf(stderr, "bench_service: %s\n", s.status().ToString().c_str());
      return nullptr;
    }
    d->service = std::move(*s);
    lathe::daemon::GrpcServerOptions g;
    g.listen = "127.0.0.1:0";
    auto srv = lathe::daemon::GrpcServer::Start(d->service.get(), g);
    if (!srv.ok()) {
      std::fprintf(stderr, "bench_service: %s\n", srv.status().ToString().c_str());
      return nullptr;
    }
    d->server = std::move(*srv);
    return d;
  }
  ~Daemon() {
    if (server) server->Shutdown(std::chrono::milliseconds(1000));
    if (service) service->Shutdown();
    server.reset();
    service.reset();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

// Submits a job of one workload on the host's device class; its id, or "" (printed why).
std::string SubmitJob(const std::string& address, const std::string& workload, int trials,
                      int batch);

// A synthetic worker: its own channel, registered with the host's device class.
class FakeWorker {
 public:
  explicit FakeWorker(const std::string& address, uint64_t seed) : rng_(seed) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
    channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    stub_ = lathe::v1::WorkerService::NewStub(channel_);
  }

  bool Register() {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30000));
    lathe::v1::RegisterRequest req;
    req.set_hostname("bench");
    lathe::v1::DeviceInfo* d = req.add_devices();
    d->set_device_class(lathe::codegen::HostDeviceClass());
    d->set_kind("cpu");
    d->set_cores(2);
    lathe::v1::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    if (!s.ok()) return false;
    id_ = resp.worker_id();
    secret_ = resp.worker_secret();
    return true;
  }

  // Leases up to max_tasks; returns false on an RPC error.
  bool Lease(int max_tasks, int wait_ms, lathe::v1::LeaseResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(wait_ms + 30000));
    lathe::v1::LeaseRequest req;
    req.set_worker_id(id_);
    req.set_worker_secret(secret_);
    req.set_device_class(lathe::codegen::HostDeviceClass());
    req.set_max_tasks(max_tasks);
    req.set_wait_ms(wait_ms);
    return stub_->Lease(&ctx, req, resp).ok();
  }

  bool Report(const lathe::v1::LeaseResponse& lease, int* accepted) {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(30000));
    lathe::v1::ReportRequest req;
    req.set_worker_id(id_);
    req.set_worker_secret(secret_);
    req.set_lease_id(lease.lease_id());
    req.set_device_class(lathe::codegen::HostDeviceClass());
    std::uniform_real_distribution<double> us(50, 500);
    for (const lathe::v1::Task& t : lease.tasks()) {
      lathe::v1::MeasureResult* r = req.add_results();
      r->set_candidate_id(t.candidate_id());
      r->set_error_class(lathe::v1::OK);
      double m = us(rng_);
      for (double f : {0.99, 1.0, 1.01}) r->add_repeats_us(m * f);
      r->set_median_us(m);
      r->set_cv(0.01);
      r->set_compile_ms(1);
    }
    lathe::v1::ReportResponse resp;
    grpc::Status s = stub_->Report(&ctx, req, &resp);
    if (accepted) *accepted = resp.accepted();
    return s.ok();
  }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<lathe::v1::WorkerService::Stub> stub_;
  std::string id_;
  std::string secret_;
  std::mt19937_64 rng_;
};

// A child process, killed and reaped when this goes.
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

// Starts argv[0] with `argv`, stdin from /dev/null, stdout and stderr appended to `log`; pid -1
// when it could not start.
std::unique_ptr<Child> Spawn(std::vector<std::string> argv, const std::string& log);

// CPU seconds (user + system) used so far by the processes `pids` and their direct children
// (a worker's measurement child), from /proc; with `runqueue_s`, also the seconds their main
// threads spent runnable but waiting for a CPU (schedstat).
double TreeCpuSeconds(const std::vector<pid_t>& pids, double* runqueue_s = nullptr);
// CPU seconds (user + system) of this process so far.
double ProcessCpuSeconds();
// CPU seconds (user + system) of this process's threads so far, summed by thread name (lathed's
// threads are named: lathe-job, lathe-search, lathe-report, ...; gRPC's nexting_thread, ...).
std::map<std::string, double> ThreadCpuByName();

}  // namespace lathe::bench

#endif  // LATHE_BENCH_SERVICE_HARNESS_H_
