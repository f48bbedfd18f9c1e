// Fuzz target: a workload spec as every command, job and record gives it ("matmul:m=16,..."):
// parsed, canonicalised, built into a workload (its stages and tensors), and the canonical
// text parsed again, which must give the same canonical text.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ir/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lathe::ir::WorkloadSpec> spec = lathe::ir::ParseWorkloadSpec(text);
  if (!spec.ok()) return 0;
  const std::string canonical = spec->ToString();
  absl::StatusOr<lathe::ir::WorkloadSpec> again = lathe::ir::ParseWorkloadSpec(canonical);
  if (!again.ok() || again->ToString() != canonical) {
    std::fprintf(stderr, "canonical spec '%s' does not parse back to itself: %s\n",
                 canonical.c_str(),
                 again.ok() ? again->ToString().c_str() : again.status().ToString().c_str());
    std::abort();
  }
  (void)lathe::ir::WorkloadKey(canonical);
  absl::StatusOr<lathe::ir::Workload> w = lathe::ir::MakeWorkload(*spec);
  (void)w;
  return 0;
}
