// Graph-level rewrites before lowering: BatchNormalization folded into the preceding
// convolution, and layer norms spelled out in elementwise nodes recognised
// (model/kernels.h).
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

// Node index of each value's producer, and how many nodes (and graph outputs) read it.
struct Uses {
  std::map<std::string, size_t> producer;
  std::map<std::string, int> readers;

  explicit Uses(const Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const std::string& o : g.nodes[i].outputs) producer[o] = i;
      for (const std::string& in : g.nodes[i].inputs) ++readers[in];
    }
    for (const std::string& o : g.outputs) readers[o] += 2;  // never fused away
  }
  const Node* Producer(const Graph& g, const std::string& v, const char* op) const {
    auto it = producer.find(v);
    if (it == producer.end() || g.nodes[it->second].op != op) return nullptr;
    return &g.nodes[it->second];
  }
  int Readers(const std::string& v) const {
    auto it = readers.find(v);
    return it == readers.end() ? 0 : it->second;
  }
};

bool IsLastAxisMean(const Graph& g, const Node& n) {
  if (n.op != "ReduceMean" || n.Int("keepdims", 1) == 0) return false;
  std::vector<int64_t> axes = n.Ints("axes");
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const ConstData* c = g.Const(n.inputs[1]);
    if (!c) return false;
    axes.clear();
    for (int64_t k = 0; k < c->size(); ++k) axes.push_back(static_cast<int64_t>(c->at(k)));
  }
  const int64_t rank = static_cast<int64_t>(g.Find(n.inputs[0])->shape.size());
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1);
}

std::optional<float> Scalar(const Graph& g, const std::string& v) {
  const ConstData* c = g.Const(v);
  if (!c || c->size() != 1) return std::nullopt;
  return static_cast<float>(c->at(0));
}

}  // namespace

absl::Status FoldBatchNorms(Graph& g) {
  Uses uses(g);
  std::set<size_t> dropped;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bn = g.nodes[i];
    if (bn.op != "BatchNormalization" || bn.inputs.size() < 5) continue;
    auto it = uses.producer.find(bn.inputs[0]);
    if (it == uses.producer.end() || uses.Readers(bn.inputs[0]) != 1) continue;
    Node& conv = g.nodes[it->second];
    if ((conv.op != "Conv" && conv.op != "ConvTranspose") || !g.Const(conv.inputs[1])) continue;
    bool consts = true;
    for (size_t k = 1; k < 5; ++k) consts = consts && g.Const(bn.inputs[k]);
    if (!consts) continue;
    const ConstData &gam = *g.Const(bn.inputs[1]), &bet = *g.Const(bn.inputs[2]),
                    &mean = *g.Const(bn.inputs[3]), &var = *g.Const(bn.inputs[4]);
    const double eps = bn.Float("epsilon", 1e-5f);
    const std::vector<int64_t> ws = g.Find(conv.inputs[1])->shape;
    ConstData w = *g.Const(conv.inputs[1]);
    const bool transposed = conv.op == "ConvTranspose";
    const int64_t groups = conv.Int("group", 1);
    const int64_t channels = transposed ? ws[1] * groups : ws[0];
    if (gam.size() != channels) continue;
    std::vector<double> scale(channels);
    for (int64_t c = 0; c < channels; ++c) scale[c] = gam.at(c) / std::sqrt(var.at(c) + eps);
    const int64_t inner = ws[2] * ws[3];
    for (int64_t e = 0; e < w.size(); ++e) {
      int64_t oc = 0;
      if (transposed) {
        const int64_t ic = e / (ws[1] * inner), j = (e / inner) % ws[1];
        oc = (ic / (ws[0] / groups)) * ws[1] + j;
      } else {
        oc = e / (ws[1] * inner);
      }
      w.f[e] = static_cast<float>(w.f[e] * scale[oc]);
    }
    ConstData b;
    const ConstData* old_b =
        conv.inputs.size() > 2 && !conv.inputs[2].empty() ? g.Const(conv.inputs[2]) : nullptr;
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !old_b) continue;
    for (int64_t c = 0; c < channels; ++c) {
      const double b0 = old_b ? old_b->at(c) : 0.0;
      b.f.push_back(static_cast<float>((b0 - mean.at(c)) * scale[c] + bet.at(c)));
    }
    conv.inputs.resize(3);
    conv.inputs[1] = g.AddConst(conv.name + ".w_bn", ws, std::move(w));
    conv.inputs[2] = g.AddConst(conv.name + ".b_bn", {channels}, std::move(b));
    conv.outputs[0] = bn.outputs[0];
    dropped.insert(i);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!dropped.count(i)) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  return absl::OkStatus();
}

