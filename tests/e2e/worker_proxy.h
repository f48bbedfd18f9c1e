// \file
// A WorkerService between one lathe-worker and lathed: forwards every call and lets a test act
// on the leases on their way back (attach the test-only fault to tasks, or kill or freeze the
// worker the moment it has been handed work). lathed needs no test hook for any of this.
#ifndef LATHE_TESTS_E2E_WORKER_PROXY_H_
#define LATHE_TESTS_E2E_WORKER_PROXY_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "lathe/v1/service.grpc.pb.h"

namespace lathe::e2e {

class WorkerProxy final : public lathe::v1::WorkerService::Service {
 public:
  // Called (under the proxy's lock) with every lease that carries tasks, numbered from 1,
  // before the worker sees it; may edit it.
  using LeaseHook = std::function<void(int n, lathe::v1::LeaseResponse* lease)>;

  // With `max_receive_bytes` > 0, the proxy refuses larger messages from the worker
  // (RESOURCE_EXHAUSTED, as lathed does over its own limit).
  WorkerProxy(const std::string& daemon, LeaseHook hook, int max_receive_bytes = 0)
      : stub_(lathe::v1::WorkerService::NewStub(
            grpc::CreateChannel(daemon, grpc::InsecureChannelCredentials()))),
        hook_(std::move(hook)) {
    grpc::ServerBuilder builder;
    if (max_receive_bytes > 0) builder.SetMaxReceiveMessageSize(max_receive_bytes);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~WorkerProxy() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Leases with tasks and Report calls forwarded so far.
  int leases() {
    std::lock_guard<std::mutex> lock(mu_);
    return leases_;
  }
  int reports() {
    std::lock_guard<std::mutex> lock(mu_);
    return reports_;
  }

  // The id the daemon gave the worker behind this proxy.
  std::string worker_id() {
    std::lock_guard<std::mutex> lock(mu_);
    return worker_id_;
  }

  grpc::Status Register(grpc::ServerContext* ctx, const lathe::v1::RegisterRequest* req,
                        lathe::v1::RegisterResponse* resp) override {
    grpc::ClientContext c;
    c.set_deadline(ctx->deadline());
    grpc::Status s = stub_->Register(&c, *req, resp);
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) worker_id_ = resp->worker_id();
    return s;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const lathe::v1::HeartbeatRequest* req,
                         lathe::v1::HeartbeatResponse* resp) override {
    grpc::ClientContext c;
    c.set_deadline(ctx->deadline());
    return stub_->Heartbeat(&c, *req, resp);
  }
  grpc::Status Report(grpc::ServerContext* ctx, const lathe::v1::ReportRequest* req,
                      lathe::v1::ReportResponse* resp) override {
    grpc::ClientContext c;
    c.set_deadline(ctx->deadline());
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++reports_;
    }
    return stub_->Report(&c, *req, resp);
  }
  grpc::Status Release(grpc::ServerContext* ctx, const lathe::v1::ReleaseRequest* req,
                       lathe::v1::ReleaseResponse* resp) override {
    grpc::ClientContext c;
    c.set_deadline(ctx->deadline());
    return stub_->Release(&c, *req, resp);
  }
  grpc::Status Lease(grpc::ServerContext* ctx, const lathe::v1::LeaseRequest* req,
                     lathe::v1::LeaseResponse* resp) override {
    grpc::ClientContext c;
    c.set_deadline(ctx->deadline());
    grpc::Status s = stub_->Lease(&c, *req, resp);
    if (!s.ok() || resp->tasks_size() == 0) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (hook_) hook_(++leases_, resp);
    return s;
  }

 private:
  std::unique_ptr<lathe::v1::WorkerService::Stub> stub_;
  LeaseHook hook_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  int leases_ = 0;
  int reports_ = 0;
  std::string worker_id_;
};

}  // namespace lathe::e2e

#endif  // LATHE_TESTS_E2E_WORKER_PROXY_H_
