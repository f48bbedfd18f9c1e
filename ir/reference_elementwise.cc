// Naive references of the elementwise and data-movement operators (ewise, transpose, slice,
// concat, resize, reduce), written from the spec parameters as plain loops over flat indices,
// independent of their compute definitions (see ir/reference.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/epilogue.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir::internal {
namespace {

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Row-major strides of `shape`.
std::vector<int64_t> Strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// The multi-index of flat index `i` in `shape`.
std::vector<int64_t> Unflatten(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Flat index into a broadcast operand of `shape` at output multi-index `idx`.
int64_t BroadcastFlat(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx,
                      const std::vector<int64_t>& up = {}) {
  const size_t off = idx.size() - shape.size();
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t i = shape[d] == 1 ? 0 : idx[off + d] / (up.empty() ? 1 : up[d]);
    f = f * shape[d] + i;
  }
  return f;
}

double Binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::kAdd:
      return a + b;
    case BinaryOp::kSub:
      return a - b;
    case BinaryOp::kMul:
      return a * b;
    case BinaryOp::kDiv:
      return a / b;
    case BinaryOp::kMax:
      return std::max(a, b);
    case BinaryOp::kMin:
      return std::min(a, b);
    case BinaryOp::kPow:
      return std::pow(a, b);
    case BinaryOp::kNone:
      break;
  }
  return a;
}

void Ewise(const EwiseParams& p, std::span<float* const> args) {
  const std::vector<int64_t> out = p.out_shape();
  const float* a = args[0];
  const float* b = p.b.empty() ? nullptr : args[1];
  size_t next = b ? 2 : 1;
  const float *bias = nullptr, *scale = nullptr, *shift = nullptr, *res = nullptr, *resup = nullptr;
  for (StepKind k : p.epilogue.TensorSteps()) {
    const float* t = args[next++];
    if (k == StepKind::kBias) bias = t;
    if (k == StepKind::kScale) scale = t;
    if (k == StepKind::kShift) shift = t;
    if (k == StepKind::kRes) res = t;
    if (k == StepKind::kResUp) resup = t;
  }
  const std::vector<int64_t> up_shape = ResUpShape(p.epilogue, out);
  const std::vector<int64_t> up = ResUpFactors(p.epilogue, out.size());
  float* y = args.back();
  const size_t ch_dim = out.size() >= 2 ? 1 : 0;
  for (int64_t i = 0; i < Count(out); ++i) {
    const std::vector<int64_t> idx = Unflatten(i, out);
    double v = a[BroadcastFlat(p.a, idx)];
    if (b) v = Binary(p.binary, v, b[BroadcastFlat(p.b, idx, p.upsample)]);
    v = ApplyEpilogueRef(p.epilogue, v, [&](StepKind k) -> double {
      if (k == StepKind::kBias) return bias[idx[ch_dim]];
      if (k == StepKind::kScale) return scale[idx[ch_dim]];
      if (k == StepKind::kShift) return shift[idx[ch_dim]];
      if (k == StepKind::kResUp) return resup[BroadcastFlat(up_shape, idx, up)];
      return res[i];
    });
    y[i] = static_cast<float>(v);
  }
}

void Transpose(const TransposeParams& p, std::span<float* const> args) {
  std::vector<int64_t> out;
  for (int64_t d : p.perm) out.push_back(p.shape[d]);
  const std::vector<int64_t> xs = Strides(p.shape);
  for (int64_t i = 0; i < Count(out); ++i) {
    const std::vector<int64_t> idx = Unflatten(i, out);
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += idx[d] * xs[p.perm[d]];
    args.back()[i] = args[0][src];
  }
}

void Slice(const SliceParams& p, std::span<float* const> args) {
  const std::vector<int64_t> xs = Strides(p.shape);
  for (int64_t i = 0; i < Count(p.size); ++i) {
    const std::vector<int64_t> idx = Unflatten(i, p.size);
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src += (p.begin[d] + idx[d] * p.step[d]) * xs[d];
    args.back()[i] = args[0][src];
  }
}

void Concat(const ConcatParams& p, std::span<float* const> args) {
  const std::vector<int64_t> out = p.out_shape();
  for (int64_t i = 0; i < Count(out); ++i) {
    std::vector<int64_t> idx = Unflatten(i, out);
    size_t k = 0;
    while (idx[p.axis] >= p.inputs[k][p.axis]) idx[p.axis] -= p.inputs[k++][p.axis];
    int64_t src = 0;
    for (size_t d = 0; d < idx.size(); ++d) src = src * p.inputs[k][d] + idx[d];
    args.back()[i] = args[k][src];
  }
}

