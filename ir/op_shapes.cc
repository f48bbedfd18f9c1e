// \file
// The shape rules of the operators (the `check_shapes` column of ir/op_registry.h): the checks
// that need several keys of a spec at once (divisibility, positive output extents, blocks
// that divide their channels) and the size limit of every tensor, intermediates included.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/op_registry.h"
#include "ir/ops.h"
#include "ir/ops_internal.h"

namespace lathe::ir::internal {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

// Rejects any tensor (arguments and intermediates) above kMaxTensorElements.
absl::Status CheckSizes(const std::string& op,
                        const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
  for (const auto& [name, shape] : shapes) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    if (n > kMaxTensorElements) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": tensor ", name, " of shape ", ShapeString(shape), " has more than ",
                       static_cast<int64_t>(kMaxTensorElements), " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status Invalid(const std::string& op, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(op, ": ", msg));
}

// Output extents of a window: "(h=.., r=.., pad=.., dilation=.., stride=..)" for messages.
std::string WindowText(const WorkloadSpec& spec, const char* extent, int64_t e, const char* win,
                       int64_t r) {
  std::string out = absl::StrCat("(", extent, "=", e, ", ", win, "=", r, ", pad=", spec.Str("pad"));
  if (spec.params.count("dilation")) absl::StrAppend(&out, ", dilation=", spec.Str("dilation"));
  absl::StrAppend(&out, ", stride=", spec.Str("stride"), ")");
  return out;
}

}  // namespace

absl::Status CheckEwiseShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  if (spec.params.count("b") != spec.params.count("binary")) {
    return Invalid(op, "keys 'b' and 'binary' go together");
  }
  absl::StatusOr<EwiseParams> p = GetEwiseParams(spec);
  if (!p.ok()) return p.status();
  if (!p->upsample.empty()) {
    if (p->b.empty()) return Invalid(op, "key 'upsample' needs 'b'");
    // The factors are positive extents of at most kMaxExtent (the key's kind), so b times
    // them cannot overflow; CheckSizes bounds the result.
    if (p->upsample.size() != p->b.size()) {
      return Invalid(op, absl::StrCat("upsample=", spec.Str("upsample"),
                                      " needs one factor per dimension of b=", spec.Str("b")));
    }
  }
  if (p->epilogue.Has(StepKind::kResUp) && p->out_shape().size() < 4) {
    return Invalid(op,
                   "epilogue step resup upsamples dimensions 2 and 3: the output needs 4 or more");
  }
  const std::vector<int64_t> bu = p->b_upsampled();
  const size_t rank = std::max(p->a.size(), p->b.size());
  for (size_t i = 0; i < rank && !p->b.empty(); ++i) {
    const int64_t da = i < rank - p->a.size() ? 1 : p->a[i - (rank - p->a.size())];
    const int64_t db = i < rank - bu.size() ? 1 : bu[i - (rank - bu.size())];
    if (da != db && da != 1 && db != 1) {
      return Invalid(op, absl::StrCat("shapes a=", spec.Str("a"), " and b=", spec.Str("b"),
                                      " do not broadcast"));
    }
  }
  return CheckSizes(op, {{"Y", p->out_shape()}});
}

absl::Status CheckTransposeShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<TransposeParams> p = GetTransposeParams(spec);
  if (!p.ok()) return p.status();
  std::vector<int64_t> sorted = p->perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted.size() != p->shape.size() || sorted[i] != static_cast<int64_t>(i)) {
      return Invalid(op, absl::StrCat("perm=", spec.Str("perm"), " is not a permutation of the ",
                                      p->shape.size(), " dimensions"));
    }
  }
  return CheckSizes(op, {{"X", p->shape}});
}

absl::Status CheckSliceShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<SliceParams> p = GetSliceParams(spec);
  if (!p.ok()) return p.status();
  const size_t rank = p->shape.size();
  if (p->begin.size() != rank || p->size.size() != rank || p->step.size() != rank) {
    return Invalid(op, "begin, size and step need one entry per dimension of shape");
  }
  for (size_t d = 0; d < rank; ++d) {
    if (p->begin[d] + (p->size[d] - 1) * p->step[d] >= p->shape[d]) {
      return Invalid(op,
                     absl::StrCat("dimension ", d, ": begin ", p->begin[d], ", size ", p->size[d],
                                  ", step ", p->step[d], " reads past the extent ", p->shape[d]));
    }
  }
  return CheckSizes(op, {{"X", p->shape}});
}

