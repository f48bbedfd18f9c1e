// \file
// The host CPU: model, vector ISA, cores, caches, and the device class string that keys
// tuning records (CONTRACT.md "Targets").
#ifndef LATHE_CODEGEN_HOST_H_
#define LATHE_CODEGEN_HOST_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lathe::codegen {

struct CpuInfo {
  std::string model;                  // e.g. "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
  std::string llvm_cpu;               // LLVM's name for the host CPU, e.g. "icelake-server"
  std::vector<std::string> features;  // LLVM feature strings enabled on the host ("+avx512f", ...)
  std::string isa;        // widest vector ISA: "avx512", "avx2", "sse4.2", "neon", "scalar"
  int vector_bits = 128;  // width of the widest float vector register
  int cores = 1;          // usable cores (affinity mask)
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
};

// Detected once and cached; thread-safe.
const CpuInfo& HostCpu();

// "cpu:<model>:<isa>:<N>c" with the model's whitespace collapsed, for example
// "cpu:Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz:avx512:2c".
std::string CpuDeviceClass(const CpuInfo& info);
inline std::string HostDeviceClass() { return CpuDeviceClass(HostCpu()); }

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_HOST_H_
