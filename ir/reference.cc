#include "ir/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/epilogue.h"
#include "ir/op_registry.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir {
namespace {

using EpilogueArgs = internal::EpilogueTensors;

// The epilogue of output element `index` (flat) whose channel is `channel`.
float Epi(const EpilogueExpr& e, const EpilogueArgs& a, double v, int64_t channel, int64_t index) {
  if (e.empty()) return static_cast<float>(v);
  return static_cast<float>(a.Apply(e, v, channel, index));
}

void Matmul(const MatmulParams& p, std::span<float* const> args) {
  const float* a = args[0];
  const float* b = args[1];
  const EpilogueArgs ea(p.epilogue, args, 2);
  float* c = args.back();
  const int64_t batches = std::max<int64_t>(p.batch, 1);
  const int64_t a_stride = p.bcast == Bcast::kA ? 0 : p.m * p.k;
  const int64_t b_stride = p.bcast == Bcast::kB ? 0 : p.k * p.n;
  std::vector<double> acc(p.n);
  for (int64_t bb = 0; bb < batches; ++bb) {
    const float* ab = a + bb * a_stride;
    const float* bb_ = b + bb * b_stride;
    float* cb = c + bb * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t kk = 0; kk < p.k; ++kk) {
        const double av = p.transpose_a ? ab[kk * p.m + i] : ab[i * p.k + kk];
        if (p.transpose_b) {
          for (int64_t j = 0; j < p.n; ++j) acc[j] += av * bb_[j * p.k + kk];
        } else if (p.bpanel > 0) {
          for (int64_t j = 0; j < p.n; ++j) {
            acc[j] += av * bb_[((j / p.bpanel) * p.k + kk) * p.bpanel + j % p.bpanel];
          }
        } else {
          const float* brow = bb_ + kk * p.n;
          for (int64_t j = 0; j < p.n; ++j) acc[j] += av * brow[j];
        }
      }
      for (int64_t j = 0; j < p.n; ++j) {
        const int64_t idx = (bb * p.m + i) * p.n + j;
        c[idx] = Epi(p.epilogue, ea, acc[j], j, idx);
      }
    }
    (void)cb;
  }
}

// Valid output positions [lo, hi) for which o*stride - pad + off lies in [0, extent).
void ValidRange(int64_t out, int64_t stride, int64_t pad, int64_t off, int64_t extent, int64_t* lo,
                int64_t* hi) {
  *lo = 0;
  while (*lo < out && *lo * stride - pad + off < 0) ++*lo;
  *hi = out;
  while (*hi > *lo && (*hi - 1) * stride - pad + off >= extent) --*hi;
}

void Conv2dNchw(const Conv2dParams& p, std::span<float* const> args) {
  const float* x = args[0];
  const float* wt = args[1];
  const EpilogueArgs ea(p.epilogue, args, 2);
  float* y = args.back();
  const int64_t oh = p.oh(), ow = p.ow();
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;
  std::vector<double> acc(oh * ow);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t oc = 0; oc < p.k; ++oc) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const int64_t g = oc / kpg;
      for (int64_t rc = 0; rc < cpg; ++rc) {
        const float* plane = x + (n * p.c + g * cpg + rc) * p.h * p.w;
        for (int64_t ry = 0; ry < p.r; ++ry) {
          int64_t y_lo, y_hi;
          ValidRange(oh, p.stride_h, p.pad_t, ry * p.dilation_h, p.h, &y_lo, &y_hi);
          for (int64_t rx = 0; rx < p.s; ++rx) {
            int64_t x_lo, x_hi;
            ValidRange(ow, p.stride_w, p.pad_l, rx * p.dilation_w, p.w, &x_lo, &x_hi);
            const double wv = wt[((oc * cpg + rc) * p.r + ry) * p.s + rx];
            for (int64_t oy = y_lo; oy < y_hi; ++oy) {
              const float* row = plane + (oy * p.stride_h - p.pad_t + ry * p.dilation_h) * p.w;
              double* arow = acc.data() + oy * ow;
              for (int64_t ox = x_lo; ox < x_hi; ++ox) {
                arow[ox] += wv * row[ox * p.stride_w - p.pad_l + rx * p.dilation_w];
              }
            }
          }
        }
      }
      const int64_t base = (n * p.k + oc) * oh * ow;
      for (int64_t i = 0; i < oh * ow; ++i) y[base + i] = Epi(p.epilogue, ea, acc[i], oc, base + i);
    }
  }
}