absl::Status CheckConcatShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<ConcatParams> p = GetConcatParams(spec);
  if (!p.ok()) return p.status();
  const auto& first = p->inputs.front();
  if (p->axis >= static_cast<int64_t>(first.size())) {
    return Invalid(op, absl::StrCat("axis ", p->axis, " is not below the rank ", first.size()));
  }
  for (const auto& in : p->inputs) {
    bool ok = in.size() == first.size();
    for (size_t d = 0; ok && d < in.size(); ++d) {
      ok = static_cast<int64_t>(d) == p->axis || in[d] == first[d];
    }
    if (!ok) {
      return Invalid(
          op, absl::StrCat("inputs ", spec.Str("inputs"), " differ outside the axis ", p->axis));
    }
  }
  return CheckSizes(op, {{"Y", p->out_shape()}});
}

absl::Status CheckResizeShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<ResizeParams> p = GetResizeParams(spec);
  if (!p.ok()) return p.status();
  const auto layout = spec.params.find("layout");
  if (p->block > 0) {
    if (p->c % p->block != 0) {
      return Invalid(op, absl::StrCat("c=", p->c, " is not a multiple of the block ", p->block,
                                      " of layout ", layout->second));
    }
  } else if (layout != spec.params.end() && layout->second == "nhwc") {
    return Invalid(op, "layout nhwc is not supported (nchw or nchw{x}c)");
  }
  return CheckSizes(op, {{"X", {p->n, p->c, p->h, p->w}}, {"Y", {p->n, p->c, p->oh, p->ow}}});
}

absl::Status CheckWinogradShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<WinogradParams> p = GetWinogradParams(spec);
  if (!p.ok()) return p.status();
  const char* chan = p->output_side ? "k" : "c";
  if (p->block <= 0) {
    return Invalid(op, absl::StrCat("layout ", spec.Str("layout"), " is not blocked (nchw{x}c)"));
  }
  if (p->c % p->block != 0) {
    return Invalid(op, absl::StrCat(chan, "=", p->c, " is not a multiple of the block ", p->block,
                                    " of layout ", spec.Str("layout")));
  }
  if (p->oh() < 1 || p->ow() < 1 || p->oh() % p->m != 0 || p->ow() % p->m != 0) {
    return Invalid(op, absl::StrCat("output ", p->oh(), "x", p->ow(), " is not a whole number of ",
                                    p->m, "x", p->m, " tiles"));
  }
  const int64_t t = p->t();
  return CheckSizes(op, {{"V", {t * t, p->tiles(), p->c}}});
}

absl::Status CheckReduceShapes(const WorkloadSpec& spec) {
  const std::string& op = spec.op;
  absl::StatusOr<ReduceParams> p = GetReduceParams(spec);
  if (!p.ok()) return p.status();
  for (size_t i = 0; i < p->axes.size(); ++i) {
    if (p->axes[i] >= static_cast<int64_t>(p->shape.size()) ||
        (i > 0 && p->axes[i] <= p->axes[i - 1])) {
      return Invalid(
          op, absl::StrCat("axes=", spec.Str("axes"), " must be increasing dimensions of shape"));
    }
  }
  return CheckSizes(op, {{"X", p->shape}});
}

absl::Status CheckMatmulShapes(const WorkloadSpec& spec) {
  absl::StatusOr<MatmulParams> p = GetMatmulParams(spec);
  if (!p.ok()) return p.status();
  std::vector<int64_t> lead =
      p->batch > 0 ? std::vector<int64_t>{p->batch} : std::vector<int64_t>{};
  auto with = [&](int64_t a, int64_t b) {
    std::vector<int64_t> s = lead;
    s.push_back(a);
    s.push_back(b);
    return s;
  };
  return CheckSizes(spec.op,
                    {{"A", with(p->m, p->k)}, {"B", with(p->k, p->n)}, {"C", with(p->m, p->n)}});
}

