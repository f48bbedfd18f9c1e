// A depthwise convolution whose only reader is a 1x1 convolution, as one sepconv2d kernel
// (FuseSeparableConvs).
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "ir/workload.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

// The convolution of a conv2d kernel, read from its canonical spec; nullopt otherwise.
std::optional<ir::Conv2dParams> ConvOf(const KernelDesc& k) {
  if (k.op != "conv2d" || k.inputs.size() != 2) return std::nullopt;
  absl::StatusOr<ir::WorkloadSpec> spec = ir::ParseWorkloadSpec(k.SpecText());
  if (!spec.ok()) return std::nullopt;
  absl::StatusOr<ir::Conv2dParams> p = ir::GetConv2dParams(*spec);
  if (!p.ok()) return std::nullopt;
  return *p;
}

// A blocked depthwise convolution (the output in the input's blocks) whose epilogue reads
// per-channel tensors only.
bool BlockedDepthwise(const KernelDesc& k, const ir::Conv2dParams& p) {
  return p.blocked() && !p.plain_input && p.depthwise() && p.kblock == p.cblock &&
         !k.epilogue.Has(ir::StepKind::kRes) && !k.epilogue.Has(ir::StepKind::kResUp);
}

// A dense 1x1 convolution at stride 1 without padding, in blocks of `block`.
bool Pointwise(const ir::Conv2dParams& p, int64_t block) {
  return p.blocked() && !p.plain_input && p.groups == 1 && p.r == 1 && p.s == 1 &&
         p.stride_h == 1 && p.stride_w == 1 && !p.has_pad() && p.cblock == block;
}

}  // namespace

void FuseSeparableConvs(Graph& g, Lowered& l, int64_t min_rows) {
  const std::map<std::string, int> readers = ReaderCounts(g, l);
  std::map<std::string, size_t> reader_of;  // a value read by exactly one kernel: which
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    for (const std::string& in : l.kernels[i].inputs) reader_of[in] = i;
  }
  std::vector<bool> gone(l.kernels.size(), false);
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    const KernelDesc& dw = l.kernels[i];
    if (gone[i] || l.aliases.count(dw.output)) continue;
    const std::optional<ir::Conv2dParams> dp = ConvOf(dw);
    if (!dp || !BlockedDepthwise(dw, *dp) || dp->oh() < min_rows) continue;
    auto r = readers.find(dw.output);
    auto j = reader_of.find(dw.output);
    if (r == readers.end() || r->second != 1 || j == reader_of.end() || j->second <= i) continue;
    KernelDesc& pw = l.kernels[j->second];
    if (pw.inputs.empty() || pw.inputs[0] != dw.output) continue;
    const std::optional<ir::Conv2dParams> pp = ConvOf(pw);
    if (!pp || !Pointwise(*pp, dp->cblock)) continue;
    KernelDesc fused;
    fused.op = ir::OpName(ir::OpKind::kSepConv2d);
    for (const char* key : ir::kSepConvDepthwiseKeys) {
      auto it = dw.params.find(key);
      if (it != dw.params.end()) fused.params[key] = it->second;
    }
    fused.params["k"] = absl::StrCat(pp->k);
    if (pp->kblock != pp->cblock) fused.params["kblock"] = absl::StrCat(pp->kblock);
    fused.params["dw_epilogue"] = dw.epilogue.ToString();
    fused.inputs = dw.inputs;
    for (ir::StepKind s : dw.epilogue.TensorSteps()) fused.inputs.push_back(dw.step_inputs.at(s));
    fused.inputs.push_back(pw.inputs[1]);
    fused.epilogue = pw.epilogue;
    fused.step_inputs = pw.step_inputs;
    fused.output = pw.output;
    fused.nodes = dw.nodes;
    fused.nodes.insert(fused.nodes.end(), pw.nodes.begin(), pw.nodes.end());
    pw = std::move(fused);
    gone[i] = true;
  }
  std::vector<KernelDesc> kept;
  kept.reserve(l.kernels.size());
  for (size_t i = 0; i < l.kernels.size(); ++i) {
    if (!gone[i]) kept.push_back(std::move(l.kernels[i]));
  }
  l.kernels = std::move(kept);
}

}  // namespace lathe::model