void Conv2dNhwc(const Conv2dParams& p, std::span<float* const> args) {
  const float* x = args[0];
  const float* wt = args[1];
  const EpilogueArgs ea(p.epilogue, args, 2);
  float* y = args.back();
  const int64_t oh = p.oh(), ow = p.ow();
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;
  std::vector<double> acc(p.k);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t oy = 0; oy < oh; ++oy) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t ry = 0; ry < p.r; ++ry) {
          const int64_t iy = oy * p.stride_h - p.pad_t + ry * p.dilation_h;
          if (iy < 0 || iy >= p.h) continue;
          for (int64_t rx = 0; rx < p.s; ++rx) {
            const int64_t ix = ox * p.stride_w - p.pad_l + rx * p.dilation_w;
            if (ix < 0 || ix >= p.w) continue;
            const float* pix = x + ((n * p.h + iy) * p.w + ix) * p.c;
            for (int64_t ic = 0; ic < p.c; ++ic) {
              const double xv = pix[ic];
              const int64_t g = ic / cpg, rc = ic % cpg;
              const float* wrow = wt + ((ry * p.s + rx) * cpg + rc) * p.k + g * kpg;
              double* arow = acc.data() + g * kpg;
              for (int64_t j = 0; j < kpg; ++j) arow[j] += xv * wrow[j];
            }
          }
        }
        const int64_t base = ((n * oh + oy) * ow + ox) * p.k;
        for (int64_t oc = 0; oc < p.k; ++oc) {
          y[base + oc] = Epi(p.epilogue, ea, acc[oc], oc, base + oc);
        }
      }
    }
  }
}

void ConvTranspose(const ConvTransposeParams& p, std::span<float* const> args) {
  const float* x = args[0];
  const float* wt = args[1];
  const EpilogueArgs ea(p.epilogue, args, 2);
  float* y = args.back();
  const int64_t oh = p.oh(), ow = p.ow();
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;
  std::vector<double> acc(p.n * p.k * oh * ow, 0.0);
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t ic = 0; ic < p.c; ++ic) {
      const int64_t g = ic / cpg;
      for (int64_t iy = 0; iy < p.h; ++iy) {
        for (int64_t ix = 0; ix < p.w; ++ix) {
          const double xv = x[((n * p.c + ic) * p.h + iy) * p.w + ix];
          for (int64_t j = 0; j < kpg; ++j) {
            const int64_t oc = g * kpg + j;
            for (int64_t ry = 0; ry < p.r; ++ry) {
              const int64_t oy = iy * p.stride_h - p.pad_t + ry * p.dilation_h;
              if (oy < 0 || oy >= oh) continue;
              for (int64_t rx = 0; rx < p.s; ++rx) {
                const int64_t ox = ix * p.stride_w - p.pad_l + rx * p.dilation_w;
                if (ox < 0 || ox >= ow) continue;
                acc[((n * p.k + oc) * oh + oy) * ow + ox] +=
                    xv * wt[((ic * kpg + j) * p.r + ry) * p.s + rx];
              }
            }
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < static_cast<int64_t>(acc.size()); ++i) {
    y[i] = Epi(p.epilogue, ea, acc[i], (i / (oh * ow)) % p.k, i);
  }
}

// The NCHW copy of a blocked [n, c/b, h, w, b] tensor.
std::vector<float> Unblock(const float* x, int64_t n, int64_t c, int64_t h, int64_t w, int64_t b) {
  std::vector<float> out(static_cast<size_t>(n * c * h * w));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t yy = 0; yy < h * w; ++yy) {
        out[((i * c + ch) * h * w) + yy] = x[(((i * (c / b) + ch / b) * h * w) + yy) * b + ch % b];
      }
    }
  }
  return out;
}

// Writes the NCHW tensor `x` into `out` in the blocked layout [n, c/b, h, w, b].
void Reblock(const std::vector<float>& x, float* out, int64_t n, int64_t c, int64_t h, int64_t w,
             int64_t b) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t yy = 0; yy < h * w; ++yy) {
        out[(((i * (c / b) + ch / b) * h * w) + yy) * b + ch % b] = x[((i * c + ch) * h * w) + yy];
      }
    }
  }
}

void Conv2dNchw(const Conv2dParams& p, std::span<float* const> args);

