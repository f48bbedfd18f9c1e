// \file
// PP-OCRv4 det's tunable tasks at 1x3x640x640, the workload of bench_service's part 5 (a model
// job on simulated workers), embedded so that the section runs without the model.
#ifndef LATHE_BENCH_DET_TASKS_H_
#define LATHE_BENCH_DET_TASKS_H_

#include <string>
#include <utility>
#include <vector>

namespace lathe::bench {

// Workload specs and weights, from `lathe model tasks --model ch_PP-OCRv4_det_infer.onnx
// --input x=1x3x640x640 --json` (2026-11-27).
const std::vector<std::pair<std::string, double>>& DetTasks();

}  // namespace lathe::bench

#endif  // LATHE_BENCH_DET_TASKS_H_