namespace {

absl::Status CheckConvShapes(const WorkloadSpec& spec, bool transposed) {
  const std::string& op = spec.op;
  Conv2dParams p;
  ConvTransposeParams t;
  int64_t oh = 0, ow = 0;
  if (transposed) {
    absl::StatusOr<ConvTransposeParams> q = GetConvTransposeParams(spec);
    if (!q.ok()) return q.status();
    t = *q;
    static_cast<Window2d&>(p) = t;
    p.n = t.n, p.c = t.c, p.h = t.h, p.w = t.w, p.k = t.k, p.r = t.r, p.s = t.s;
    p.groups = t.groups;
    oh = t.oh(), ow = t.ow();
  } else {
    absl::StatusOr<Conv2dParams> q = GetConv2dParams(spec);
    if (!q.ok()) return q.status();
    p = *q;
    oh = p.oh(), ow = p.ow();
  }
  if (p.c % p.groups != 0) {
    return Invalid(op, absl::StrCat("c=", p.c, " is not divisible by groups=", p.groups));
  }
  if (p.k % p.groups != 0) {
    return Invalid(op, absl::StrCat("k=", p.k, " is not divisible by groups=", p.groups));
  }
  if (transposed) {
    if (t.output_padding_h >= t.stride_h && t.output_padding_h >= t.dilation_h) {
      return Invalid(op, "output_padding must be smaller than the stride or the dilation");
    }
    if (oh <= 0 || ow <= 0) {
      return Invalid(op, absl::StrCat("output extents ", oh, "x", ow, " are not positive"));
    }
    return CheckSizes(op, {{"X", {p.n, p.c, p.h, p.w}},
                           {"W", {p.c, p.k / p.groups, p.r, p.s}},
                           {"Y", {p.n, p.k, oh, ow}}});
  }
  // Checked on the numerator: C++ division truncates towards zero.
  if (p.h + p.pad_t + p.pad_b - p.dilation_h * (p.r - 1) - 1 < 0) {
    return Invalid(op, "output height is not positive " + WindowText(spec, "h", p.h, "r", p.r));
  }
  if (p.w + p.pad_l + p.pad_r - p.dilation_w * (p.s - 1) - 1 < 0) {
    return Invalid(op, "output width is not positive " + WindowText(spec, "w", p.w, "s", p.s));
  }
  const int64_t ph = p.h + p.pad_t + p.pad_b, pw = p.w + p.pad_l + p.pad_r;
  const int64_t cpg = p.c / p.groups;
  if (p.blocked()) {
    const int64_t x = p.cblock, y = p.kblock;
    const std::string layout = spec.Str("layout");
    if (p.c % x != 0) {
      return Invalid(
          op, absl::StrCat("c=", p.c, " is not a multiple of the block ", x, " of layout ", layout,
                           "; choose a block that divides the channels"));
    }
    if (p.k % y != 0) {
      return Invalid(op, absl::StrCat("k=", p.k, " is not a multiple of the output block ", y,
                                      "; choose a kblock that divides the output channels"));
    }
    // A grouped convolution's output blocks lie within its groups: each reads its own group's
    // input channels only, input blocks of the group or a part of one block that holds several
    // whole groups. A depthwise one (groups = c = k) has one block for both.
    const int64_t kpg = p.k / p.groups;
    const bool blocks_fit =
        p.depthwise() ? x == y : !p.plain_input && (cpg % x == 0 || x % cpg == 0) && kpg % y == 0;
    if (p.groups > 1 && !blocks_fit) {
      return Invalid(op, absl::StrCat("groups=", p.groups, " in layout ", layout,
                                      ": a blocked grouped convolution is depthwise (groups = c "
                                      "= k, kblock equal to the block) or its output blocks "
                                      "divide the ",
                                      kpg, " output channels of a group and its input blocks the ",
                                      cpg, " input channels or a multiple of them"));
    }
    if (p.plain_input) {
      return CheckSizes(op, {{"X", {p.n, p.c, p.h, p.w}},
                             {"pad", {p.n, p.c, ph, pw}},
                             {"W", {p.k / y, 1, p.r, p.s, x, y}},
                             {"Y", {p.n, p.k / y, oh, ow, y}}});
    }
    if (p.depthwise()) {
      return CheckSizes(op, {{"X", {p.n, p.c / x, p.h, p.w, x}},
                             {"pad", {p.n, p.c / x, ph, pw, x}},
                             {"W", {p.k / y, p.r, p.s, y}},
                             {"Y", {p.n, p.k / y, oh, ow, y}}});
    }
    const int64_t wx = p.wblock();
    return CheckSizes(op, {{"X", {p.n, p.c / x, p.h, p.w, x}},
                           {"pad", {p.n, p.c / x, ph, pw, x}},
                           {"W", {p.k / y, cpg / wx, p.r, p.s, wx, y}},
                           {"Y", {p.n, p.k / y, oh, ow, y}}});
  }
  if (p.nhwc) {
    return CheckSizes(op, {{"X", {p.n, p.h, p.w, p.c}},
                           {"pad", {p.n, ph, pw, p.c}},
                           {"W", {p.r, p.s, cpg, p.k}},
                           {"Y", {p.n, oh, ow, p.k}}});
  }
  return CheckSizes(op, {{"X", {p.n, p.c, p.h, p.w}},
                         {"pad", {p.n, p.c, ph, pw}},
                         {"W", {p.k, cpg, p.r, p.s}},
                         {"Y", {p.n, p.k, oh, ow}}});
}

}  // namespace