// A blocked convolution: its tensors unblocked, the NCHW reference, the output blocked again.
void Conv2dBlocked(const Conv2dParams& p, std::span<float* const> args) {
  const int64_t x = p.cblock, y = p.kblock, oh = p.oh(), ow = p.ow();
  Conv2dParams q = p;
  q.cblock = q.kblock = 0;
  q.plain_input = false;
  std::vector<float> in = p.plain_input
                              ? std::vector<float>(args[0], args[0] + p.n * p.c * p.h * p.w)
                              : Unblock(args[0], p.n, p.c, p.h, p.w, x);
  const int64_t cpg = p.c / p.groups, wx = p.wblock();
  std::vector<float> wt(static_cast<size_t>(p.k * cpg * p.r * p.s));
  for (int64_t k = 0; k < p.k; ++k) {
    for (int64_t c = 0; c < cpg; ++c) {
      for (int64_t t = 0; t < p.r * p.s; ++t) {
        const int64_t src =
            p.depthwise()
                ? ((k / y) * p.r * p.s + t) * y + k % y
                : ((((k / y) * (cpg / wx) + c / wx) * p.r * p.s + t) * wx + c % wx) * y + k % y;
        wt[(k * cpg + c) * p.r * p.s + t] = args[1][src];
      }
    }
  }
  std::vector<float> out(static_cast<size_t>(p.n * p.k * oh * ow));
  std::vector<std::vector<float>> res;  // residual inputs, unblocked
  std::vector<float*> nchw = {in.data(), wt.data()};
  size_t i = 2;
  for (StepKind k : p.epilogue.TensorSteps()) {
    if (k == StepKind::kRes) {
      res.push_back(Unblock(args[i], p.n, p.k, oh, ow, y));
      nchw.push_back(res.back().data());
    } else {
      nchw.push_back(args[i]);
    }
    ++i;
  }
  nchw.push_back(out.data());
  Conv2dNchw(q, nchw);
  Reblock(out, args.back(), p.n, p.k, oh, ow, y);
}

void Pool2d(const Pool2dParams& p, std::span<float* const> args);

// A blocked pooling: the same through NCHW.
void Pool2dBlocked(const Pool2dParams& p, std::span<float* const> args) {
  Pool2dParams q = p;
  q.block = 0;
  std::vector<float> in = Unblock(args[0], p.n, p.c, p.h, p.w, p.block);
  std::vector<float> out(static_cast<size_t>(p.n * p.c * p.oh() * p.ow()));
  std::vector<float*> nchw = {in.data(), out.data()};
  Pool2d(q, nchw);
  Reblock(out, args.back(), p.n, p.c, p.oh(), p.ow(), p.block);
}

void Pool2d(const Pool2dParams& p, std::span<float* const> args) {
  const float* x = args[0];
  float* y = args.back();
  const int64_t oh = p.oh(), ow = p.ow();
  // Element (n, ch, iy, ix) of X and (n, ch, oy, ox) of Y in either layout.
  auto xi = [&](int64_t n, int64_t ch, int64_t iy, int64_t ix) {
    return p.nhwc ? ((n * p.h + iy) * p.w + ix) * p.c + ch : ((n * p.c + ch) * p.h + iy) * p.w + ix;
  };
  auto yi = [&](int64_t n, int64_t ch, int64_t oy, int64_t ox) {
    return p.nhwc ? ((n * oh + oy) * ow + ox) * p.c + ch : ((n * p.c + ch) * oh + oy) * ow + ox;
  };
  for (int64_t n = 0; n < p.n; ++n) {
    for (int64_t ch = 0; ch < p.c; ++ch) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = p.max ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t count = 0;
          for (int64_t ry = 0; ry < p.r; ++ry) {
            const int64_t iy = oy * p.stride_h - p.pad_t + ry;
            if (iy < 0 || iy >= p.h) continue;
            for (int64_t rx = 0; rx < p.s; ++rx) {
              const int64_t ix = ox * p.stride_w - p.pad_l + rx;
              if (ix < 0 || ix >= p.w) continue;
              const double v = x[xi(n, ch, iy, ix)];
              acc = p.max ? std::max(acc, v) : acc + v;
              ++count;
            }
          }
          if (!p.max) acc /= static_cast<double>(p.count_include_pad ? p.r * p.s : count);
          y[yi(n, ch, oy, ox)] = static_cast<float>(acc);
        }
      }
    }
  }
}

void Softmax(const SoftmaxParams& p, std::span<float* const> args) {
  const float* x = args[0];
  float* y = args.back();
  const int64_t in = p.inner;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t l = 0; l < in; ++l) {
      auto at = [&](int64_t j) { return (i * p.n + j) * in + l; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < p.n; ++j) mx = std::max(mx, static_cast<double>(x[at(j)]));
      double sum = 0;
      for (int64_t j = 0; j < p.n; ++j) sum += std::exp(x[at(j)] - mx);
      for (int64_t j = 0; j < p.n; ++j)
        y[at(j)] = static_cast<float>(std::exp(x[at(j)] - mx) / sum);
    }
  }
}

void LayerNorm(const LayerNormParams& p, std::span<float* const> args) {
  const float* x = args[0];
  const float* gamma = args[1];
  const float* beta = args[2];
  float* y = args.back();
  for (int64_t i = 0; i < p.m; ++i) {
    const float* row = x + i * p.n;
    double mean = 0;
    for (int64_t j = 0; j < p.n; ++j) mean += row[j];
    mean /= static_cast<double>(p.n);
    double var = 0;
    for (int64_t j = 0; j < p.n; ++j) var += (row[j] - mean) * (row[j] - mean);
    var /= static_cast<double>(p.n);
    const double inv = 1.0 / std::sqrt(var + p.eps);
    for (int64_t j = 0; j < p.n; ++j) {
      y[i * p.n + j] = static_cast<float>((row[j] - mean) * inv * gamma[j] + beta[j]);
    }
  }
}

}  // namespace

