// \file
// `lathe build`: compiles one workload's schedule (the best database record, a trace file or
// the default schedule) into a shared library, an object file or LLVM IR (CONTRACT.md).
#ifndef LATHE_TOOLS_CLI_BUILD_H_
#define LATHE_TOOLS_CLI_BUILD_H_

#include <string>

namespace lathe::tools {

struct BuildOptions {
  std::string workload;           // --workload SPEC
  std::string out;                // --out FILE
  std::string name;               // --name SYMBOL; empty: derived from the op and the workload key
  std::string target = "cpu";     // --target
  std::string db_path;            // --db; empty: the default database
  std::string trace_file;         // --trace FILE
  std::string schedule;           // --schedule default
  std::string emit = "so";        // --emit so|obj|llvm|lowered|trace|cuda|ptx
  std::string gpu_math = "fp32";  // --gpu-math fp32|tf32: the GPU rule may use TF32 tensor cores
};

// Runs the build and returns the process exit status: 0 on success, 2 for bad usage (a
// malformed spec, conflicting options), 3 when the database has no record for the workload,
// 1 for any other failure; messages go to stderr.
int RunBuild(const BuildOptions& options);

}  // namespace lathe::tools

#endif  // LATHE_TOOLS_CLI_BUILD_H_
