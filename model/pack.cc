// Constant matmul weights packed in column panels (model/kernels.h: PackMatmulWeights).
//
// A matmul kernel reads B[k][j] for a tile of columns j at every k: in row-major [k][n] those
// columns sit n floats apart from one k to the next, so a fast kernel must copy each panel of
// columns into contiguous memory before using it, on every call (the tuner's cache_read of B).
// Constant weights are laid out that way once, here: [n/P][k][P] (the workload key bpanel=P),
// P two vectors wide, the width of the register tile's columns on both AVX2 (6x16) and
// AVX-512 (14x32).
//
// Where no panel of at least one vector divides n (PP-OCR rec's classifier: n = 6625 = 5^3 x
// 53), the weights are padded with zero columns to whole panels, the kernel writes a padded
// output and a slice step keeps its first n columns. Row-major, that classifier's B (120 x
// 6625, 3.2 MB) is read 26.5 KB apart from one k to the next, a new page per row: its record
// took 455-665 us on AVX-512, the padded panels 250-270 us, plus a 1 MB copy.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/kernels.h"

namespace lathe::model {

namespace {

// Whether k's columns may be padded: the padding adds at most 1/16 of the columns, and every
// epilogue tensor is a per-column constant (padded with zeros alongside). One row of A too (a
// classifier's Gemm, 1 x 1280 x 1000): its kernels copy each panel of row-major B before
// reading it (the copy is the kernel's cache_read), so B went through memory three times; in
// panels it streams once (MobileNetV3's classifier on Zen 4 AVX-512: 190 -> 55-65 us warm,
// 230 -> 131-157 us with its weights out of the caches).
bool MayPadColumns(const Graph& g, const KernelDesc& k, int64_t n, int64_t padded) {
  if ((padded - n) * 16 > n) return false;
  for (const auto& [kind, v] : k.step_inputs) {
    const ConstData* d = g.Const(v);
    if (d == nullptr || d->is_int || static_cast<int64_t>(d->size()) != n) return false;
  }
  const Value* out = g.Find(k.output);
  return out != nullptr && !out->shape.empty() && out->shape.back() == n;
}

// A copy of `c` [n] (float) with zeros up to `padded` elements.
ConstData PadColumns(const ConstData& c, int64_t padded) {
  ConstData d;
  d.f.assign(padded, 0.0f);
  for (int64_t i = 0; i < c.size(); ++i) d.f[i] = static_cast<float>(c.at(i));
  return d;
}

}  // namespace

void PackMatmulWeights(Graph& g, Lowered& l, int64_t panel) {
  if (panel <= 1) return;
  std::map<std::string, std::string> packed;  // weight -> its packed copy, per panel and width
  std::vector<KernelDesc> out;
  out.reserve(l.kernels.size());
  for (KernelDesc& k : l.kernels) {
    out.push_back(std::move(k));
    KernelDesc& mm = out.back();
    if (mm.op != "matmul" || mm.params.count("transpose_b") || mm.params.count("bpanel")) continue;
    const std::string w = mm.inputs[1];
    const ConstData* wd = g.Const(w);
    const std::vector<int64_t> ws = g.Find(w)->shape;
    if (!wd || wd->is_int || ws.size() != 2) continue;
    const int64_t kk = ws[0], n = ws[1];
    // The widest of two vectors, one vector, that divides the columns; else padded panels.
    int64_t p = panel;
    while (p > 1 && n % p != 0) p /= 2;
    if (p == n) continue;  // one panel: row-major already
    int64_t width = n;     // the packed columns, n or n padded to whole panels
    if (p < panel / 2) {
      width = (n + panel - 1) / panel * panel;
      if (n <= panel || !MayPadColumns(g, mm, n, width)) continue;
      p = panel;
    }
    const std::string key = absl::StrCat(w, "#", p, "#", width);
    auto it = packed.find(key);
    if (it == packed.end()) {
      ConstData d;
      d.f.assign(static_cast<size_t>(kk * width), 0.0f);
      for (int64_t r = 0; r < kk; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          d.f[((j / p) * kk + r) * p + j % p] = static_cast<float>(wd->at(r * n + j));
        }
      }
      it = packed
               .emplace(key,
                        g.AddConst(absl::StrCat(w, "@panel", p), {width / p, kk, p}, std::move(d)))
               .first;
    }
    mm.inputs[1] = it->second;
    mm.params["bpanel"] = std::to_string(p);
    if (width == n) continue;
    // Padded: per-column epilogue constants padded too, the output to `width` columns, and a
    // slice of its first n columns into the kernel's own output.
    mm.params["n"] = std::to_string(width);
    for (auto& [kind, v] : mm.step_inputs) {
      v = g.AddConst(absl::StrCat(v, "@pad", width), {width}, PadColumns(*g.Const(v), width));
    }
    Value wide = *g.Find(mm.output);
    const std::vector<int64_t> shape = wide.shape;
    wide.shape.back() = width;
    wide.name = absl::StrCat(mm.output, "@pad", width);
    g.values[wide.name] = wide;
    KernelDesc slice;
    slice.op = "slice";
    slice.params = {{"shape", absl::StrJoin(wide.shape, "x")},
                    {"begin", absl::StrJoin(std::vector<int64_t>(shape.size(), 0), "x")},
                    {"size", absl::StrJoin(shape, "x")}};
    slice.inputs = {wide.name};
    slice.output = mm.output;
    slice.nodes = mm.nodes;
    mm.output = wide.name;
    out.push_back(std::move(slice));
  }
  l.kernels = std::move(out);
}

}  // namespace lathe::model
