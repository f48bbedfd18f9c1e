// Concats whose inputs are slabs of their output computed in place (ConcatsInPlace).
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/kernels.h"

namespace lathe::model {
KernelDesc CopyKernel(const std::vector<int64_t>& shape, const std::string& in,
                      const std::string& out, std::vector<std::string> nodes) {
  KernelDesc copy;
  copy.op = "ewise";
  copy.params["a"] = absl::StrJoin(shape.empty() ? std::vector<int64_t>{1} : shape, "x");
  copy.inputs = {in};
  copy.output = out;
  copy.nodes = std::move(nodes);
  return copy;
}

std::vector<int64_t> ParseDims(const std::string& text) {
  std::vector<int64_t> dims;
  for (absl::string_view d : absl::StrSplit(text, 'x')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(d, &v) || v < 0) return {};
    dims.push_back(v);
  }
  return dims;
}

void ConcatsInPlace(Graph& g, Lowered& l) {
  const std::set<std::string> graph_inputs(g.inputs.begin(), g.inputs.end());
  const std::set<std::string> graph_outputs(g.outputs.begin(), g.outputs.end());
  // How many kernels write each value, and which values any alias names as its base.
  std::map<std::string, int> writers;
  for (const KernelDesc& k : l.kernels) ++writers[k.output];
  std::set<std::string> alias_bases;
  for (const auto& [v, a] : l.aliases) alias_bases.insert(a.base);
  // A storage root that a kernel writes whole, once, and nothing else owns.
  auto placeable = [&](const std::string& v) {
    auto w = writers.find(v);
    return !graph_inputs.count(v) && !graph_outputs.count(v) && !g.Const(v) &&
           !l.aliases.count(v) && w != writers.end() && w->second == 1;
  };
  std::set<std::string> placed;
  std::vector<KernelDesc> kept;
  kept.reserve(l.kernels.size());
  for (KernelDesc& k : l.kernels) {
    if (k.op != "concat" || !placeable(k.output)) {
      kept.push_back(std::move(k));
      continue;
    }
    // Every input a contiguous slab of the output: nothing but extent-1 dims outside the
    // concat axis (n = 1, axis 1 in NCHW or nchw{b}c).
    int64_t axis = -1;
    bool ok = absl::SimpleAtoi(k.params["axis"], &axis) && axis >= 0;
    std::vector<int64_t> offsets;
    std::vector<bool> in_place;
    int64_t offset = 0;
    std::set<std::string> seen;
    const std::vector<std::string> shapes = absl::StrSplit(k.params["inputs"], '+');
    ok = ok && shapes.size() == k.inputs.size();
    for (size_t i = 0; ok && i < k.inputs.size(); ++i) {
      const std::vector<int64_t> dims = ParseDims(shapes[i]);
      ok = static_cast<int64_t>(dims.size()) > axis;
      for (int64_t d = 0; ok && d < axis; ++d) ok = dims[d] == 1;
      const std::string& in = k.inputs[i];
      ok = ok && NumElements(g.Find(in)->shape) == NumElements(dims);
      in_place.push_back(ok && placeable(in) && !placed.count(in) && seen.insert(in).second);
      offsets.push_back(offset);
      if (ok) offset += NumElements(dims);
    }
    if (!ok || offset != NumElements(g.Find(k.output)->shape) ||
        std::count(in_place.begin(), in_place.end(), true) == 0) {
      kept.push_back(std::move(k));
      continue;
    }
    // Each input is written where the concat would have copied it; one that cannot be (a
    // view, a graph input, one read twice) is copied there by an elementwise copy, where the
    // concat kernel would have copied every input (ShuffleNetV2's concat of the split's half, a
    // view, and the branch's output: half the copy).
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      if (in_place[i]) continue;
      Value v = *g.Find(k.inputs[i]);
      v.name = absl::StrCat(k.output, ".in", i);
      v.constant.reset();
      g.values[v.name] = v;
      std::vector<std::string> nodes = k.nodes;
      nodes.push_back(absl::StrCat("input ", i, " copied into its slab"));
      l.aliases[v.name] = Alias{k.output, offsets[i]};
      kept.push_back(CopyKernel(v.shape, k.inputs[i], v.name, std::move(nodes)));
    }
    for (size_t i = 0; i < k.inputs.size(); ++i) {
      if (!in_place[i]) continue;
      const std::string& in = k.inputs[i];
      l.aliases[in] = Alias{k.output, offsets[i]};
      if (alias_bases.count(in)) {
        for (auto& [v, a] : l.aliases) {
          if (a.base == in && v != in) a = Alias{k.output, a.offset + offsets[i]};
        }
      }
      placed.insert(in);
    }
    alias_bases.insert(k.output);
  }
  l.kernels = std::move(kept);
}

}  // namespace lathe::model