double ResizeSource(int64_t o, int64_t in, int64_t out, ResizeCoord coord) {
  const double scale = static_cast<double>(out) / static_cast<double>(in);
  switch (coord) {
    case ResizeCoord::kAsymmetric:
      return o / scale;
    case ResizeCoord::kAlignCorners:
      return out == 1 ? 0.0 : o * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    case ResizeCoord::kPytorchHalfPixel:
      if (out == 1) return 0.0;
      [[fallthrough]];
    case ResizeCoord::kHalfPixel:
      return (o + 0.5) / scale - 0.5;
  }
  return o;
}

int64_t Nearest(double s, NearestMode mode, int64_t in) {
  double r = 0;
  switch (mode) {
    case NearestMode::kFloor:
      r = std::floor(s);
      break;
    case NearestMode::kCeil:
      r = std::ceil(s);
      break;
    case NearestMode::kRoundPreferFloor:
      r = std::ceil(s - 0.5);
      break;
    case NearestMode::kRoundPreferCeil:
      r = std::floor(s + 0.5);
      break;
  }
  return std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1);
}

void Resize(const ResizeParams& p, std::span<float* const> args) {
  const float* x = args[0];
  float* y = args.back();
  const int64_t b = std::max<int64_t>(p.block, 1);
  // The flat index of element (row, col) of plane `plane` (= n * c + channel) in an h x w
  // image of the layout (nchw, or nchw{b}c: channels in blocks of b, innermost).
  auto at = [&](int64_t plane, int64_t h, int64_t w, int64_t row, int64_t col) {
    const int64_t nn = plane / p.c, ch = plane % p.c;
    return ((nn * (p.c / b) + ch / b) * h * w + row * w + col) * b + ch % b;
  };
  for (int64_t plane = 0; plane < p.n * p.c; ++plane) {
    auto in = [&](int64_t row, int64_t col) { return x[at(plane, p.h, p.w, row, col)]; };
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        float& out = y[at(plane, p.oh, p.ow, oy, ox)];
        const double sy = ResizeSource(oy, p.h, p.oh, p.coord);
        const double sx = ResizeSource(ox, p.w, p.ow, p.coord);
        if (!p.linear) {
          out = in(Nearest(sy, p.nearest, p.h), Nearest(sx, p.nearest, p.w));
          continue;
        }
        const double cy = std::clamp(sy, 0.0, static_cast<double>(p.h - 1));
        const double cx = std::clamp(sx, 0.0, static_cast<double>(p.w - 1));
        const int64_t y0 = static_cast<int64_t>(std::floor(cy)),
                      x0 = static_cast<int64_t>(std::floor(cx));
        const int64_t y1 = std::min(y0 + 1, p.h - 1), x1 = std::min(x0 + 1, p.w - 1);
        const double fy = cy - y0, fx = cx - x0;
        const double top = in(y0, x0) * (1 - fx) + in(y0, x1) * fx;
        const double bot = in(y1, x0) * (1 - fx) + in(y1, x1) * fx;
        out = static_cast<float>(top * (1 - fy) + bot * fy);
      }
    }
  }
}

void Reduce(const ReduceParams& p, std::span<float* const> args) {
  const std::vector<int64_t> out = p.out_shape();
  const bool is_max = p.kind == ReduceKind::kMax, is_min = p.kind == ReduceKind::kMin;
  const double init = is_max   ? -std::numeric_limits<double>::infinity()
                      : is_min ? std::numeric_limits<double>::infinity()
                               : 0.0;
  std::vector<double> acc(Count(out), init);
  for (int64_t i = 0; i < Count(p.shape); ++i) {
    std::vector<int64_t> idx = Unflatten(i, p.shape);
    for (int64_t a : p.axes) idx[a] = 0;
    int64_t o = 0;
    for (size_t d = 0; d < idx.size(); ++d) o = o * out[d] + idx[d];
    const double v = args[0][i];
    acc[o] = is_max ? std::max(acc[o], v) : is_min ? std::min(acc[o], v) : acc[o] + v;
  }
  const double div = p.kind == ReduceKind::kMean
                         ? static_cast<double>(Count(p.shape)) / static_cast<double>(Count(out))
                         : 1.0;
  for (size_t o = 0; o < acc.size(); ++o) args.back()[o] = static_cast<float>(acc[o] / div);
}

}  // namespace

absl::Status EwiseReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetEwiseParams(spec), Ewise, args);
}

absl::Status TransposeReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetTransposeParams(spec), Transpose, args);
}

absl::Status SliceReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetSliceParams(spec), Slice, args);
}

absl::Status ConcatReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetConcatParams(spec), Concat, args);
}

absl::Status ResizeReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetResizeParams(spec), Resize, args);
}

absl::Status ReduceReference(const WorkloadSpec& spec, ReferenceArgs args) {
  return RunReference(GetReduceParams(spec), Reduce, args);
}

}  // namespace lathe::ir::internal
