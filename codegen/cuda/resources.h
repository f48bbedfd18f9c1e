// \file
// What a compiled kernel uses (ptxas's figures: registers, spills, stack, static shared memory,
// barriers, read from the `--ptxas-options=-v` report NVRTC returns), the per-SM resources of
// an architecture, occupancy (resident blocks per SM and what limits it), and the check that
// refuses a program over the device's limits with those figures as the evidence.
#ifndef LATHE_CODEGEN_CUDA_RESOURCES_H_
#define LATHE_CODEGEN_CUDA_RESOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gpu_schedule.h"

namespace lathe::codegen::cuda {

// ptxas's figures for one kernel.
struct KernelResources {
  std::string name;
  int registers = 0;
  int64_t spill_stores = 0;  // bytes
  int64_t spill_loads = 0;   // bytes
  int64_t stack_frame = 0;   // bytes per thread
  int64_t shared_bytes = 0;  // static shared memory per block
  int barriers = 0;
};

// Reads the kernels' figures from a ptxas verbose report ("Compiling entry function 'k'",
// "N bytes stack frame, N bytes spill stores, N bytes spill loads", "Used N registers, used N
// barriers, N bytes smem"), in the order the report names them. Lines it does not know are
// ignored; an entry without a "Used" line keeps zeros.
std::vector<KernelResources> ParsePtxasReport(const std::string& report);

// A CUBIN and what ptxas reported for each of its kernels.
struct CompiledCubin {
  std::string cubin;
  std::vector<KernelResources> kernels;
  double compile_ms = 0;
};

// CompileToCubin with ptxas's verbose report parsed. Fails as CompileToCubin.
absl::StatusOr<CompiledCubin> CompileToCubinWithResources(const std::string& source,
                                                          const std::string& arch);

// Per-SM resources of an architecture (the CUDA occupancy tables).
struct SmResources {
  int64_t registers = 65536;
  int64_t shared_bytes = 228 * 1024;  // per SM, for blocks
  int64_t reserved_shared_per_block = 1024;
  int max_threads = 2048;
  int max_blocks = 32;
  GpuLimits limits;  // per block, opt-in shared memory included
};

// The figures of `arch` ("sm_90"); the sm_90 figures for architectures it does not know.
// InvalidArgument for a malformed arch.
absl::StatusOr<SmResources> SmResourcesFor(const std::string& arch);

// Resident blocks per SM of a kernel with `threads` per block, `registers` per thread and
// `shared_bytes` of shared memory per block (0 when it cannot run at all), and what limits
// it ("registers", "shared memory", "threads", "blocks").
struct Occupancy {
  int blocks_per_sm = 0;
  std::string limited_by;
};
Occupancy OccupancyOf(const SmResources& sm, int64_t threads, int registers, int64_t shared_bytes);

// Checks each kernel of `plan` against `limits` with ptxas's figures: registers per thread
// and per block (registers x threads, rounded as the hardware allocates them), static shared
// memory per block, and that a block fits on an SM at all. ResourceExhausted naming the kernel
// and the figures for the first one over; InvalidArgument when `resources` lacks a kernel.
absl::Status CheckKernelResources(const LaunchPlan& plan,
                                  const std::vector<KernelResources>& resources,
                                  const SmResources& sm);

// One line per kernel: "k0: 128 registers, 0 bytes spilled, 16384 bytes shared, 2 blocks/SM
// (registers)".
std::string ResourcesText(const LaunchPlan& plan, const std::vector<KernelResources>& resources,
                          const SmResources& sm);

}  // namespace lathe::codegen::cuda

#endif  // LATHE_CODEGEN_CUDA_RESOURCES_H_
