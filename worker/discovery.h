// \file
// Device discovery for the measurement worker: the host CPU (model, vector ISA, cores,
// caches, peak throughput) and the NVIDIA GPUs the CUDA driver reports, and the selection of
// the devices a worker registers (`--device cpu|cuda|cuda:N`, repeatable).
//
// A GPU can measure (`can_measure`) when the CUDA driver loads and reports the device; its
// measurement child must then be told which GPU to use: MeasurerOptionsFor.
#ifndef LATHE_WORKER_DISCOVERY_H_
#define LATHE_WORKER_DISCOVERY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"
#include "worker/measurer.h"

namespace lathe::worker {

// One device this worker offers.
struct Device {
  lathe::v1::DeviceInfo info;  // what Register sends
  std::string details;         // one line for the log: caches, memory, SMs, ...
  bool can_measure = false;    // false: registered, but no tasks are leased for it
  std::string why_not;         // why it cannot measure, when it cannot
};

// A parsed `--device` value: "cpu", "cuda" (GPU 0) or "cuda:N".
struct DeviceSelector {
  std::string kind;  // "cpu" or "cuda"
  int index = 0;
};

// Parses one `--device` value; InvalidArgument naming the value when it is none of the above.
absl::StatusOr<DeviceSelector> ParseDeviceSelector(const std::string& text);

// The host CPU as a device: class HostDeviceClass(), peak from HostPeakGflops().
Device DescribeCpu();

// The GPUs the CUDA driver reports, in ordinal order; empty when there is no driver or the
// CUDA backend was not built. Device class "cuda:<name> (sm_XX)".
std::vector<Device> DiscoverGpus();

// The options of the measurer for `device`: `base` with the GPU ordinal of a cuda device
// (one measurement child per GPU).
MeasurerOptions MeasurerOptionsFor(const Device& device, MeasurerOptions base);

// The devices named by `selectors` (each parsed with ParseDeviceSelector), in the order
// given, duplicates dropped; no selectors: the CPU only (GPUs are opt-in). Fails with
// InvalidArgument for a malformed selector and NotFound for a GPU that is not present, saying which
// GPUs there are.
absl::StatusOr<std::vector<Device>> SelectDevices(const std::vector<std::string>& selectors);

}  // namespace lathe::worker

#endif  // LATHE_WORKER_DISCOVERY_H_
