#include "model/compile.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/workload.h"
#include "model/kernels.h"

namespace lathe::model {

Alias StorageOf(const Program& p, const std::string& value) {
  Alias a{value, 0};
  for (auto it = p.aliases.find(a.base); it != p.aliases.end(); it = p.aliases.find(a.base)) {
    a.offset += it->second.offset;
    a.base = it->second.base;
  }
  return a;
}

absl::StatusOr<Program> CompileGraph(Graph graph, const CompileOptions& options) {
  Program p;
  p.graph = std::move(graph);
  Graph& g = p.graph;
  if (absl::Status s = FoldBatchNorms(g); !s.ok()) return s;
  if (absl::Status s = RecognizeLayerNorms(g); !s.ok()) return s;
  absl::StatusOr<Lowered> lowered = LowerNodes(g);
  if (!lowered.ok()) return lowered.status();
  if (options.fuse) {
    FuseKernels(g, *lowered);
    ParameterizeConstants(g, *lowered);
  }
  if (options.deconv_as_conv) ConvTransposesAsConvs(g, *lowered);
  if (options.block_lanes > 1) {
    BlockLayouts(g, *lowered, options.block_lanes,
                 options.datapath_lanes > 0 ? options.datapath_lanes : options.block_lanes);
    p.layout = ActivationLayout::kBlocked;
  }
  if (options.winograd && options.block_lanes > 1) {
    WinogradConvs(g, *lowered, options.weight_panel);
  }
  if (options.fuse_separable && options.block_lanes > 1)
    FuseSeparableConvs(g, *lowered, options.separable_min_rows);
  PackMatmulWeights(g, *lowered, options.weight_panel);
  if (options.concat_in_place) ConcatsInPlace(g, *lowered);
  p.aliases = std::move(lowered->aliases);
  // Resolve alias chains so that every alias names a storage root (offsets add up).
  for (auto& [v, a] : p.aliases) {
    Alias root = StorageOf(p, a.base);
    root.offset += a.offset;
    a = root;
  }

  // Graph outputs need storage of their own that a kernel writes: copy the ones that are
  // inputs, constants, or share a root with an earlier output.
  std::set<std::string> produced, roots_taken;
  for (const KernelDesc& k : lowered->kernels) produced.insert(k.output);
  for (const std::string& o : g.outputs) {
    const Alias root = StorageOf(p, o);
    if (produced.count(root.base) && !roots_taken.count(root.base) && root.offset == 0 &&
        NumElements(g.Find(root.base)->shape) == NumElements(g.Find(o)->shape)) {
      roots_taken.insert(root.base);
      continue;
    }
    const std::string src = o + ".src";
    Value v = *g.Find(o);
    v.name = src;
    g.values[src] = v;
    if (p.aliases.count(o)) {
      p.aliases[src] = p.aliases[o];
      p.aliases.erase(o);
    } else {
      for (KernelDesc& k : lowered->kernels) {
        if (k.output == o) k.output = src;
      }
      for (auto& [name, a] : p.aliases) {
        if (a.base == o) a.base = src;
      }
      if (g.Const(o)) g.values[src].constant = g.values[o].constant;
      g.values[o].constant.reset();
    }
    lowered->kernels.push_back(CopyKernel(v.shape, src, o, {"copy of output " + o}));
  }

  for (const KernelDesc& k : lowered->kernels) {
    absl::StatusOr<ir::Workload> w = ir::MakeWorkload(k.SpecText());
    if (!w.ok()) {
      return absl::InternalError(absl::StrCat("kernel of ", absl::StrJoin(k.nodes, ", "), ": ",
                                              k.SpecText(), ": ", w.status().message()));
    }
    KernelCall call;
    call.spec = w->canonical;
    call.nodes = k.nodes;
    call.args = k.inputs;
    for (ir::StepKind s : k.epilogue.TensorSteps()) call.args.push_back(k.step_inputs.at(s));
    call.args.push_back(k.output);
    if (call.args.size() != w->args.size()) {
      return absl::InternalError(absl::StrCat(call.spec, ": ", call.args.size(),
                                              " values bound to ", w->args.size(), " arguments"));
    }
    for (size_t i = 0; i < call.args.size(); ++i) {
      const Value* v = g.Find(call.args[i]);
      if (v == nullptr || NumElements(v->shape) != NumElements(w->args[i]->shape)) {
        return absl::InternalError(absl::StrCat(
            call.spec, ": value '", call.args[i], "' ", v ? ShapeText(v->shape) : "(missing)",
            " bound to argument ", w->args[i]->name, " ", ShapeText(w->args[i]->shape)));
      }
    }
    p.kernels.push_back(std::move(call));
  }
  g.nodes.clear();
  return p;
}

}  // namespace lathe::model
