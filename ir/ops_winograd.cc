// Winograd convolution F(m x m, 3 x 3) as two transform operators around a batch_matmul
// (ir/ops.h: winograd_in, winograd_out, WinogradWeights).
//
// A 3x3 stride-1 convolution computes each m x m output tile from a (m+2) x (m+2) input tile
// d: Y = A^T [ (G g G^T) (.) (B^T d B) ] A, the product (.) elementwise over the t x t
// positions (t = m + 2) and summed over the input channels. Summed over channels, that
// product is t*t independent matrix products (tiles x channels) x (channels x output
// channels): the transformed weights U = G g G^T are constants the model compiler computes
// once; winograd_in computes V = B^T d B for every tile and channel; a batch_matmul forms
// M = V U; winograd_out computes A^T M A and the convolution's epilogue. F(4x4, 3x3) does 36
// multiplications per tile and channel pair where the direct convolution does 144.
//
// The matrices are those of Lavin and Gray, "Fast Algorithms for Convolutional Neural
// Networks" (2016), interpolation points 0, +-1, +-2 (m = 4) and 0, +-1 (m = 2).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir {

using internal::EpilogueInputs;
using internal::EpilogueStage;
using internal::ExpectOp;
using internal::GetInt;
using internal::GetStr;
using internal::PadStage;
using internal::Product;

#define LATHE_ASSIGN_OR_RETURN LATHE_IR_ASSIGN_OR_RETURN

