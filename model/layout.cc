// Blocked activation layouts between convolutions (model/kernels.h: BlockLayouts).
//
// A value is stored either plainly (its ONNX shape, row-major: NCHW for images) under its own
// name, or in the blocked layout nchw{b}c ([n, C/b, h, w, b], TVM's NCHWc) under the name
// "<value>@nchw{b}c"; a value may have both. Kernels are visited in execution order and each
// runs in one layout: convolutions blocked wherever their channels allow; pooling, resizing,
// elementwise kernels and channel concats in the layout of their blocked input; everything
// else plainly.
// Where a kernel wants a value in a form that does not exist yet, a conversion (a transpose
// kernel, or a view where the two layouts share their memory: h*w == 1) is inserted before it.
// Weights of blocked convolutions are packed here, once, at compile time.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "ir/ops.h"
#include "model/kernels.h"

namespace lathe::model {
namespace {

using ir::StepKind;

std::string Dims(const std::vector<int64_t>& d) { return absl::StrJoin(d, "x"); }

// Right-aligns `s` to rank 4 (numpy broadcast against an NCHW output).
std::vector<int64_t> Rank4(const std::vector<int64_t>& s) {
  std::vector<int64_t> r(4 - std::min<size_t>(4, s.size()), 1);
  r.insert(r.end(), s.begin(), s.end());
  return r;
}

// A piece of the common refinement of two row-major factorizations of one index: its extent
// and the factor of each that it belongs to.
struct Piece {
  int64_t size;
  int a, b;
};

// The common refinement of the factorizations `a` and `b` of one row-major index (extent-1
// factors dropped), major pieces first; nullopt where they do not nest (an extent of one is not
// a multiple of the other's at a shared boundary) or cover different extents.
std::optional<std::vector<Piece>> Refine(const std::vector<int64_t>& a,
                                         const std::vector<int64_t>& b) {
  std::vector<int> ai, bi;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > 1) ai.push_back(static_cast<int>(i));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] > 1) bi.push_back(static_cast<int>(i));
  }
  std::vector<Piece> out;
  size_t i = 0, j = 0;
  int64_t x = ai.empty() ? 1 : a[ai[0]], y = bi.empty() ? 1 : b[bi[0]];
  while (i < ai.size() && j < bi.size()) {
    const int64_t piece = std::min(x, y);
    if (std::max(x, y) % piece != 0) return std::nullopt;
    out.push_back({piece, ai[i], bi[j]});
    x /= piece;
    y /= piece;
    if (x == 1 && ++i < ai.size()) x = a[ai[i]];
    if (y == 1 && ++j < bi.size()) y = b[bi[j]];
  }
  if (i != ai.size() || j != bi.size()) return std::nullopt;
  return out;
}

// Channels [begin, begin + size) of a 4-d value at batch 1, whole along every other axis: what
// a slice kernel takes when it is such a slab (contiguous in the plain layout and in every
// blocked one whose block divides begin and size).
struct ChannelSlab {
  int64_t begin, size;
};
std::optional<ChannelSlab> ChannelSlabOf(const KernelDesc& k) {
  if (k.op != "slice") return std::nullopt;
  const std::vector<int64_t> shape = ParseDims(k.params.at("shape"));
  const std::vector<int64_t> begin = ParseDims(k.params.at("begin"));
  const std::vector<int64_t> size = ParseDims(k.params.at("size"));
  const std::vector<int64_t> step = ParseDims(k.params.at("step"));
  if (shape.size() != 4 || begin.size() != 4 || size.size() != 4 || step.size() != 4 ||
      shape[0] != 1) {
    return std::nullopt;
  }
  for (size_t d = 0; d < 4; ++d) {
    if (step[d] != 1 || (d != 1 && (begin[d] != 0 || size[d] != shape[d]))) return std::nullopt;
  }
  return ChannelSlab{begin[1], size[1]};
}

// The multiply-adds per input element (k * r * s) from which a convolution re-blocks an input
// held in a smaller block (Blocker::TryConv).
constexpr int64_t kReblockWork = 128;

// Dense convolutions of at most this many input channels held only plainly read them so
// (Blocker::TryConv).
constexpr int64_t kMaxPlainInputChannels = 4;

class Blocker {
 public:
  Blocker(Graph& g, Lowered& l, int64_t lanes, bool full_width)
      : g_(g), l_(l), lanes_(lanes), full_width_(full_width) {}

  void Run();