absl::Status RecognizeLayerNorms(Graph& g) {
  for (bool changed = true; changed;) {
    changed = false;
    Uses uses(g);
    for (size_t i = 0; i < g.nodes.size() && !changed; ++i) {
      const Node& div = g.nodes[i];
      if (div.op != "Div") continue;
      const Node* sub = uses.Producer(g, div.inputs[0], "Sub");
      const Node* sqrt = uses.Producer(g, div.inputs[1], "Sqrt");
      if (!sub || !sqrt) continue;
      const Node* mean = uses.Producer(g, sub->inputs[1], "ReduceMean");
      const Node* add = uses.Producer(g, sqrt->inputs[0], "Add");
      if (!mean || !add || mean->inputs[0] != sub->inputs[0] || !IsLastAxisMean(g, *mean)) continue;
      const Node* var = uses.Producer(g, add->inputs[0], "ReduceMean");
      std::optional<float> eps = Scalar(g, add->inputs[1]);
      if (!var || !eps || !IsLastAxisMean(g, *var)) continue;
      const Node* pow = uses.Producer(g, var->inputs[0], "Pow");
      if (!pow) pow = uses.Producer(g, var->inputs[0], "Mul");
      if (!pow || pow->inputs[0] != sub->outputs[0]) continue;
      if (pow->op == "Pow") {
        std::optional<float> two = Scalar(g, pow->inputs[1]);
        if (!two || *two != 2.0f) continue;
      } else if (pow->inputs[1] != sub->outputs[0]) {
        continue;
      }
      const std::string& x = sub->inputs[0];
      const int64_t n = g.Find(x)->shape.back();
      // Every intermediate is read only inside the pattern.
      if (uses.Readers(mean->outputs[0]) != 1 ||
          uses.Readers(sub->outputs[0]) != (pow->op == "Mul" ? 3 : 2) ||
          uses.Readers(pow->outputs[0]) != 1 || uses.Readers(var->outputs[0]) != 1 ||
          uses.Readers(add->outputs[0]) != 1 || uses.Readers(sqrt->outputs[0]) != 1) {
        continue;
      }
      std::set<const Node*> gone = {mean, sub, pow, var, add, sqrt, &div};
      std::string out = div.outputs[0], gamma, beta;
      const Node* last = &div;
      // Optional affine part: Mul by a constant [n], then Add of a constant [n].
      auto affine = [&](const char* op, std::string* param) {
        if (uses.Readers(out) != 1) return;
        auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& m) {
          return m.op == op && m.inputs.size() == 2 && m.inputs[0] == out;
        });
        if (it == g.nodes.end()) return;
        const ConstData* c = g.Const(it->inputs[1]);
        if (!c || c->size() != n || g.Find(it->inputs[1])->shape.back() != n) return;
        *param = it->inputs[1];
        out = it->outputs[0];
        gone.insert(&*it);
        last = &*it;
      };
      affine("Mul", &gamma);
      affine("Add", &beta);
      ConstData ones, zeros;
      ones.f.assign(n, 1.0f);
      zeros.f.assign(n, 0.0f);
      if (gamma.empty()) gamma = g.AddConst(div.name + ".gamma", {n}, std::move(ones));
      if (beta.empty()) beta = g.AddConst(div.name + ".beta", {n}, std::move(zeros));
      Node ln;
      ln.name = div.name + ".layer_norm";
      ln.op = "LayerNormalization";
      ln.inputs = {x, gamma, beta};
      ln.outputs = {out};
      ln.attrs["axis"].i = -1;
      ln.attrs["epsilon"].kind = Attr::kFloat;
      ln.attrs["epsilon"].f = *eps;
      std::vector<Node> kept;
      for (const Node& m : g.nodes) {
        if (&m == last) {
          kept.push_back(ln);
        } else if (!gone.count(&m)) {
          kept.push_back(m);
        }
      }
      g.nodes = std::move(kept);
      changed = true;
    }
  }
  return absl::OkStatus();
}

}  // namespace lathe::model