absl::Status ComputeReference(const Workload& w, std::span<float* const> args) {
  if (args.size() != w.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("reference for ", w.canonical, " needs ",
                                                   w.args.size(), " arguments, got ", args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("argument ", i, " (", w.args[i]->name, ") of the reference is null"));
    }
  }
  const OpInfo* op = FindOp(w.spec.op);
  if (op == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no reference for op '", w.spec.op, "'"));
  }
  return op->reference(w.spec, args);
}

absl::Status ComputeReference(const Workload& w, std::vector<std::vector<float>>& args) {
  if (args.size() != w.args.size()) {
    return absl::InvalidArgumentError(absl::StrCat("reference for ", w.canonical, " needs ",
                                                   w.args.size(), " arguments, got ", args.size()));
  }
  std::vector<float*> ptrs;
  for (size_t i = 0; i < args.size(); ++i) {
    int64_t want = 1;
    for (int64_t d : w.args[i]->shape) want *= d;
    if (static_cast<int64_t>(args[i].size()) != want) {
      return absl::InvalidArgumentError(absl::StrCat("argument ", i, " (", w.args[i]->name,
                                                     ") has ", args[i].size(),
                                                     " elements, expected ", want));
    }
    ptrs.push_back(args[i].data());
  }
  return ComputeReference(w, std::span<float* const>(ptrs));
}

namespace internal {

absl::Status MatmulReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetMatmulParams(spec), Matmul, args);
}

absl::Status Conv2dReference(const WorkloadSpec& spec, ReferenceArgs args) {
  absl::StatusOr<Conv2dParams> p = GetConv2dParams(spec);
  if (!p.ok()) return p.status();
  if (p->blocked()) {
    Conv2dBlocked(*p, args);
  } else if (p->nhwc) {
    Conv2dNhwc(*p, args);
  } else {
    Conv2dNchw(*p, args);
  }
  return absl::OkStatus();
}

// The depthwise part into a temporary map, then the 1x1 part from it: two blocked
// convolutions as conv2d's reference computes them.
void SepConv2d(const SepConv2dParams& p, std::span<float* const> args) {
  const size_t dw_tensors = p.dw.epilogue.TensorSteps().size();
  std::vector<float> mid(static_cast<size_t>(p.dw.n * p.dw.k * p.dw.oh() * p.dw.ow()));
  std::vector<float*> dw(args.begin(), args.begin() + 2 + static_cast<std::ptrdiff_t>(dw_tensors));
  dw.push_back(mid.data());
  Conv2dBlocked(p.dw, dw);
  std::vector<float*> pw = {mid.data()};
  pw.insert(pw.end(), args.begin() + 2 + static_cast<std::ptrdiff_t>(dw_tensors), args.end());
  Conv2dBlocked(p.pw, pw);
}

absl::Status SepConv2dReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetSepConv2dParams(spec), SepConv2d, args);
}

absl::Status ConvTransposeReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetConvTransposeParams(spec), ConvTranspose, args);
}

absl::Status Pool2dReference(const WorkloadSpec& spec, ReferenceArgs args) {
  absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
  if (!p.ok()) return p.status();
  if (p->block > 0) {
    Pool2dBlocked(*p, args);
  } else {
    Pool2d(*p, args);
  }
  return absl::OkStatus();
}

absl::Status SoftmaxReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetSoftmaxParams(spec), Softmax, args);
}

absl::Status LayerNormReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetLayerNormParams(spec), LayerNorm, args);
}

absl::Status WinogradSpecReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetWinogradParams(spec), WinogradReference, args);
}

EpilogueTensors::EpilogueTensors(const EpilogueExpr& e, std::span<float* const> args,
                                 size_t first) {
  size_t i = first;
  for (StepKind k : e.TensorSteps()) {
    const float* p = args[i++];
    if (k == StepKind::kBias) bias = p;
    if (k == StepKind::kScale) scale = p;
    if (k == StepKind::kShift) shift = p;
    if (k == StepKind::kRes) res = p;
  }
}

double EpilogueTensors::Apply(const EpilogueExpr& e, double v, int64_t channel,
                              int64_t index) const {
  return ApplyEpilogueRef(e, v, [&](StepKind k) -> double {
    if (k == StepKind::kBias) return bias[channel];
    if (k == StepKind::kScale) return scale[channel];
    if (k == StepKind::kShift) return shift[channel];
    return res[index];
  });
}

}  // namespace internal

}  // namespace lathe::ir