 private:
  // The channel block of C channels: the vector's lanes where they divide C, all channels
  // where there are fewer; else, where the core executes whole vectors, FullWidthBlockOf for
  // multiples of 4. Where it splits a vector in halves (Zen 4's AVX-512, measured there), the
  // largest power of two from 4 up that divides C (all C
  // channels instead where that is a quarter vector and they fill 4 to 8 vectors, or half of
  // one of 16 lanes in a block count that 2 and 3 do not divide and they fill 8 to 16), else
  // all channels up to 4 vectors or 64 channels; 0 (stay plain) beyond. (24 channels on AVX-512 as
  // one block of 24 measured slower than three blocks of 8 for PP-OCR det's 3x3 96->24 conv at
  // 160x160, best of 10 rule-picked candidates: 31 ms as scalar code, 78 ms vectorized as 24-lane
  // vectors, against 16-24 ms; busy host.)
  int64_t BlockOf(int64_t c) const {
    if (c % lanes_ == 0) return lanes_;
    if (c < lanes_) return c;
    if (full_width_ && c % 4 == 0 && (c >= 2 * lanes_ || lanes_ >= 16)) return FullWidthBlockOf(c);
    for (int64_t p = lanes_ / 2; p >= 4; p /= 2) {
      if (c % p != 0) continue;
      // A block of a quarter vector (4 lanes of 16) runs at a quarter of the vector's width:
      // from 4 vectors of channels to 8, one block of all of them (its last vector masked, at
      // least 7 lanes in 8 used) is faster. ShuffleNetV2's 116 on AVX-512: 1x1 116->116 at
      // 14x14 55 -> 35 us, at 28x28 231 -> 136, depthwise 3x3 at 14x14 5.7 -> 4.0, at 28x28
      // 19 -> 16; the model 3.4 -> 3.0 ms. Below 4 vectors the masked part weighs more: PP-OCR
      // rec's 1x3 480->60 at 1x40 in an output block of 60: 78 -> 107 us.
      if (p * 4 <= lanes_ && c >= 4 * lanes_ && c <= 8 * lanes_) return c;
      // Half vectors of 8 lanes (AVX-512) in a count that no tile of 2 or 3 blocks divides
      // leave a tail on every pass of a register tile over the blocks: beyond 8 vectors, one
      // block of all of them, up to 16. 1x1 convs at 14x14, us: 232->232 221 -> 109
      // (ShuffleNetV2), 152->152 91 -> 54 (RegNetX-200MF), 184->80 38 -> 27 (MobileNetV3);
      // their depthwise 3x3s within 1 us; the three models' changed tasks add up to 236, 360
      // and 37 us less. (On AVX2 the half vector is 4 lanes: one block of 116 measured no
      // faster there, 1x1 at 14x14 66 / 68 us, and its strided depthwise slower.)
      const int64_t blocks = c / p;
      if (p * 2 == lanes_ && p >= 8 && c > 8 * lanes_ && c <= 16 * lanes_ && blocks % 2 != 0 &&
          blocks % 3 != 0) {
        return c;
      }
      return p;
    }
    // One block of all of a few channels whatever the vector (the vectors of its last one
    // masked): ShuffleNetV2's 58 on AVX2 (8 lanes), 1x1 58->58 at 28x28 plain 402 us, one block
    // 120 (nchw2c 117-161, nchw29c 182-208; Zen 4, 2 threads).
    return c <= std::max<int64_t>(4 * lanes_, 64) ? c : 0;
  }
  // BlockOf where the core executes whole vectors (full_width_): an operation on a part of a
  // vector costs as much as one on all of it, so a block of half or a quarter of a vector runs
  // at that part of the peak. Channels that fill at most 16 vectors take one block (its last
  // vector masked); more, the largest block of at most 8 vectors that divides them. Intel Xeon
  // (Sapphire Rapids) AVX-512, 2 threads, rule-picked schedules, us: 1x1 convs 24->56 at 56x56
  // 221 -> 59 (nchw8c -> one block each), 56->56 at 28x28 81 -> 27, 56->152 150 -> 70, 40->120
  // 67 -> 32, 120->40 108 -> 32, 24->96 at 160x160 514 -> 478; PP-OCR det's 3x3 96->24 at
  // 160x160 6.0 -> 5.1 ms; 384->360 at 20x20 665 (kblock 8) -> 500 (120; 360 as one block 547);
  // the depthwise convs between them slower, 5x5 of 120 at 28x28 28 -> 32, of 72 at stride 2
  // 21 -> 30, and 3x3 of 56 faster, 19.5 -> 18. AVX2 code on the same host: 1x1 116->116 at
  // 28x28 294 -> 159 (nchw4c -> one block), 20->60 at 56x56 110 -> 62, depthwise 3x3 of 116
  // within 0.5 us. Not below 2 vectors of 8 lanes (16 registers): PP-OCR det's 1x1 48->12 at
  // 160x160 in one block of 12 took 490-909 us against 363-413 in blocks of 4 (its vector
  // chunks, 8 lanes and 4, pass over the inputs once each).
  int64_t FullWidthBlockOf(int64_t c) const {
    if (c <= 16 * lanes_) return c;
    int64_t d = 8 * lanes_;
    while (c % d != 0) d -= 4;
    return d;
  }
  bool IsActivation4d(const std::string& v) const {
    return !g_.Const(v) && g_.Find(v)->shape.size() == 4;
  }
  // The storage root of `v` when `v` is a same-shape view of it (Identity, Dropout, ...).
  std::string SameShapeRoot(const std::string& v) const {
    std::string r = v;
    for (auto it = l_.aliases.find(r); it != l_.aliases.end(); it = l_.aliases.find(r)) {
      if (it->second.offset != 0 || g_.Find(it->second.base)->shape != g_.Find(v)->shape) break;
      r = it->second.base;
    }
    return r;
  }
  // The storage root of `v` through every view; `offset` (when given): where `v` starts in it.
  std::string Root(const std::string& v, int64_t* offset = nullptr) const {
    std::string r = v;
    int64_t off = 0;
    for (auto it = l_.aliases.find(r); it != l_.aliases.end(); it = l_.aliases.find(r)) {
      off += it->second.offset;
      r = it->second.base;
    }
    if (offset != nullptr) *offset = off;
    return r;
  }
  // The blocks `v` exists in (through same-shape views).
  const std::map<int64_t, std::string>* Blocked(const std::string& v) const {
    auto it = blocked_.find(SameShapeRoot(v));
    return it == blocked_.end() || it->second.empty() ? nullptr : &it->second;
  }
  std::string BlockedName(const std::string& v, int64_t b) {
    std::string name = absl::StrCat(v, "@nchw", b, "c");
    const std::vector<int64_t> s = g_.Find(v)->shape;
    Value val;
    val.name = name;
    val.shape = {s[0], s[1] / b, s[2], s[3], b};
    g_.values[name] = val;
    return name;
  }
  // Makes the plain form of `v` exist before the kernel being placed.
  void EnsurePlain(const std::string& v);
  // The name of `v` in block b, converting before the kernel being placed where needed.
  std::string EnsureBlocked(const std::string& v, int64_t b);
  // The blocked shape of a broadcast operand of shape `s` against a blocked output with C
  // channels in blocks of b.
  std::vector<int64_t> OperandShape(const std::vector<int64_t>& s, int64_t c, int64_t b) const {
    std::vector<int64_t> r = Rank4(s);
    if (r[1] == 1) return {r[0], 1, r[2], r[3], 1};
    return {r[0], c / b, r[2], r[3], b};
  }
  // `v` as an operand of a blocked elementwise kernel (its channels c, block b).
  std::string Operand(const std::string& v, int64_t c, int64_t b);
  std::string PackConst(const std::string& v, int64_t c, int64_t b);

