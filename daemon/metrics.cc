#include "daemon/metrics.h"

#include <exception>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace lathe::daemon {

struct Metrics::Impl {
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
  prometheus::Family<prometheus::Gauge>* workers = nullptr;
  prometheus::Gauge* idle = nullptr;
  prometheus::Gauge* busy = nullptr;
  prometheus::Gauge* lost = nullptr;
  prometheus::Gauge* queue = nullptr;
  prometheus::Gauge* leases = nullptr;
  prometheus::Family<prometheus::Counter>* results = nullptr;
  std::mutex results_mu;  // guards the lazy Add of a label set
  std::map<std::string, prometheus::Counter*, std::less<>> by_class;
  prometheus::Counter* leases_granted = nullptr;
  prometheus::Counter* tasks_leased = nullptr;
  prometheus::Counter* reports = nullptr;
  prometheus::Counter* remeasured_ok = nullptr;
  prometheus::Counter* remeasured_failed = nullptr;
  prometheus::Histogram* dispatch = nullptr;
};

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Create(const std::string& listen,
                                                         const std::string& token) {
  auto impl = std::make_unique<Impl>();
  prometheus::Registry& r = *impl->registry;
  impl->workers = &prometheus::BuildGauge()
                       .Name("lathed_workers")
                       .Help("Registered workers by state")
                       .Register(r);
  impl->idle = &impl->workers->Add({{"state", "idle"}});
  impl->busy = &impl->workers->Add({{"state", "busy"}});
  impl->lost = &impl->workers->Add({{"state", "lost"}});
  impl->queue = &prometheus::BuildGauge()
                     .Name("lathed_queue_depth")
                     .Help("Tasks queued, not leased")
                     .Register(r)
                     .Add({});
  impl->leases = &prometheus::BuildGauge()
                      .Name("lathed_active_leases")
                      .Help("Leases with unreported tasks")
                      .Register(r)
                      .Add({});
  impl->results = &prometheus::BuildCounter()
                       .Name("lathed_results_total")
                       .Help("Results stored, by error class")
                       .Register(r);
  impl->leases_granted = &prometheus::BuildCounter()
                              .Name("lathed_leases_granted_total")
                              .Help("Non-empty leases granted")
                              .Register(r)
                              .Add({});
  impl->tasks_leased = &prometheus::BuildCounter()
                            .Name("lathed_tasks_leased_total")
                            .Help("Tasks handed out in leases")
                            .Register(r)
                            .Add({});
  impl->reports = &prometheus::BuildCounter()
                       .Name("lathed_reports_total")
                       .Help("Report calls handled")
                       .Register(r)
                       .Add({});
  auto& remeasures = prometheus::BuildCounter()
                         .Name("lathed_remeasures_total")
                         .Help("Re-timings of best records reported, by result (ok: repeats added)")
                         .Register(r);
  impl->remeasured_ok = &remeasures.Add({{"result", "ok"}});
  impl->remeasured_failed = &remeasures.Add({{"result", "failed"}});
  impl->dispatch = &prometheus::BuildHistogram()
                        .Name("lathed_dispatch_latency_seconds")
                        .Help("Handling time of Lease calls that granted tasks")
                        .Register(r)
                        .Add({}, prometheus::Histogram::BucketBoundaries{
                                     1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1});
  if (!listen.empty()) {
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(listen);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("metrics: cannot listen on ", listen, ": ", e.what()));
    }
    if (!token.empty()) {
      // Any user name; the password is the token, compared in constant time.
      impl->exposer->RegisterAuth(
          [token](const std::string& /*user*/, const std::string& password) {
            if (password.size() != token.size()) return false;
            unsigned char diff = 0;
            for (size_t i = 0; i < token.size(); ++i) {
              diff |= static_cast<unsigned char>(password[i] ^ token[i]);
            }
            return diff == 0;
          },
          "lathed");
    }
    impl->exposer->RegisterCollectable(impl->registry);
    std::vector<int> ports = impl->exposer->GetListeningPorts();
    if (!ports.empty()) impl->port = ports.front();
  }
  return std::unique_ptr<Metrics>(new Metrics(std::move(impl)));
}

Metrics::Metrics(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Metrics::~Metrics() = default;

int Metrics::port() const { return impl_->port; }

void Metrics::SetWorkers(int64_t idle, int64_t busy, int64_t lost) {
  impl_->idle->Set(static_cast<double>(idle));
  impl_->busy->Set(static_cast<double>(busy));
  impl_->lost->Set(static_cast<double>(lost));
}
void Metrics::SetQueueDepth(int64_t tasks) { impl_->queue->Set(static_cast<double>(tasks)); }
void Metrics::SetActiveLeases(int64_t leases) { impl_->leases->Set(static_cast<double>(leases)); }

void Metrics::AddResult(std::string_view error_class) {
  std::lock_guard<std::mutex> lock(impl_->results_mu);
  auto it = impl_->by_class.find(error_class);
  if (it == impl_->by_class.end()) {
    prometheus::Counter* c = &impl_->results->Add({{"error_class", std::string(error_class)}});
    it = impl_->by_class.emplace(std::string(error_class), c).first;
  }
  it->second->Increment();
}

void Metrics::AddLeaseGranted(int64_t tasks) {
  impl_->leases_granted->Increment();
  impl_->tasks_leased->Increment(static_cast<double>(tasks));
}
void Metrics::AddReport() { impl_->reports->Increment(); }
void Metrics::AddRemeasure(bool ok) {
  (ok ? impl_->remeasured_ok : impl_->remeasured_failed)->Increment();
}
void Metrics::ObserveDispatchLatency(double seconds) { impl_->dispatch->Observe(seconds); }

}  // namespace lathe::daemon
