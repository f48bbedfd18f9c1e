// \file
// `lathe build --model`: a compiled model written as one self-contained shared library
// (codegen/model_library.h): its kernels from the ScheduleSource's schedules, the plan, the
// weights inside. The library exports
//   int lathe_model_run(const float* const* inputs, float* const* outputs);  // 0: success
//   const char* lathe_model_io(void);  // {"inputs":[{"name","shape"}...],"outputs":[...]}
// and is safe to call from several threads.
#ifndef LATHE_MODEL_LIBRARY_H_
#define LATHE_MODEL_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/executor.h"
#include "model/plan.h"

namespace lathe::model {

// Writes the library to `path`; `origins` (optional) receives each kernel's schedule origin.
absl::Status BuildModelLibrary(const Plan& plan, const ScheduleSource& schedules,
                               const std::string& path, std::vector<std::string>* origins);

}  // namespace lathe::model

#endif  // LATHE_MODEL_LIBRARY_H_