  bool TryConv(KernelDesc& k);
  // A grouped convolution whose groups are half the block its channels take elsewhere
  // (RegNetX-200MF's 368 channels in groups of 8, blocks of 16 on AVX-512) as one of groups
  // twice as wide, its weights zero between the pairs' halves: twice the multiply-adds, but in
  // the block of the convolutions around it. Updates k's weights and groups, and `groups`.
  void MergeGroups(KernelDesc& k, int64_t c, int64_t kk, int64_t& groups);
  // Pooling and resizing: blocked where their input already is, in its block.
  bool TryFollow(KernelDesc& k);
  bool TryEwise(KernelDesc& k);
  bool TryConcat(KernelDesc& k);
  // A channel slab of a value held blocked, at block boundaries, is a view of the blocked form
  // (no kernel): ShuffleNetV2's channel split.
  bool TrySlice(const KernelDesc& k);
  // The block a 4-d value is wanted in by what reads it: a convolution's (BlockOf its
  // channels), else the one block that every reader, each a channel slab at block
  // boundaries, wants of its slab; 0 where neither.
  int64_t WantedBlock(const std::string& v) const;
  // The one view that reshapes `v` to 4-d (an alias at offset 0 with v's elements), where
  // nothing else reads v; nullopt otherwise.
  std::optional<std::string> ReshapeTo4d(const std::string& v) const;
  // A transpose of a value that exists only blocked reads the blocked form directly (one
  // data movement instead of a conversion to the plain form and the transpose), and writes a
  // 4-d output that a convolution reads in the block the convolution wants (PP-OCR det's
  // depth-to-space into the second ConvTranspose's 1x1 conv: a 6.3 ms conversion saved).
  bool TryTranspose(KernelDesc& k);
  // The output of a kernel now run blocked: renamed to its blocked name; its plain name is
  // missing until a conversion writes it.
  void BlockOutput(KernelDesc& k, int64_t b) {
    const std::string name = BlockedName(k.output, b);
    blocked_[k.output][b] = name;
    plain_missing_.insert(k.output);
    k.output = name;
  }
  void Emit(KernelDesc k) { out_.push_back(std::move(k)); }

  Graph& g_;
  Lowered& l_;
  const int64_t lanes_;
  const bool full_width_;  // the core executes a whole vector per operation
  std::vector<KernelDesc> out_;
  // Plain value -> its blocked copies by block.
  std::map<std::string, std::map<int64_t, std::string>> blocked_;
  // Values written only in a blocked form so far (their plain name not yet written).
  std::set<std::string> plain_missing_;
  // Values (same-shape roots) that a convolution reads as its input.
  std::set<std::string> conv_inputs_;
  // The kernels that read each value (same-shape roots), in the order they run.
  std::map<std::string, std::vector<const KernelDesc*>> readers_;
};

