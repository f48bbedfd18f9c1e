// \file
// Device discovery for the measurement worker: the host CPU (model, vector ISA, cores,
// caches, peak throughput), the NVIDIA GPUs the CUDA driver reports, the emulated GPU of an
// architecture (`cuda-emu:sm_XX`: lathe's CUDA run on this CPU by the GPU emulator, which
// proves candidates correct; its timings are the emulator's, never GPU performance, and its
// device class keeps its records apart), and the selection of the devices a worker registers
// (`--device cpu|cuda|cuda:N|cuda-emu:sm_XX`, repeatable).
//
// A GPU can measure (`can_measure`) when the CUDA driver loads and reports the device; its
// measurement child must then be told which GPU to use: MeasurerOptionsFor. An emulated GPU
// can measure when this build has NVRTC and a host C++ compiler is found (why_not says which
// is missing).
#ifndef LATHE_WORKER_DISCOVERY_H_
#define LATHE_WORKER_DISCOVERY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lathe/v1/service.pb.h"
#include "measure/measurer.h"

namespace lathe::worker {

// One device this worker offers.
struct Device {
  lathe::v1::DeviceInfo info;  // what Register sends
  std::string details;         // one line for the log: caches, memory, SMs, ...
  bool can_measure = false;    // false: registered, but no tasks are leased for it
  std::string why_not;         // why it cannot measure, when it cannot
};

// A parsed `--device` value: "cpu", "cuda" (GPU 0), "cuda:N" or "cuda-emu:sm_XX".
struct DeviceSelector {
  std::string kind;  // "cpu", "cuda" or "cuda-emu"
  int index = 0;
  std::string arch;  // cuda-emu: "sm_90"
};

// Parses one `--device` value; InvalidArgument naming the value when it is none of the above.
absl::StatusOr<DeviceSelector> ParseDeviceSelector(const std::string& text);

// The host CPU as a device: class HostDeviceClass(), peak from HostPeakGflops().
Device DescribeCpu();

// The GPUs the CUDA driver reports, in ordinal order; empty when there is no driver or the
// CUDA backend was not built. Device class "cuda:<name> (sm_XX)".
std::vector<Device> DiscoverGpus();

// The emulated GPU of `arch` ("sm_90"): device class "cuda-emu:sm_90", kind "cuda-emu".
Device DescribeEmulatedGpu(const std::string& arch);

// Whether `device_class` is an emulated GPU's ("cuda-emu:sm_XX").
bool IsEmulatedDeviceClass(const std::string& device_class);

// The options of the measurer for `device`: `base` with the GPU ordinal of a cuda device
// (one measurement child per GPU), or the architecture an emulated one emulates.
measure::MeasurerOptions MeasurerOptionsFor(const Device& device, measure::MeasurerOptions base);

// The devices named by `selectors` (each parsed with ParseDeviceSelector), in the order
// given, duplicates dropped; no selectors: the CPU only (GPUs are opt-in). Fails with
// InvalidArgument for a malformed selector and NotFound for a GPU that is not present, saying which
// GPUs there are.
absl::StatusOr<std::vector<Device>> SelectDevices(const std::vector<std::string>& selectors);

}  // namespace lathe::worker

#endif  // LATHE_WORKER_DISCOVERY_H_
