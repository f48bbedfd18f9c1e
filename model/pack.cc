// Constant matmul weights packed in column panels (model/kernels.h: PackMatmulWeights).
//
// A matmul kernel reads B[k][j] for a tile of columns j at every k: in row-major [k][n] those
// columns sit n floats apart from one k to the next, so a fast kernel must copy each panel of
// columns into contiguous memory before using it, on every call (the tuner's cache_read of B).
// Constant weights are laid out that way once, here: [n/P][k][P] (the workload key bpanel=P),
// P two vectors wide, the width of the register tile's columns on both AVX2 (6x16) and
// AVX-512 (14x32).
#include <map>

#include "absl/strings/str_cat.h"
#include "model/kernels.h"

namespace lathe::model {

void PackMatmulWeights(Graph& g, Lowered& l, int64_t panel) {
  if (panel <= 1) return;
  std::map<std::string, std::string> packed;  // weight -> its packed copy, per panel
  for (KernelDesc& k : l.kernels) {
    if (k.op != "matmul" || k.params.count("transpose_b") || k.params.count("bpanel")) continue;
    const std::string& w = k.inputs[1];
    const ConstData* wd = g.Const(w);
    const std::vector<int64_t>& ws = g.Find(w)->shape;
    if (!wd || wd->is_int || ws.size() != 2) continue;
    const int64_t kk = ws[0], n = ws[1];
    // The widest of two vectors, one vector, that divides the columns.
    int64_t p = panel;
    while (p > 1 && n % p != 0) p /= 2;
    if (p < panel / 2 || p == n) continue;
    const std::string key = absl::StrCat(w, "#", p);
    auto it = packed.find(key);
    if (it == packed.end()) {
      ConstData d;
      d.f.resize(wd->size());
      for (int64_t r = 0; r < kk; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          d.f[((j / p) * kk + r) * p + j % p] = static_cast<float>(wd->at(r * n + j));
        }
      }
      it = packed
               .emplace(key, g.AddConst(absl::StrCat(w, "@panel", p), {n / p, kk, p}, std::move(d)))
               .first;
    }
    k.inputs[1] = it->second;
    k.params["bpanel"] = std::to_string(p);
  }
}

}  // namespace lathe::model
