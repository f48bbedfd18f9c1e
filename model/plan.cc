#include "model/plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "codegen/cpu_kernel.h"
#include "nlohmann/json.hpp"

namespace lathe::model {
namespace {

constexpr int64_t kAlign = 64;
int64_t AlignUp(int64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// Arena values start where the measurement child places a kernel's buffers when it times a
// record, so that each step runs as its record was timed.
constexpr int64_t kValueOffset = static_cast<int64_t>(codegen::kTimedBufferOffset);

struct Interval {
  std::string root;
  int64_t bytes = 0;
  int first = 0, last = 0;
  int64_t offset = -1;
};

}  // namespace

std::string Plan::IoJson() const {
  nlohmann::json j;
  auto list = [](const std::vector<IoInfo>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const IoInfo& io : v) a.push_back({{"name", io.name}, {"shape", io.shape}});
    return a;
  };
  j["inputs"] = list(inputs);
  j["outputs"] = list(outputs);
  return j.dump();
}

absl::StatusOr<Plan> MakePlan(const Program& p) {
  const Graph& g = p.graph;
  Plan plan;
  std::map<std::string, int32_t> input_index, output_index;
  for (const std::string& in : g.inputs) {
    input_index[in] = static_cast<int32_t>(plan.inputs.size());
    plan.inputs.push_back({in, g.Find(in)->shape});
  }
  for (const std::string& out : g.outputs) {
    output_index[StorageOf(p, out).base] = static_cast<int32_t>(plan.outputs.size());
    plan.outputs.push_back({out, g.Find(out)->shape});
  }
  // Lifetimes of the arena values: from the kernel that writes them to the last reader.
  std::map<std::string, Interval> live;
  for (int i = 0; i < static_cast<int>(p.kernels.size()); ++i) {
    const KernelCall& k = p.kernels[i];
    for (size_t a = 0; a < k.args.size(); ++a) {
      const std::string root = StorageOf(p, k.args[a]).base;
      if (input_index.count(root) || output_index.count(root) || g.Const(root)) continue;
      auto it = live.find(root);
      if (it == live.end()) {
        if (a + 1 != k.args.size()) {
          return absl::InternalError(
              absl::StrCat("value '", root, "' is read before it is written"));
        }
        Interval iv;
        iv.root = root;
        iv.bytes = AlignUp(kValueOffset + NumElements(g.Find(root)->shape) * 4);
        iv.first = iv.last = i;
        live[root] = iv;
      } else {
        it->second.last = i;
      }
    }
  }
  std::vector<Interval*> order;
  for (auto& [name, iv] : live) order.push_back(&iv);
  std::stable_sort(order.begin(), order.end(),
                   [](const Interval* a, const Interval* b) { return a->bytes > b->bytes; });
  std::vector<Interval*> placed;
  for (Interval* iv : order) {
    // Busy ranges of placed values that are live at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Interval* o : placed) {
      if (o->last < iv->first || iv->last < o->first) continue;
      busy.push_back({o->offset, o->offset + o->bytes});
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + iv->bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    iv->offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + iv->bytes);
    placed.push_back(iv);
  }
  // Weights: every constant a kernel reads, once.
  std::map<std::string, int64_t> weight_offset;
  auto weight = [&](const std::string& name) {
    auto it = weight_offset.find(name);
    if (it != weight_offset.end()) return it->second;
    const ConstData& c = *g.Const(name);
    const int64_t off = AlignUp(static_cast<int64_t>(plan.weights.size()));
    plan.weights.resize(off);
    std::vector<float> f = c.is_int ? std::vector<float>(c.i.begin(), c.i.end()) : c.f;
    plan.weights.append(reinterpret_cast<const char*>(f.data()), f.size() * sizeof(float));
    weight_offset[name] = off;
    return off;
  };
  std::map<std::string, int32_t> kernel_index;
  for (const KernelCall& k : p.kernels) {
    PlanStep step;
    auto it = kernel_index.find(k.spec);
    if (it == kernel_index.end()) {
      it = kernel_index.emplace(k.spec, static_cast<int32_t>(plan.kernels.size())).first;
      plan.kernels.push_back(k.spec);
    }
    step.kernel = it->second;
    step.nodes = k.nodes;
    for (const std::string& arg : k.args) {
      const Alias a = StorageOf(p, arg);
      BufferRef ref;
      ref.offset = a.offset * 4;
      if (auto in = input_index.find(a.base); in != input_index.end()) {
        ref.kind = BufferRef::kInput;
        ref.index = in->second;
      } else if (auto out = output_index.find(a.base); out != output_index.end()) {
        ref.kind = BufferRef::kOutput;
        ref.index = out->second;
      } else if (g.Const(a.base)) {
        ref.kind = BufferRef::kWeights;
        ref.offset += weight(a.base);
      } else {
        ref.kind = BufferRef::kArena;
        ref.offset += live.at(a.base).offset + kValueOffset;
      }
      step.args.push_back(ref);
    }
    plan.steps.push_back(std::move(step));
  }
  plan.weights.resize(AlignUp(static_cast<int64_t>(plan.weights.size())));
  return plan;
}

}  // namespace lathe::model
