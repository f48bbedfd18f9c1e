// \file
// Tuning targets as users, jobs and traces name them, parsed once into a value:
//   cpu             this machine's CPU
//   cuda, cuda:N    GPU N of the machine that measures (cuda is GPU 0)
//   cuda:sm_XX      a GPU architecture (code is built for it; any GPU of it may measure)
//   cuda-emu:sm_XX  the GPU emulator for that architecture (gpuemu/): its own device class,
//                   never mixed with real GPUs
// and the device classes records are keyed by, classified by kind ("cpu:<model>:<isa>:<N>c",
// a real GPU's "cuda:<...>", the emulator's "cuda-emu:sm_XX").
#ifndef LATHE_IR_TARGET_H_
#define LATHE_IR_TARGET_H_

#include <string>

#include "absl/status/statusor.h"

namespace lathe::ir {

enum class TargetKind { kCpu, kCuda, kCudaEmu };

struct Target {
  TargetKind kind = TargetKind::kCpu;
  // kCuda: the GPU's ordinal, or -1 when the target names an architecture instead.
  int ordinal = -1;
  // "sm_XX" for cuda:sm_XX and cuda-emu:sm_XX; empty otherwise.
  std::string arch;

  bool is_gpu() const { return kind != TargetKind::kCpu; }
  bool emulated() const { return kind == TargetKind::kCudaEmu; }
  // The canonical text ("cuda" comes back as "cuda:0").
  std::string ToString() const;
  // The CUDA target the code is built for: cuda:sm_XX for cuda-emu:sm_XX, itself otherwise.
  Target Built() const;

  friend bool operator==(const Target& a, const Target& b) {
    return a.kind == b.kind && a.ordinal == b.ordinal && a.arch == b.arch;
  }
};

// Parses one of the forms above; InvalidArgument naming the text and the accepted forms.
absl::StatusOr<Target> ParseTarget(const std::string& text);

// "sm_", two or three digits, and optionally 'a' or 'f' (sm_80, sm_90a, sm_100, sm_120f).
bool IsCudaArch(const std::string& arch);

// The kind of a device class: "cpu:..." is kCpu, "cuda-emu:..." kCudaEmu, "cuda:..." kCuda;
// InvalidArgument for anything else.
absl::StatusOr<TargetKind> DeviceClassKind(const std::string& device_class);

// The target a device class's records were measured for: cpu for "cpu:...", the emulator for
// "cuda-emu:sm_XX", and cuda:sm_XX for a GPU's "cuda:<name> (sm_XX)" (as lathe-worker registers
// one). InvalidArgument, naming the class, for anything else.
absl::StatusOr<Target> TargetOfDeviceClass(const std::string& device_class);

}  // namespace lathe::ir

#endif  // LATHE_IR_TARGET_H_