void Blocker::EnsurePlain(const std::string& v) {
  const std::string root = Root(v);
  if (!plain_missing_.count(root)) return;
  const auto& blocks = blocked_.at(root);
  const auto& [b, name] = *blocks.begin();
  const std::vector<int64_t> s = g_.Find(root)->shape;
  plain_missing_.erase(root);
  if (s[2] * s[3] == 1) {  // [n, C/b, 1, 1, b] is [n, C, 1, 1]
    l_.aliases[root] = Alias{name, 0};
    return;
  }
  Emit(TransposeKernel({s[0], s[1] / b, s[2] * s[3], b}, {0, 1, 3, 2}, name, root,
                       "layout nchw" + std::to_string(b) + "c -> nchw"));
}

std::string Blocker::EnsureBlocked(const std::string& v, int64_t b) {
  const std::string key = SameShapeRoot(v);
  auto& blocks = blocked_[key];
  if (auto it = blocks.find(b); it != blocks.end()) return it->second;
  const std::vector<int64_t> s = g_.Find(key)->shape;
  const int64_t hw = s[2] * s[3];
  const std::string name = BlockedName(key, b);
  const std::string why = absl::StrCat("layout ", "-> nchw", b, "c");
  if (!blocks.empty()) {
    // Re-blocking from b1 when one block divides the other; else through the plain form.
    const int64_t b1 = blocks.begin()->first;
    const std::string& from = blocks.begin()->second;
    if (hw == 1) {
      l_.aliases[name] = Alias{from, 0};
      blocks[b] = name;
      return name;
    }
    if (b % b1 == 0) {
      Emit(TransposeKernel({s[0], s[1] / b, b / b1, hw, b1}, {0, 1, 3, 2, 4}, from, name,
                           absl::StrCat("layout nchw", b1, "c -> nchw", b, "c")));
      blocks[b] = name;
      return name;
    }
    if (b1 % b == 0) {
      Emit(TransposeKernel({s[0], s[1] / b1, hw, b1 / b, b}, {0, 1, 3, 2, 4}, from, name,
                           absl::StrCat("layout nchw", b1, "c -> nchw", b, "c")));
      blocks[b] = name;
      return name;
    }
  }
  EnsurePlain(key);
  if (hw == 1) {
    l_.aliases[name] = Alias{key, 0};
  } else {
    Emit(TransposeKernel({s[0], s[1] / b, b, hw}, {0, 1, 3, 2}, key, name,
                         absl::StrCat("layout nchw -> nchw", b, "c")));
  }
  blocks[b] = name;
  return name;
}

std::string Blocker::PackConst(const std::string& v, int64_t c, int64_t b) {
  const std::vector<int64_t> s = Rank4(g_.Find(v)->shape);
  const ConstData& d = *g_.Const(v);
  ConstData p;
  p.f.resize(d.size());
  const int64_t hw = s[2] * s[3];
  for (int64_t n = 0; n < s[0]; ++n) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < hw; ++i) {
        p.f[((n * (c / b) + ch / b) * hw + i) * b + ch % b] =
            static_cast<float>(d.at((n * c + ch) * hw + i));
      }
    }
  }
  return g_.AddConst(absl::StrCat(v, "@nchw", b, "c"), {s[0], c / b, s[2], s[3], b}, std::move(p));
}

std::string Blocker::Operand(const std::string& v, int64_t c, int64_t b) {
  const std::vector<int64_t> s = Rank4(g_.Find(v)->shape);
  if (s[1] == 1) {  // broadcast over channels: the same memory in both layouts
    if (!g_.Const(v)) EnsurePlain(v);
    return v;
  }
  if (g_.Const(v)) return PackConst(v, c, b);
  return EnsureBlocked(v, b);
}

void Blocker::MergeGroups(KernelDesc& k, int64_t c, int64_t kk, int64_t& groups) {
  const int64_t cpg = c / groups, kpg = kk / groups, b = BlockOf(c);
  if (c != kk || b != 2 * cpg || groups % 2 != 0) return;
  // W [K, C/g, r, s] -> [K, 2C/g, r, s]: output channel o of merged group G reads input
  // channels 2*cpg*G + j; the original weight where j falls in o's own group's half.
  const std::string& w = k.inputs[1];
  const std::vector<int64_t> ws = g_.Find(w)->shape;
  const ConstData& wd = *g_.Const(w);
  const int64_t rs = ws[2] * ws[3];
  ConstData merged;
  merged.f.assign(static_cast<size_t>(kk * 2 * cpg * rs), 0.0f);
  for (int64_t o = 0; o < kk; ++o) {
    const int64_t half = (o / kpg) % 2;
    for (int64_t j = 0; j < cpg; ++j) {
      for (int64_t t = 0; t < rs; ++t) {
        merged.f[(o * 2 * cpg + half * cpg + j) * rs + t] =
            static_cast<float>(wd.at((o * cpg + j) * rs + t));
      }
    }
  }
  k.inputs[1] = g_.AddConst(absl::StrCat(w, "@groups", groups / 2), {kk, 2 * cpg, ws[2], ws[3]},
                            std::move(merged));
  groups /= 2;
  k.params["groups"] = std::to_string(groups);
}