absl::Status CheckPool2dShapes(const WorkloadSpec& spec) {
  absl::StatusOr<Pool2dParams> p = GetPool2dParams(spec);
  if (!p.ok()) return p.status();
  // Every window then overlaps the input, so a max pool never yields -inf.
  if (std::max(p->pad_t, p->pad_b) >= p->r || std::max(p->pad_l, p->pad_r) >= p->s) {
    return absl::InvalidArgumentError(absl::StrCat("pool2d: pad=", spec.Str("pad"),
                                                   " must be smaller than the window (r=", p->r,
                                                   ", s=", p->s, ")"));
  }
  if (p->h + p->pad_t + p->pad_b < p->r) {
    return Invalid("pool2d",
                   "output height is not positive " + WindowText(spec, "h", p->h, "r", p->r));
  }
  if (p->w + p->pad_l + p->pad_r < p->s) {
    return Invalid("pool2d",
                   "output width is not positive " + WindowText(spec, "w", p->w, "s", p->s));
  }
  const int64_t ph = p->h + p->pad_t + p->pad_b, pw = p->w + p->pad_l + p->pad_r;
  if (p->block > 0) {
    if (p->c % p->block != 0) {
      return Invalid("pool2d", absl::StrCat("c=", p->c, " is not a multiple of the block ",
                                            p->block, " of layout ", spec.Str("layout")));
    }
    const int64_t b = p->block;
    return CheckSizes("pool2d", {{"X", {p->n, p->c / b, p->h, p->w, b}},
                                 {"pad", {p->n, p->c / b, ph, pw, b}},
                                 {"Y", {p->n, p->c / b, p->oh(), p->ow(), b}}});
  }
  if (p->nhwc) {
    return CheckSizes("pool2d", {{"X", {p->n, p->h, p->w, p->c}},
                                 {"pad", {p->n, ph, pw, p->c}},
                                 {"Y", {p->n, p->oh(), p->ow(), p->c}}});
  }
  return CheckSizes("pool2d", {{"X", {p->n, p->c, p->h, p->w}},
                               {"pad", {p->n, p->c, ph, pw}},
                               {"Y", {p->n, p->c, p->oh(), p->ow()}}});
}

absl::Status CheckSoftmaxShapes(const WorkloadSpec& spec) {
  absl::StatusOr<SoftmaxParams> p = GetSoftmaxParams(spec);
  if (!p.ok()) return p.status();
  return CheckSizes(spec.op, {{"X", {p->m, p->n, p->inner}}});
}

absl::Status CheckLayerNormShapes(const WorkloadSpec& spec) {
  return CheckSizes(spec.op, {{"X", {spec.Int("m"), spec.Int("n")}}});
}

absl::Status CheckConv2dShapes(const WorkloadSpec& spec) { return CheckConvShapes(spec, false); }

// Each part as conv2d checks it, the message naming the part.
absl::Status CheckSepConv2dShapes(const WorkloadSpec& spec) {
  absl::StatusOr<std::pair<WorkloadSpec, WorkloadSpec>> parts = SepConvParts(spec);
  if (!parts.ok()) return Invalid(spec.op, std::string(parts.status().message()));
  absl::StatusOr<SepConv2dParams> p = GetSepConv2dParams(spec);
  if (!p.ok()) return Invalid(spec.op, std::string(p.status().message()));
  if (absl::Status s = CheckConv2dShapes(parts->first); !s.ok()) {
    return Invalid(spec.op, absl::StrCat("depthwise part: ", s.message()));
  }
  if (absl::Status s = CheckConv2dShapes(parts->second); !s.ok()) {
    return Invalid(spec.op, absl::StrCat("1x1 part: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckConvTransposeShapes(const WorkloadSpec& spec) {
  return CheckConvShapes(spec, true);
}

}  // namespace lathe::ir::internal
