// \file
// The host CPU: model, vector ISA, cores, caches, and the device class string that keys
// tuning records (CONTRACT.md "Targets").
#ifndef LATHE_CODEGEN_HOST_H_
#define LATHE_CODEGEN_HOST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lathe::codegen {

struct CpuInfo {
  std::string model;                  // e.g. "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
  std::string llvm_cpu;               // LLVM's name for the host CPU, e.g. "icelake-server"
  std::vector<std::string> features;  // LLVM feature strings enabled on the host ("+avx512f", ...)
  std::string isa;        // widest vector ISA: "avx512", "avx2", "sse4.2", "neon", "scalar"
  int vector_bits = 128;  // width of the widest float vector register
  // Width the core executes one vector operation at: vector_bits, except where the core splits
  // a vector into halves (AMD Zen 4 runs a 512-bit operation as two 256-bit ones: 256 there).
  // Where it equals vector_bits, an operation on part of a vector costs as much as on a whole.
  int datapath_bits = 128;
  int cores = 1;  // usable cores (affinity mask)
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
};

// The environment variable that caps the vector ISA lathe generates code for below the host's:
// "avx2" on an AVX-512 machine builds, tunes and keys records as an AVX2 machine of the same
// model would (8 lanes, 16 registers, no AVX-512 instruction): code for a fleet of older CPUs,
// or the AVX2 code path measured on a newer one. "host" (or unset) is the host's own ISA.
inline constexpr char kCpuIsaEnv[] = "LATHE_CPU_ISA";

// Detected once and cached; thread-safe. With $LATHE_CPU_ISA set, the ISA, vector width and
// features are the capped ones.
const CpuInfo& HostCpu();

// OK, or InvalidArgument naming $LATHE_CPU_ISA's value when it is not one of host, avx2,
// avx512 or asks for an ISA this CPU lacks (HostCpu() then describes the host uncapped). The
// command-line tools check it before anything else.
absl::Status CheckCpuIsaCap();

// HostCpu()'s features as LLVM takes them: "+avx2,-avx512f,...".
std::string HostFeatureString();

// "cpu:<model>:<isa>:<N>c" with the model's whitespace collapsed, for example
// "cpu:Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz:avx512:2c".
std::string CpuDeviceClass(const CpuInfo& info);
inline std::string HostDeviceClass() { return CpuDeviceClass(HostCpu()); }

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_HOST_H_