bool Blocker::TryConv(KernelDesc& k) {
  const int64_t c = std::stoll(k.params.at("c")), kk = std::stoll(k.params.at("k"));
  // A grouped convolution (RegNet's and ResNeXt's 3x3s) is blocked where blocks of at least 4
  // channels lie within its groups (ir/op_shapes.cc): each output block then reads its own
  // group's input blocks. (Plain, a grouped conv costs two conversions beside it and runs
  // unvectorized over its channels: RegNetX-400MF's 3x3 160ch/10 groups at 14x14 1.2 ms.)
  int64_t groups = std::stoll(k.params.at("groups"));
  const bool dw = groups > 1 && groups == c && groups == kk;
  if (!g_.Const(k.inputs[1])) return false;
  const bool grouped = groups > 1 && !dw;
  if (grouped) MergeGroups(k, c, kk, groups);
  const int64_t cpg = c / groups, kpg = kk / groups;
  auto within_group = [](int64_t block, int64_t per_group) {
    return block == 0 ? 0 : std::gcd(block, per_group);
  };
  const std::string& x = k.inputs[0];
  // The input's block: the one it already exists in, else the rule's. A dense conv that does
  // much work per input element re-blocks an input held in a smaller block that divides the
  // rule's: PP-OCR det's 3x3 96->24 at 160x160 reads a concat of 24-channel maps in blocks of
  // 8 and took 24 ms at nchw8c against 14 ms at nchw16c (default schedules, AVX-512), for a
  // re-blocking transpose of 2-4 ms.
  int64_t xb = BlockOf(c);
  if (const auto* blocks = Blocked(x)) {
    const int64_t have = blocks->rbegin()->first;
    const bool reblock =
        !dw && xb > have && xb % have == 0 &&
        kk * std::stoll(k.params.at("r")) * std::stoll(k.params.at("s")) >= kReblockWork;
    if (!reblock) xb = have;
  }
  // A block that holds several whole groups stays (each output block reads its group's lanes:
  // RegNetX-200MF's 24, 56 and 152 channels in groups of 8, one block each where the core runs
  // whole vectors); others are cut to the groups.
  const bool groups_in_block = grouped && xb > cpg && xb % cpg == 0;
  if (grouped && !groups_in_block) {
    xb = within_group(xb, cpg);
    if (xb < 4) return false;
  }
  // A few channels held only plainly (a model's RGB input) are read plainly, as one block of
  // all of them (conv2d layout=nchw with a kblock): no conversion pass over the input. The
  // dense kernel broadcasts one input value per FMA in either layout. PP-OCR det's 3x640x640
  // input took 0.50 ms to convert (its record; 1-2 ms in the model, the input cold).
  const bool plain_in = !dw && groups == 1 && c <= kMaxPlainInputChannels && !Blocked(x);
  if (plain_in) xb = c;
  const int64_t yb = dw ? xb : grouped ? within_group(BlockOf(kk), kpg) : BlockOf(kk);
  if (xb == 0 || yb == 0 || c % xb != 0 || kk % yb != 0 || (grouped && yb < 4)) return false;
  // Weights [K, C/g, r, s] -> [K/y, (C/g)/x, r, s, x, y] (depthwise: [K/y, r, s, y]).
  const std::string w = k.inputs[1];
  const std::vector<int64_t> ws = g_.Find(w)->shape;
  const ConstData& wd = *g_.Const(w);
  const int64_t r = ws[2], s = ws[3], rs = r * s;
  ConstData packed;
  packed.f.resize(wd.size());
  std::vector<int64_t> pshape;
  if (dw) {
    for (int64_t oc = 0; oc < kk; ++oc) {
      for (int64_t t = 0; t < rs; ++t) {
        packed.f[((oc / yb) * rs + t) * yb + oc % yb] = static_cast<float>(wd.at(oc * rs + t));
      }
    }
    pshape = {kk / yb, r, s, yb};
  } else {
    ir::Conv2dParams blocks;  // what the weights' block is for the op (wblock)
    blocks.c = c;
    blocks.k = kk;
    blocks.groups = groups;
    blocks.cblock = xb;
    const int64_t wb = blocks.wblock();
    for (int64_t oc = 0; oc < kk; ++oc) {
      for (int64_t ic = 0; ic < cpg; ++ic) {
        for (int64_t t = 0; t < rs; ++t) {
          const int64_t dst =
              ((((oc / yb) * (cpg / wb) + ic / wb) * rs + t) * wb + ic % wb) * yb + oc % yb;
          packed.f[dst] = static_cast<float>(wd.at((oc * cpg + ic) * rs + t));
        }
      }
    }
    pshape = {kk / yb, cpg / wb, r, s, wb, yb};
  }
  if (plain_in) {
    EnsurePlain(x);
  } else {
    k.inputs[0] = EnsureBlocked(x, xb);
  }
  k.inputs[1] = g_.AddConst(absl::StrCat(w, "@nchw", xb, "c"), pshape, std::move(packed));
  if (auto it = k.step_inputs.find(StepKind::kRes); it != k.step_inputs.end()) {
    it->second = EnsureBlocked(it->second, yb);
  }
  k.params["layout"] = plain_in ? std::string("nchw") : absl::StrCat("nchw", xb, "c");
  if (yb != xb || plain_in) k.params["kblock"] = std::to_string(yb);
  BlockOutput(k, yb);
  return true;
}

