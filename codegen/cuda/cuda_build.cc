#include "codegen/cuda/cuda_build.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "codegen/cuda/contraction.h"
#include "codegen/cuda/nvrtc.h"
#include "codegen/lower.h"

namespace lathe::codegen::cuda {

namespace {

std::string Commented(const std::string& text) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "// ", line, "\n");
  }
  return out;
}

}  // namespace

absl::StatusOr<CudaSource> BuildCudaSource(const ir::Schedule& sch, const std::string& name) {
  for (const ir::Stage& s : sch.stages()) {
    if (!s.tensorize.empty()) return GenerateContraction(sch, name);
  }
  auto f = Lower(sch, name, LowerOptions::ForTarget(ir::TargetKind::kCuda));
  if (!f.ok()) return f.status();
  return GenerateCuda(*f);
}

absl::StatusOr<std::string> BuildCudaText(const ir::Schedule& sch, const std::string& name) {
  auto src = BuildCudaSource(sch, name);
  if (!src.ok()) return src.status();
  return Commented(ToText(src->plan)) + src->source;
}

absl::StatusOr<std::string> BuildPtx(const ir::Schedule& sch, const std::string& name,
                                     const std::string& arch) {
  auto src = BuildCudaSource(sch, name);
  if (!src.ok()) return src.status();
  auto ptx = CompileToPtx(src->source, arch);
  if (!ptx.ok()) return ptx.status();
  return Commented(ToText(src->plan)) + *ptx;
}

absl::StatusOr<std::string> ArchOfTarget(const ir::Target& target) {
  if (target.kind == ir::TargetKind::kCuda && !target.arch.empty()) {
    if (auto d = ParseArch(target.arch); !d.ok()) return d.status();
    return target.arch;
  }
  return absl::InvalidArgumentError("target '" + target.ToString() +
                                    "' names no cuda architecture (expected cuda:sm_XX)");
}

}  // namespace lathe::codegen::cuda