namespace {

// Row-major t x t (B^T), t x 3 (G) and m x t (A^T) matrices of F(m, 3).
struct WinogradMatrices {
  int64_t m, t;
  std::vector<double> bt, g, at;
};

const WinogradMatrices& Matrices(int64_t m) {
  static const WinogradMatrices f2{2,
                                   4,
                                   {1, 0, -1, 0,  //
                                    0, 1, 1, 0,   //
                                    0, -1, 1, 0,  //
                                    0, 1, 0, -1},
                                   {1, 0, 0,         //
                                    0.5, 0.5, 0.5,   //
                                    0.5, -0.5, 0.5,  //
                                    0, 0, 1},
                                   {1, 1, 1, 0,  //
                                    0, 1, -1, -1}};
  static const WinogradMatrices f4{4,
                                   6,
                                   {4, 0,  -5, 0,  1, 0,  //
                                    0, -4, -4, 1,  1, 0,  //
                                    0, 4,  -4, -1, 1, 0,  //
                                    0, -2, -1, 2,  1, 0,  //
                                    0, 2,  -1, -2, 1, 0,  //
                                    0, 4,  0,  -5, 0, 1},
                                   {1.0 / 4, 0, 0,                 //
                                    -1.0 / 6, -1.0 / 6, -1.0 / 6,  //
                                    -1.0 / 6, 1.0 / 6, -1.0 / 6,   //
                                    1.0 / 24, 1.0 / 12, 1.0 / 6,   //
                                    1.0 / 24, -1.0 / 12, 1.0 / 6,  //
                                    0, 0, 1},
                                   {1, 1, 1,  1, 1,  0,  //
                                    0, 1, -1, 2, -2, 0,  //
                                    0, 1, 1,  4, 4,  0,  //
                                    0, 1, -1, 8, -8, 1}};
  return m == 2 ? f2 : f4;
}

// sum_j coef[j] * v[j] over the nonzero coefficients, without multiplying by +-1.
Expr LinearCombination(const double* coef, const std::vector<Expr>& v) {
  Expr sum;
  for (size_t j = 0; j < v.size(); ++j) {
    const double c = coef[j];
    if (c == 0) continue;
    const Expr term = std::fabs(c) == 1 ? v[j] : Mul(FloatImm(std::fabs(c)), v[j]);
    if (!sum) {
      sum = c < 0 ? Sub(FloatImm(0.0), term) : term;
    } else {
      sum = c < 0 ? Sub(sum, term) : Add(sum, term);
    }
  }
  return sum ? sum : FloatImm(0.0);
}

// The value of output position (a, b) of a two-sided transform L x R^T of the q x q block
// `v` (row-major), where L and R are the rows `rows` of a matrix with q columns.
Expr TwoSided(const double* row_a, const double* row_b, const std::vector<Expr>& v, int64_t q) {
  std::vector<Expr> inner;  // per row i of v: sum_j row_b[j] * v[i][j]
  for (int64_t i = 0; i < q; ++i) {
    std::vector<Expr> row(v.begin() + i * q, v.begin() + (i + 1) * q);
    inner.push_back(LinearCombination(row_b, row));
  }
  return LinearCombination(row_a, inner);
}

// Select(pos == 0, cases[0], Select(pos == 1, ...)) over a constant-extent position: once the
// loops over the position are unrolled (the CPU space's rule for these operators), every
// condition is a constant and code generation keeps one case.
Expr SelectCase(const Expr& pos, const std::vector<Expr>& cases) {
  Expr out = cases.back();
  for (size_t i = cases.size() - 1; i-- > 0;) {
    out = Select(EQ(pos, IntImm(static_cast<int64_t>(i))), cases[i], out);
  }
  return out;
}

// The value at position (a, b) of L v R^T, the positions' cases selected by `pos_a` and
// `pos_b` (count x count of them), L and R the first `count` rows of `rows` (q columns), v a
// q x q block (row-major).
Expr PositionCases(const Expr& pos_a, const Expr& pos_b, const std::vector<double>& rows,
                   int64_t count, const std::vector<Expr>& v, int64_t q) {
  std::vector<Expr> per_a;
  for (int64_t a = 0; a < count; ++a) {
    std::vector<Expr> per_b;
    for (int64_t b = 0; b < count; ++b) per_b.push_back(TwoSided(&rows[a * q], &rows[b * q], v, q));
    per_a.push_back(SelectCase(pos_b, per_b));
  }
  return SelectCase(pos_a, per_a);
}

absl::Status CheckTile(const std::string& op, int64_t m) {
  if (m != 2 && m != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": m=", m, " is not a supported output tile (2 or 4)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WinogradParams> GetWinogradParams(const WorkloadSpec& spec) {
  if (absl::Status s = ExpectOp(spec, {OpKind::kWinogradIn, OpKind::kWinogradOut}); !s.ok())
    return s;
  WinogradParams p;
  p.output_side = IsOp(spec.op, OpKind::kWinogradOut);
  LATHE_ASSIGN_OR_RETURN(p.n, GetInt(spec, "n"));
  LATHE_ASSIGN_OR_RETURN(p.c, GetInt(spec, p.output_side ? "k" : "c"));
  LATHE_ASSIGN_OR_RETURN(p.h, GetInt(spec, p.output_side ? "oh" : "h"));
  LATHE_ASSIGN_OR_RETURN(p.w, GetInt(spec, p.output_side ? "ow" : "w"));
  LATHE_ASSIGN_OR_RETURN(p.m, GetInt(spec, "m"));
  if (absl::Status s = CheckTile(spec.op, p.m); !s.ok()) return s;
  std::string layout;
  LATHE_ASSIGN_OR_RETURN(layout, GetStr(spec, "layout"));
  LATHE_ASSIGN_OR_RETURN(p.block, LayoutBlock(layout));
  if (p.output_side) {
    LATHE_ASSIGN_OR_RETURN(p.epilogue, internal::GetEpilogue(spec));
  } else {
    std::string pad;
    LATHE_ASSIGN_OR_RETURN(pad, GetStr(spec, "pad"));
    std::vector<int64_t> v;
    LATHE_ASSIGN_OR_RETURN(v, internal::ParsePads(pad, "pad"));
    p.pad_t = v[0], p.pad_l = v[1], p.pad_b = v[2], p.pad_r = v[3];
  }
  return p;
}

std::vector<float> WinogradWeights(
    const std::function<double(int64_t, int64_t, int64_t, int64_t)>& w, int64_t k, int64_t c,
    int64_t m, int64_t panel) {
  const WinogradMatrices& f = Matrices(m);
  const int64_t t = f.t;
  const int64_t p = panel > 0 ? panel : k;
  std::vector<float> out(static_cast<size_t>(t * t * k * c));
  std::vector<double> gg(9), tmp(t * 3);
  for (int64_t oc = 0; oc < k; ++oc) {
    for (int64_t ic = 0; ic < c; ++ic) {
      for (int64_t i = 0; i < 9; ++i) gg[i] = w(oc, ic, i / 3, i % 3);
      for (int64_t a = 0; a < t; ++a) {  // tmp = G g
        for (int64_t j = 0; j < 3; ++j) {
          double s = 0;
          for (int64_t q = 0; q < 3; ++q) s += f.g[a * 3 + q] * gg[q * 3 + j];
          tmp[a * 3 + j] = s;
        }
      }
      for (int64_t a = 0; a < t; ++a) {  // U = tmp G^T
        for (int64_t b = 0; b < t; ++b) {
          double s = 0;
          for (int64_t j = 0; j < 3; ++j) s += tmp[a * 3 + j] * f.g[b * 3 + j];
          const int64_t e = a * t + b;
          // [e][oc / p][ic][oc % p]; panel 0: [e][ic][oc] (the same with one panel).
          out[static_cast<size_t>(((e * (k / p) + oc / p) * c + ic) * p + oc % p)] =
              static_cast<float>(s);
        }
      }
    }
  }
  return out;
}

OpDefinition WinogradInOp(const WinogradParams& p) {
  const WinogradMatrices& f = Matrices(p.m);
  const int64_t t = f.t, b = p.block;
  const int64_t th = p.oh() / p.m, tw = p.ow() / p.m;
  OpDefinition def;
  Tensor x = Placeholder("X", {p.n, p.c / b, p.h, p.w, b});
  def.args = {x};
  def.tensors = {x};
  Tensor in = PadStage(x, p, /*nhwc=*/false, 0.0, p.h, p.w, &def.tensors);
  Tensor v = Compute("V", {t, t, p.n, th, tw, p.c / b, b},
                     [&](const std::vector<Expr>& idx) {
                       const Expr &nn = idx[2], &ty = idx[3], &tx = idx[4], &cb = idx[5],
                                  &cv = idx[6];
                       std::vector<Expr> d;  // the input tile, row-major t x t
                       for (int64_t i = 0; i < t; ++i) {
                         for (int64_t j = 0; j < t; ++j) {
                           d.push_back(Read(in, {nn, cb, Add(Mul(ty, IntImm(p.m)), IntImm(i)),
                                                 Add(Mul(tx, IntImm(p.m)), IntImm(j)), cv}));
                         }
                       }
                       // V[e1][e2] = sum_ij B^T[e1][i] d[i][j] B^T[e2][j].
                       return PositionCases(idx[0], idx[1], f.bt, t, d, t);
                     },
                     "injective", {"e1", "e2", "n", "ty", "tx", "c", "cv"});
  def.tensors.push_back(v);
  def.args.push_back(v);
  return def;
}

OpDefinition WinogradOutOp(const WinogradParams& p) {
  const WinogradMatrices& f = Matrices(p.m);
  const int64_t t = f.t, b = p.block, m = p.m;
  const int64_t th = p.h / m, tw = p.w / m;
  const bool has_epilogue = !p.epilogue.empty();
  OpDefinition def;
  Tensor mm = Placeholder("M", {t, t, p.n, th, tw, p.c / b, b});
  // The output [n][k/b][oh][ow][b], its rows and columns split into tiles and positions.
  const std::vector<int64_t> out_shape = {p.n, p.c / b, th, m, tw, m, b};
  const std::vector<std::string> axis_names = {"n", "k", "ty", "vy", "tx", "vx", "kv"};
  std::vector<Tensor> extra = EpilogueInputs(p.epilogue, p.c, out_shape);
  def.args = {mm};
  def.tensors = {mm};
  for (const Tensor& e : extra) {
    def.args.push_back(e);
    def.tensors.push_back(e);
  }
  Tensor y = Compute(
      has_epilogue ? "winograd_out" : "Y", out_shape,
      [&](const std::vector<Expr>& idx) {
        const Expr &nn = idx[0], &kb = idx[1], &ty = idx[2], &tx = idx[4], &kv = idx[6];
        std::vector<Expr> v;
        for (int64_t e1 = 0; e1 < t; ++e1) {
          for (int64_t e2 = 0; e2 < t; ++e2) {
            v.push_back(Read(mm, {IntImm(e1), IntImm(e2), nn, ty, tx, kb, kv}));
          }
        }
        // Y[vy][vx] = sum_ab A^T[vy][a] M[a][b] A^T[vx][b].
        return PositionCases(idx[3], idx[5], f.at, m, v, t);
      },
      "injective", axis_names);
  def.tensors.push_back(y);
  Tensor out = y;
  if (has_epilogue) {
    out = EpilogueStage(
        "Y", y, p.epilogue, extra,
        [b](const std::vector<Expr>& idx) { return Add(Mul(idx[1], IntImm(b)), idx[6]); },
        axis_names);
    def.tensors.push_back(out);
  }
  def.args.push_back(out);
  return def;
}

namespace internal {

namespace {

// V (or Y) of one tile and channel: L x R^T of the q x q block v, both sides the rows of
// `rows` (a matrix with q columns), `n` rows out.
void TwoSidedRef(const std::vector<double>& rows, int64_t n, int64_t q,
                 const std::vector<double>& v, std::vector<double>& out) {
  std::vector<double> tmp(static_cast<size_t>(n * q));
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t j = 0; j < q; ++j) {
      double s = 0;
      for (int64_t i = 0; i < q; ++i) s += rows[a * q + i] * v[i * q + j];
      tmp[a * q + j] = s;
    }
  }
  out.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t a = 0; a < n; ++a) {
    for (int64_t bb = 0; bb < n; ++bb) {
      double s = 0;
      for (int64_t j = 0; j < q; ++j) s += tmp[a * q + j] * rows[bb * q + j];
      out[a * n + bb] = s;
    }
  }
}

}  // namespace

