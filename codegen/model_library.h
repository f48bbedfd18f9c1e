// \file
// Model libraries: the kernels of a compiled model, its plan tables and weights, and the
// embedded model runtime linked into one self-contained shared library (libc, libm only)
// that exports `int lathe_model_run(const float* const* inputs, float* const* outputs)` and
// `const char* lathe_model_io(void)` (see codegen/runtime/model_runtime.h). No LLVM type here.
#ifndef LATHE_CODEGEN_MODEL_LIBRARY_H_
#define LATHE_CODEGEN_MODEL_LIBRARY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/runtime/model_runtime.h"
#include "ir/stmt.h"

namespace lathe::codegen {

// The plan in the runtime's layout; `kernels` are the names of the functions in `funcs`
// that step.kernel indexes.
struct ModelTables {
  std::vector<std::string> kernels;
  std::vector<lathe_model_step> steps;
  std::vector<lathe_model_arg> args;
  std::string weights;  // bytes
  int64_t arena_bytes = 0;
  int32_t num_inputs = 0, num_outputs = 0;
  std::string io_json;
};

// Writes the library to `path` (atomically). Fails, writing nothing, when a function does not
// compile or the link does.
absl::Status WriteModelLibrary(const std::vector<ir::LoweredFunc>& funcs, const ModelTables& t,
                               const std::string& path);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_MODEL_LIBRARY_H_