bool Blocker::TryFollow(KernelDesc& k) {
  const auto* blocks = Blocked(k.inputs[0]);
  if (!blocks) return false;
  const int64_t b = blocks->rbegin()->first;
  k.inputs[0] = blocks->rbegin()->second;
  k.params["layout"] = absl::StrCat("nchw", b, "c");
  BlockOutput(k, b);
  return true;
}

bool Blocker::TryEwise(KernelDesc& k) {
  const std::vector<int64_t>& out = g_.Find(k.output)->shape;
  if (out.size() != 4) return false;
  if (k.epilogue.Has(StepKind::kBias) || k.epilogue.Has(StepKind::kScale) ||
      k.epilogue.Has(StepKind::kShift)) {
    return false;  // per-channel tensors read by the plain channel index
  }
  const int64_t c = out[1];
  // The block of a blocked full-channel input decides.
  int64_t b = 0;
  for (const std::string& in : k.inputs) {
    if (g_.Const(in) || Rank4(g_.Find(in)->shape)[1] != c) continue;
    if (const auto* blocks = Blocked(in)) {
      b = blocks->rbegin()->first;
      break;
    }
  }
  if (b == 0 || c == 1) return false;
  for (const std::string& in : k.inputs) {
    const std::vector<int64_t>& s = g_.Find(in)->shape;
    if (s.size() > 4) return false;
    const int64_t ic = Rank4(s)[1];
    if (ic != 1 && ic != c) return false;
    // A full-channel activation of lower rank (e.g. [C, H, W]) has no blocked form here.
    if (ic == c && s.size() != 4 && !g_.Const(in)) return false;
  }
  auto res = k.step_inputs.find(StepKind::kRes);
  if (res != k.step_inputs.end() && g_.Find(res->second)->shape != out) return false;
  // A coarser residual (model/fuse.cc: FoldUpsampledAdd) is blocked as the output is.
  auto resup = k.step_inputs.find(StepKind::kResUp);
  if (resup != k.step_inputs.end() &&
      g_.Find(resup->second)->shape != ir::ResUpShape(k.epilogue, out)) {
    return false;
  }
  // An upsampled b (model/fuse.cc: FuseResizes): its factors gain the block's, 1.
  if (auto up = k.params.find("upsample"); up != k.params.end()) {
    const std::vector<int64_t>& bs = g_.Find(k.inputs[1])->shape;
    if (bs.size() != 4 || bs[1] != c) return false;
    up->second += "x1";
  }
  static const char* kShapeKeys[] = {"a", "b"};
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const std::vector<int64_t> s = g_.Find(k.inputs[i])->shape;
    k.inputs[i] = Operand(k.inputs[i], c, b);
    k.params[kShapeKeys[i]] = Dims(OperandShape(s, c, b));
  }
  if (res != k.step_inputs.end()) res->second = Operand(res->second, c, b);
  if (resup != k.step_inputs.end()) resup->second = Operand(resup->second, c, b);
  BlockOutput(k, b);
  return true;
}

bool Blocker::TryConcat(KernelDesc& k) {
  if (k.params.at("axis") != "1" || g_.Find(k.output)->shape.size() != 4) return false;
  int64_t b = 0;
  for (const std::string& in : k.inputs) {
    const auto* blocks = Blocked(in);
    if (!blocks || g_.Const(in)) return false;
    const int64_t ib = blocks->rbegin()->first;
    if (b != 0 && ib != b) return false;
    b = ib;
  }
  std::vector<std::string> shapes;
  for (std::string& in : k.inputs) {
    const std::vector<int64_t> s = g_.Find(in)->shape;
    in = blocked_.at(SameShapeRoot(in)).at(b);
    shapes.push_back(Dims({s[0], s[1] / b, s[2], s[3], b}));
  }
  k.params["inputs"] = absl::StrJoin(shapes, "+");
  BlockOutput(k, b);
  return true;
}

