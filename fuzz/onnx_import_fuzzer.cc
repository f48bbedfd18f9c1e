// Fuzz target: an ONNX file as `lathe model tasks` reads it. The input is the bytes of a
// serialized ModelProto: imported (size checks, libonnx's checker, attribute validation,
// lathe's shape inference and constant folding, libonnx's shape inference), compiled to
// kernels in the plain and the blocked layout, and its tasks extracted. Any error status is a
// fine answer; a crash, a sanitizer report, a leak or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/compile.h"
#include "model/onnx_import.h"
#include "model/tasks.h"

namespace {

void CompileAndExtract(const lathe::model::Graph& g, const lathe::model::CompileOptions& o) {
  absl::StatusOr<lathe::model::Program> p = lathe::model::CompileGraph(g, o);
  if (!p.ok()) return;
  std::vector<lathe::model::Task> tasks = lathe::model::ExtractTasks(*p);
  (void)lathe::model::ModelFlops(tasks);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<lathe::model::Graph> g = lathe::model::ImportOnnxBytes(bytes, "fuzz.onnx", {});
  if (!g.ok()) return 0;
  CompileAndExtract(*g, {});
  // As `lathe model tasks --layout blocked` on an AVX2 host: blocked activations, packed
  // weights and Winograd convolutions.
  lathe::model::CompileOptions blocked;
  blocked.block_lanes = 8;
  blocked.weight_panel = 16;
  blocked.winograd = true;
  CompileAndExtract(*g, blocked);
  return 0;
}
