// \file
// `lathe verify --target cuda:sm_XX --workload SPEC [--schedule default|rule | --trace FILE |
// --random N [--seed S]] [--gpu-math fp32|tf32] [--json]`: proves GPU schedules correct without a
// GPU. For each schedule (the default one, the GPU search space's rule-picked candidate, a trace
// file, or N candidates of the GPU search space for the architecture), the CUDA C is generated, its
// launch checked against the architecture's limits, compiled by NVRTC with ptxas's figures
// (registers, spills, shared memory, blocks per SM) checked against them, run on the GPU emulator
// on seeded random inputs and compared with the reference (gpuemu/verify.h). One line per schedule
// on stdout (or one JSON object).
#ifndef LATHE_TOOLS_CLI_VERIFY_H_
#define LATHE_TOOLS_CLI_VERIFY_H_

#include <cstdint>
#include <string>

namespace lathe::tools {

struct VerifyCliOptions {
  std::string target;             // --target cuda:sm_XX
  std::string workload;           // --workload SPEC
  std::string schedule;           // --schedule default (when nothing else is given) | rule
  std::string trace_file;         // --trace FILE
  int random = 0;                 // --random N
  uint64_t seed = 1;              // --seed S
  bool json = false;              // --json
  std::string gpu_math = "fp32";  // --gpu-math fp32|tf32: tf32 lets the rule and --random use
                                  // TF32 tensor cores, checked with the TF32 tolerance
};

// Returns the exit status: 0 when every schedule agrees with the reference, 1 when one does
// not (stderr names the schedule and the first wrong element) or when this machine cannot
// verify (no NVRTC, no host compiler), 2 for usage errors (bad spec, target or options).
int RunVerify(const VerifyCliOptions& options);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_VERIFY_H_