bool Blocker::TrySlice(const KernelDesc& k) {
  const std::optional<ChannelSlab> slab = ChannelSlabOf(k);
  const auto* blocks = Blocked(k.inputs[0]);
  if (!slab || !blocks) return false;
  // The block the slab's readers want where the value has it, else the largest that fits,
  // else the wanted one made (one conversion of the value, where the plain route converts it
  // and then the slab).
  const int64_t want = BlockOf(slab->size);
  int64_t b = 0;
  for (const auto& [have, name] : *blocks) {
    if (slab->begin % have == 0 && slab->size % have == 0 && b != want) b = have;
  }
  if (b == 0) {
    if (want <= 1 || slab->begin % want != 0) return false;
    b = want;
  }
  const std::string from = EnsureBlocked(k.inputs[0], b);
  const std::vector<int64_t>& s = g_.Find(k.inputs[0])->shape;
  const std::string name = BlockedName(k.output, b);
  l_.aliases[name] = Alias{from, slab->begin * s[2] * s[3]};
  blocked_[k.output][b] = name;
  plain_missing_.insert(k.output);
  return true;
}

int64_t Blocker::WantedBlock(const std::string& v) const {
  const std::vector<int64_t>& s = g_.Find(v)->shape;
  if (s.size() != 4) return 0;
  if (conv_inputs_.count(v)) return BlockOf(s[1]);
  auto it = readers_.find(v);
  if (it == readers_.end()) return 0;
  int64_t b = 0;
  for (const KernelDesc* r : it->second) {
    const std::optional<ChannelSlab> slab = ChannelSlabOf(*r);
    if (!slab) return 0;
    const int64_t rb = BlockOf(slab->size);
    if (rb <= 1 || slab->begin % rb != 0 || slab->size % rb != 0 || (b != 0 && rb != b)) return 0;
    b = rb;
  }
  return b;
}

std::optional<std::string> Blocker::ReshapeTo4d(const std::string& v) const {
  if (readers_.count(v) || std::count(g_.outputs.begin(), g_.outputs.end(), v)) {
    return std::nullopt;
  }
  std::optional<std::string> view;
  for (const auto& [name, a] : l_.aliases) {
    if (a.base != v) continue;
    const std::vector<int64_t>& s = g_.Find(name)->shape;
    if (view || a.offset != 0 || s.size() != 4 ||
        NumElements(s) != NumElements(g_.Find(v)->shape)) {
      return std::nullopt;
    }
    view = name;
  }
  return view;
}

bool Blocker::TryTranspose(KernelDesc& k) {
  // The transpose reads `in` as a row-major view of its root's elements.
  const std::string& in = k.inputs[0];
  int64_t offset = 0;
  const std::string root = Root(in, &offset);
  if (offset != 0 || !plain_missing_.count(root) || g_.Const(root)) return false;
  const std::vector<int64_t> rs = g_.Find(root)->shape;
  if (rs.size() != 4 || NumElements(rs) != NumElements(g_.Find(in)->shape)) return false;
  const auto& [b, blocked_name] = *blocked_.at(root).rbegin();
  const std::vector<int64_t> view = ParseDims(k.params.at("shape"));
  const std::vector<int64_t> perm = ParseDims(k.params.at("perm"));
  if (view.empty() || perm.size() != view.size()) return false;
  // The logical index of a blocked value is row-major over [n, C/b, b, h, w]; its memory holds
  // those factors in the order n, C/b, h, w, b.
  constexpr int kMemoryPos[] = {0, 1, 4, 2, 3};
  // Pieces of the source's factors and the view's dimensions (both row-major over the input's
  // index), then the view's dimensions in `perm` order against the output's factors (both
  // row-major over the output's index).
  std::optional<std::vector<Piece>> src = Refine({rs[0], rs[1] / b, b, rs[2], rs[3]}, view);
  if (!src) return false;
  std::vector<int> target;  // source pieces in the output's logical order
  std::vector<int64_t> target_sizes;
  for (int64_t d : perm) {
    for (size_t p = 0; p < src->size(); ++p) {
      if ((*src)[p].b == d) {
        target.push_back(static_cast<int>(p));
        target_sizes.push_back((*src)[p].size);
      }
    }
  }
  // A 4-d output is written blocked where its readers want it so (WantedBlock); so is the one
  // 4-d reshape that alone reads a 5-d output (a channel shuffle: Reshape, Transpose, Reshape),
  // which the transpose then writes, the 5-d output becoming its view.
  std::string out = k.output;
  if (g_.Find(out)->shape.size() != 4) {
    if (std::optional<std::string> view = ReshapeTo4d(out)) out = *view;
  }
  const std::vector<int64_t> os = g_.Find(out)->shape;
  const int64_t ob = WantedBlock(out);
  const bool out_blocked = ob > 1 && os[1] % ob == 0;
  if (!out_blocked) out = k.output;
  std::vector<int64_t> out_factors = os;
  std::vector<int> out_pos = {0, 1, 2, 3, 4, 5, 6, 7};
  if (out_blocked) {
    out_factors = {os[0], os[1] / ob, ob, os[2], os[3]};
    out_pos = {0, 1, 4, 2, 3};
  }
  std::optional<std::vector<Piece>> dst = Refine(target_sizes, out_factors);
  if (!dst || out_factors.size() > out_pos.size()) return false;
  // Each final piece: where it sits in the source's memory and in the output's.
  const size_t n = dst->size();
  auto parent = [&](size_t q) { return target[(*dst)[q].a]; };
  std::vector<int> from(n), to(n);
  for (size_t q = 0; q < n; ++q) from[q] = to[q] = static_cast<int>(q);
  std::stable_sort(from.begin(), from.end(), [&](int x, int y) {
    const int px = parent(x), py = parent(y);
    const int mx = kMemoryPos[(*src)[px].a], my = kMemoryPos[(*src)[py].a];
    return mx != my ? mx < my : px < py;
  });
  std::stable_sort(to.begin(), to.end(),
                   [&](int x, int y) { return out_pos[(*dst)[x].b] < out_pos[(*dst)[y].b]; });
  std::vector<int64_t> shape, pos(n), new_perm;
  for (size_t p = 0; p < n; ++p) {
    shape.push_back((*dst)[from[p]].size);
    pos[from[p]] = static_cast<int64_t>(p);
  }
  for (int q : to) new_perm.push_back(pos[q]);
  if (out != k.output) {
    l_.aliases.erase(out);
    l_.aliases[k.output] = Alias{out, 0};
  }
  KernelDesc t = TransposeKernel(shape, new_perm, blocked_name, out, "");
  t.nodes = k.nodes;
  t.nodes.push_back(absl::StrCat("reads layout nchw", b, "c"));
  if (out_blocked) {
    BlockOutput(t, ob);
    t.nodes.back() += absl::StrCat(", writes nchw", ob, "c");
  }
  k = std::move(t);
  return true;
}

