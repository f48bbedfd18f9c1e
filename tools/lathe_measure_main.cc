// lathe-measure: the sandboxed measurement child. Spawned by lathe::measure::Measurer, it
// reads framed MeasureRequests on stdin and answers MeasureResults on stdout; CPU candidates
// run JIT-compiled, cuda candidates on the GPU `--gpu N` names, or on the GPU emulator for
// `--emulate sm_XX` (see measure/measure_child.h).
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "codegen/host.h"
#include "measure/measure_child.h"

int main(int argc, char** argv) {
  if (absl::Status isa = lathe::codegen::CheckCpuIsaCap(); !isa.ok()) {
    std::fprintf(stderr, "lathe-measure: %s\n", std::string(isa.message()).c_str());
    return 2;
  }
  const std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<lathe::measure::ChildOptions> options = lathe::measure::ParseChildArgs(args);
  if (!options.ok()) {
    std::fprintf(stderr,
                 "lathe-measure: %s\nusage: lathe-measure [--gpu N] [--emulate sm_XX] (spawned by "
                 "lathe, lathed and lathe-worker; not run by hand)\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  return lathe::measure::RunMeasureChild(STDIN_FILENO, STDOUT_FILENO, *options);
}