void WinogradReference(const WinogradParams& p, std::span<float* const> args) {
  const WinogradMatrices& f = Matrices(p.m);
  const int64_t t = f.t, m = p.m, b = p.block, cb = p.c / b;
  std::vector<double> v(static_cast<size_t>(t * t)), out;
  if (!p.output_side) {
    const float* x = args[0];
    float* dst = args.back();
    const int64_t th = p.oh() / m, tw = p.ow() / m;
    const int64_t tiles = p.n * th * tw;
    for (int64_t nn = 0; nn < p.n; ++nn) {
      for (int64_t ty = 0; ty < th; ++ty) {
        for (int64_t tx = 0; tx < tw; ++tx) {
          const int64_t tile = (nn * th + ty) * tw + tx;
          for (int64_t ch = 0; ch < p.c; ++ch) {
            for (int64_t i = 0; i < t; ++i) {
              for (int64_t j = 0; j < t; ++j) {
                const int64_t yy = ty * m + i - p.pad_t, xx = tx * m + j - p.pad_l;
                const bool in = yy >= 0 && yy < p.h && xx >= 0 && xx < p.w;
                v[i * t + j] =
                    in ? x[(((nn * cb + ch / b) * p.h + yy) * p.w + xx) * b + ch % b] : 0.0;
              }
            }
            TwoSidedRef(f.bt, t, t, v, out);
            for (int64_t e = 0; e < t * t; ++e) {
              dst[(e * tiles + tile) * p.c + ch] = static_cast<float>(out[e]);
            }
          }
        }
      }
    }
    return;
  }
  const float* mm = args[0];
  float* y = args.back();
  const EpilogueTensors ea(p.epilogue, args, 1);
  const int64_t th = p.h / m, tw = p.w / m, tiles = p.n * th * tw;
  for (int64_t nn = 0; nn < p.n; ++nn) {
    for (int64_t ty = 0; ty < th; ++ty) {
      for (int64_t tx = 0; tx < tw; ++tx) {
        const int64_t tile = (nn * th + ty) * tw + tx;
        for (int64_t ch = 0; ch < p.c; ++ch) {
          for (int64_t e = 0; e < t * t; ++e) v[e] = mm[(e * tiles + tile) * p.c + ch];
          TwoSidedRef(f.at, m, t, v, out);
          for (int64_t vy = 0; vy < m; ++vy) {
            for (int64_t vx = 0; vx < m; ++vx) {
              const int64_t idx =
                  (((nn * cb + ch / b) * p.h + ty * m + vy) * p.w + tx * m + vx) * b + ch % b;
              double r = out[vy * m + vx];
              if (!p.epilogue.empty()) {
                r = ea.Apply(p.epilogue, r, ch, idx);
              }
              y[idx] = static_cast<float>(r);
            }
          }
        }
      }
    }
  }
}

}  // namespace internal

}  // namespace lathe::ir