void Blocker::Run() {
  for (const KernelDesc& k : l_.kernels) {
    if (k.op == "conv2d") conv_inputs_.insert(SameShapeRoot(k.inputs[0]));
    for (const std::string& in : k.inputs) readers_[SameShapeRoot(in)].push_back(&k);
    for (const auto& [kind, v] : k.step_inputs) readers_[SameShapeRoot(v)].push_back(&k);
  }
  for (KernelDesc k : l_.kernels) {
    if (k.op == "slice" && TrySlice(k)) continue;  // a view: no kernel
    bool blocked = false;
    const bool conv = k.op == "conv2d" && IsActivation4d(k.inputs[0]);
    if (conv) blocked = TryConv(k);
    if (k.op == "pool2d" || k.op == "resize") blocked = TryFollow(k);
    if (k.op == "ewise") blocked = TryEwise(k);
    if (k.op == "concat") blocked = TryConcat(k);
    if (k.op == "transpose") blocked = TryTranspose(k);
    if (blocked) {
      Emit(std::move(k));
      continue;
    }
    for (const std::string& in : k.inputs) EnsurePlain(in);
    for (const auto& [kind, v] : k.step_inputs) EnsurePlain(v);
    Emit(std::move(k));
  }
  for (const std::string& o : g_.outputs) EnsurePlain(o);
  l_.kernels = std::move(out_);
}

}  // namespace

KernelDesc TransposeKernel(std::vector<int64_t> shape, std::vector<int64_t> perm,
                           const std::string& in, const std::string& out, const std::string& why) {
  // Drop extent-1 dimensions.
  std::vector<int64_t> keep_shape, old_to_new(shape.size(), -1);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    old_to_new[d] = static_cast<int64_t>(keep_shape.size());
    keep_shape.push_back(shape[d]);
  }
  std::vector<int64_t> p;
  for (int64_t d : perm) {
    if (old_to_new[d] >= 0) p.push_back(old_to_new[d]);
  }
  // Merge input dimensions d, d+1 that appear as neighbours (d then d+1) in the permutation.
  for (bool merged = true; merged && p.size() > 1;) {
    merged = false;
    for (size_t i = 0; i + 1 < p.size(); ++i) {
      if (p[i + 1] != p[i] + 1) continue;
      const int64_t d = p[i];
      keep_shape[d] *= keep_shape[d + 1];
      keep_shape.erase(keep_shape.begin() + d + 1);
      p.erase(p.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      for (int64_t& q : p) q -= q > d ? 1 : 0;
      merged = true;
      break;
    }
  }
  if (keep_shape.empty()) keep_shape = {1}, p = {0};
  KernelDesc k;
  k.op = "transpose";
  k.params = {{"shape", Dims(keep_shape)}, {"perm", absl::StrJoin(p, "x")}};
  k.inputs = {in};
  k.output = out;
  k.nodes = {why};
  return k;
}

void BlockLayouts(Graph& g, Lowered& l, int64_t lanes, int64_t datapath_lanes) {
  if (lanes <= 1) return;
  Blocker(g, l, lanes, datapath_lanes >= lanes).Run();
}

}  // namespace lathe::model
