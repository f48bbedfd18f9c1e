#include "cost_model/features.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "ir/arith.h"

namespace lathe::cost_model {
namespace {

using ir::Expr;
using ir::ExprKind;
using ir::ExprNode;
using ir::ForKind;
using ir::Stmt;
using ir::StmtKind;
using ir::StmtNode;

constexpr double kCacheLineBytes = 64;

// Buffer feature fields, in layout order.
constexpr std::array<const char*, kNumBufferFeatures> kBufferFeatureNames = {
    "read",
    "write",
    "read_write",
    "bytes",
    "unique_bytes",
    "lines",
    "unique_lines",
    "reuse_loop",
    "reuse_serial",
    "reuse_none",
    "reuse_dis_iter",
    "reuse_dis_bytes",
    "reuse_count",
    "bytes_per_reuse",
    "unique_bytes_per_reuse",
    "lines_per_reuse",
    "unique_lines_per_reuse",
    "stride",
    "contiguous",
    "local_scope"};

// Indices of the GPU group after its first flag.
int GpuTagIndex(const std::string& tag) {
  static const char* const kTags[] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z", "threadIdx.x",
                                      "threadIdx.y", "threadIdx.z", "vthread"};
  for (int i = 0; i < 7; ++i) {
    if (tag == kTags[i]) return 1 + i;
  }
  return -1;
}

struct Loop {
  const ExprNode* var;
  double extent;
  ForKind kind;
  std::string tag;
};

struct Alloc {
  const ir::BufferNode* buffer;
  double outer_prod;
};

// Values of some variables (all others read 0).
using Assignment = std::vector<std::pair<const ExprNode*, int64_t>>;

// Integer value of an index or condition expression under `values`; used to measure how an
// access moves with each loop and how often a branch is taken. Approximate for non-affine
// indices, which is what a feature needs.
int64_t EvalInt(const Expr& e, const Assignment& values) {
  if (e == nullptr) return 0;
  auto op = [&](int i) { return EvalInt(e->operands[i], values); };
  switch (e->kind) {
    case ExprKind::kIntImm:
      return e->int_value;
    case ExprKind::kFloatImm:
      return static_cast<int64_t>(e->float_value);
    case ExprKind::kVar:
      for (const auto& [v, x] : values) {
        if (v == e.get()) return x;
      }
      return 0;
    case ExprKind::kAdd:
      return op(0) + op(1);
    case ExprKind::kSub:
      return op(0) - op(1);
    case ExprKind::kMul:
      return op(0) * op(1);
    case ExprKind::kDiv: {
      int64_t a = op(0), b = op(1);
      if (b == 0) return 0;
      int64_t q = a / b;
      return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
    }
    case ExprKind::kMod: {
      int64_t a = op(0), b = op(1);
      if (b == 0) return 0;
      int64_t r = a % b;
      return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    }
    case ExprKind::kMin:
      return std::min(op(0), op(1));
    case ExprKind::kMax:
      return std::max(op(0), op(1));
    case ExprKind::kEQ:
      return op(0) == op(1);
    case ExprKind::kNE:
      return op(0) != op(1);
    case ExprKind::kLT:
      return op(0) < op(1);
    case ExprKind::kLE:
      return op(0) <= op(1);
    case ExprKind::kGT:
      return op(0) > op(1);
    case ExprKind::kGE:
      return op(0) >= op(1);
    case ExprKind::kAnd:
      return op(0) && op(1);
    case ExprKind::kOr:
      return op(0) || op(1);
    case ExprKind::kNot:
      return !op(0);
    case ExprKind::kSelect:
      return op(0) ? op(1) : op(2);
    case ExprKind::kCast:
    case ExprKind::kRamp:  // the first lane
    case ExprKind::kBroadcast:
      return op(0);
    default:  // loads and calls inside an index: data-dependent
      return 0;
  }
}

int64_t EvalIndex(const Expr& e, const ExprNode* var, int64_t value) {
  return EvalInt(e, Assignment{{var, value}});
}

// Whether `e` holds something EvalInt cannot see (a load, a call): then its value is data.
bool DataDependent(const Expr& e) {
  if (e == nullptr) return false;
  if (e->kind == ExprKind::kLoad || e->kind == ExprKind::kCall) return true;
  for (const Expr& o : e->operands) {
    if (DataDependent(o)) return true;
  }
  return false;
}

// The variables `e` mentions, each once.
void CollectVars(const Expr& e, std::vector<const ExprNode*>* vars) {
  if (e == nullptr) return;
  if (e->kind == ExprKind::kVar) {
    if (std::find(vars->begin(), vars->end(), e.get()) == vars->end()) vars->push_back(e.get());
    return;
  }
  for (const Expr& o : e->operands) CollectVars(o, vars);
}

// |d index / d var| for a unit step of each loop's variable: loops whose variable the index
// does not mention have stride 0 without evaluating it.
std::vector<double> Strides(const Expr& index, const std::vector<Loop>& loops) {
  std::vector<double> sv(loops.size(), 0.0);
  std::vector<const ExprNode*> vars;
  CollectVars(index, &vars);
  if (vars.empty()) return sv;
  const int64_t base = EvalIndex(index, nullptr, 0);
  for (size_t l = 0; l < loops.size(); ++l) {
    if (std::find(vars.begin(), vars.end(), loops[l].var) == vars.end()) continue;
    sv[l] = std::fabs(static_cast<double>(EvalIndex(index, loops[l].var, 1) - base));
  }
  return sv;
}

struct Access {
  Expr index;
  bool write;
  int lanes;
};

struct BufferAccesses {
  const ir::BufferNode* buffer;
  std::vector<Access> accesses;
};

class Extractor {
 public:
  explicit Extractor(FeatureMatrix* out) : out_(out) {}

  void Run(const Stmt& s) {
    if (s == nullptr) return;
    switch (s->kind) {
      case StmtKind::kFor:
        OnFor(*s);
        return;
      case StmtKind::kStore:
        OnStore(*s);
        return;
      case StmtKind::kIfThenElse: {
        // Each arm counts as often as it runs: loop versioning (Lower()'s partition pass)
        // puts a guard-free copy of a body and the guarded original under one condition.
        const double outer = share_;
        path_.push_back({s->cond, true});
        share_ = PathShare();
        Run(s->body);
        if (s->else_body) {
          path_.back().second = false;
          share_ = PathShare();
          Run(s->else_body);
        }
        path_.pop_back();
        share_ = outer;
        return;
      }
      case StmtKind::kSeq:
        for (const Stmt& c : s->seq) Run(c);
        return;
      case StmtKind::kAllocate:
        allocs_.push_back({s->buffer.get(), LoopProduct(0)});
        Run(s->body);
        allocs_.pop_back();
        return;
    }
  }

 private:
  void OnFor(const StmtNode& s) {
    int64_t ext = 0;
    double extent = 1;
    if (ir::AsConstInt(s.extent, &ext)) {
      extent = static_cast<double>(std::max<int64_t>(ext, 0));
    } else {
      ir::ConstInterval b = ir::ConstBound(s.extent, ranges_);
      if (b.bounded()) extent = static_cast<double>(std::max<int64_t>(b.hi, 1));
    }
    ir::ConstInterval mn = ir::ConstBound(s.min, ranges_);
    ir::ConstInterval range;
    if (mn.bounded()) {
      range.lo = mn.lo;
      range.hi = mn.hi + static_cast<int64_t>(std::max(extent, 1.0)) - 1;
    }
    ranges_[s.var.get()] = range;
    loops_.push_back({s.var.get(), extent, s.for_kind, s.thread_tag});
    Run(s.body);
    loops_.pop_back();
    ranges_.erase(s.var.get());
  }

  // The share of the enclosing loops' iterations on which every branch condition on the
  // path to the current statement takes its arm (path_), from the conditions evaluated on a
  // grid over the loop variables they mention: every value of short loops, both ends and
  // evenly spaced values of long ones, at most kMaxSamples points. Conditions that depend on
  // data or on variables that are not loops here count as always taken.
  double PathShare() const {
    constexpr double kMaxSamples = 512;
    std::vector<std::pair<Expr, bool>> conds;
    std::vector<const ExprNode*> vars;
    for (const auto& [cond, taken] : path_) {
      if (cond->type.lanes > 1 || DataDependent(cond)) continue;
      std::vector<const ExprNode*> mine;
      CollectVars(cond, &mine);
      bool known = true;
      for (const ExprNode* v : mine) {
        auto it = ranges_.find(v);
        known = known && it != ranges_.end() && it->second.bounded();
      }
      if (!known) continue;
      CollectVars(cond, &vars);
      conds.push_back({cond, taken});
    }
    if (conds.empty()) return 1;
    const double per_var =
        vars.empty() ? 1 : std::max(2.0, std::floor(std::pow(kMaxSamples, 1.0 / vars.size())));
    std::vector<std::vector<int64_t>> values;
    double total = 1;
    for (const ExprNode* v : vars) {
      const ir::ConstInterval r = ranges_.at(v);
      const int64_t n = std::min<int64_t>(r.hi - r.lo + 1, static_cast<int64_t>(per_var));
      std::vector<int64_t> xs;
      for (int64_t k = 0; k < n; ++k)
        xs.push_back(n == 1 ? r.lo : r.lo + (r.hi - r.lo) * k / (n - 1));
      total *= static_cast<double>(xs.size());
      values.push_back(std::move(xs));
    }
    if (total > kMaxSamples * 4) return 1;  // many variables of two values each
    Assignment at(vars.size());
    std::vector<size_t> pos(vars.size(), 0);
    double hits = 0;
    for (double k = 0; k < total; ++k) {
      for (size_t d = 0; d < vars.size(); ++d) at[d] = {vars[d], values[d][pos[d]]};
      bool all = true;
      for (const auto& [cond, taken] : conds) {
        all = all && (EvalInt(cond, at) != 0) == taken;
      }
      hits += all ? 1 : 0;
      for (size_t d = 0; d < vars.size(); ++d) {  // the next grid point
        if (++pos[d] < values[d].size()) break;
        pos[d] = 0;
      }
    }
    return hits / total;
  }

  // Product of the extents of loops at levels >= `level`.
  double LoopProduct(size_t level) const {
    double p = 1;
    for (size_t l = level; l < loops_.size(); ++l) p *= loops_[l].extent;
    return p;
  }

  // Adds the operations of `e` to f (float) and i (int and bool), each weighted by
  // `weight` x lanes; nodes are visited parents first (as ir::Visit does), so that the sums
  // are accumulated in one fixed order.
  static void CountOps(const Expr& e, double weight, std::array<double, kNumFloatOpFeatures>& f,
                       std::array<double, kNumIntOpFeatures>& i) {
    if (e == nullptr) return;
    const ExprNode& n = *e;
    double w = weight * std::max(n.type.lanes, 1);
    bool fl = n.type.is_float();
    switch (n.kind) {
      case ExprKind::kAdd:
      case ExprKind::kSub:
        (fl ? f[0] : i[0]) += w;
        break;
      case ExprKind::kMul:
        (fl ? f[1] : i[1]) += w;
        break;
      case ExprKind::kDiv:
      case ExprKind::kMod:
        (fl ? f[2] : i[2]) += w;
        break;
      case ExprKind::kEQ:
      case ExprKind::kNE:
      case ExprKind::kLT:
      case ExprKind::kLE:
      case ExprKind::kGT:
      case ExprKind::kGE:
        (n.operands[0]->type.is_float() ? f[3] : i[3]) += w;
        break;
      case ExprKind::kCall:
        (fl ? f[4] : i[6]) += w;
        break;
      case ExprKind::kMin:
      case ExprKind::kMax:
        (fl ? f[5] : i[4]) += w;
        break;
      case ExprKind::kSelect:
        (fl ? f[6] : i[5]) += w;
        break;
      case ExprKind::kCast:
        (fl ? f[6] : i[6]) += w;
        break;
      case ExprKind::kAnd:
      case ExprKind::kOr:
      case ExprKind::kNot:
        i[7] += w;
        break;
      default:
        break;
    }
    for (const Expr& o : n.operands) CountOps(o, weight, f, i);
  }

  // `lanes` > 1 (kVectorized only): the store's vector width, counted as an innermost
  // vectorized loop of that extent (Lower()'s CPU recipe has turned the loop into lanes).
  void Annotation(ForKind kind, float* out, int lanes = 1) const {
    int num = 0, last = -1;
    double prod = 1, len = 0;
    for (size_t l = 0; l < loops_.size(); ++l) {
      if (loops_[l].kind != kind) continue;
      ++num;
      prod *= loops_[l].extent;
      len = loops_[l].extent;
      last = static_cast<int>(l);
    }
    int depth = static_cast<int>(loops_.size());
    int pos = last < 0 ? 0 : last == depth - 1 ? 1 : last == 0 ? 3 : 2;
    if (lanes > 1) {
      ++num;
      prod *= lanes;
      len = lanes;
      pos = 1;
    }
    out[0] = static_cast<float>(num);
    out[1] = num > 0 ? static_cast<float>(prod) : 0.f;
    out[2] = static_cast<float>(len);
    out[3 + pos] = 1.f;
  }

  // The widest vector the store computes: its value, index and loads.
  static int VectorLanes(const StmtNode& s) {
    int lanes = 1;
    auto widest = [&](auto& self, const Expr& e) -> void {
      if (e == nullptr) return;
      lanes = std::max(lanes, e->type.lanes);
      for (const Expr& o : e->operands) self(self, o);
    };
    widest(widest, s.value);
    widest(widest, s.index);
    return lanes;
  }

  // Unique elements of one access touched by the loops at levels >= `level`.
  double UniqueElements(const Access& a, size_t level, const std::vector<double>& strides) const {
    double count = 1, span = 1;
    for (size_t l = level; l < loops_.size(); ++l) {
      if (strides[l] == 0) continue;
      count *= loops_[l].extent;
      span += strides[l] * (loops_[l].extent - 1);
    }
    double lanes = std::max(a.lanes, 1);
    return std::min(count * lanes, span + lanes - 1);
  }

  void OnStore(const StmtNode& s) {
    std::vector<float> row(kNumFeatures, 0.f);
    const size_t depth = loops_.size();
    const double prod = LoopProduct(0);
    // Executions: the loops' iterations on which the enclosing branches take this arm.
    const double runs = prod * share_;
    const int store_lanes = std::max(s.value->type.lanes, 1);

    // --- op counts ---
    std::array<double, kNumFloatOpFeatures> fops{};
    std::array<double, kNumIntOpFeatures> iops{};
    CountOps(s.value, runs, fops, iops);
    CountOps(s.index, runs, fops, iops);
    CountOps(s.predicate, runs, fops, iops);
    for (const auto& [guard, taken] : path_) CountOps(guard, runs, fops, iops);
    iops[8] = runs * static_cast<double>(path_.size());
    for (int k = 0; k < kNumFloatOpFeatures; ++k) row[kOffsetFloatOps + k] = fops[k];
    for (int k = 0; k < kNumIntOpFeatures; ++k) row[kOffsetIntOps + k] = iops[k];
    double float_ops_per_iter = 0;
    for (double v : fops) float_ops_per_iter += v;
    float_ops_per_iter /= std::max(runs, 1e-9);

    // --- annotations ---
    Annotation(ForKind::kVectorized, &row[kOffsetVectorize], VectorLanes(s));
    Annotation(ForKind::kUnrolled, &row[kOffsetUnroll]);
    Annotation(ForKind::kParallel, &row[kOffsetParallel]);
    for (const Loop& l : loops_) {
      if (l.kind != ForKind::kThreadBinding) continue;
      row[kOffsetGpu] = 1.f;
      int idx = GpuTagIndex(l.tag);
      if (idx < 0) continue;
      float& slot = row[kOffsetGpu + idx];
      slot = slot == 0.f ? static_cast<float>(l.extent) : slot * static_cast<float>(l.extent);
    }

    // --- buffer accesses ---
    std::vector<BufferAccesses> buffers;
    auto add_access = [&](const ir::BufferNode* b, Access a) {
      for (BufferAccesses& ba : buffers) {
        if (ba.buffer == b) {
          ba.accesses.push_back(std::move(a));
          return;
        }
      }
      buffers.push_back({b, {std::move(a)}});
    };
    add_access(s.buffer.get(), {s.index, true, store_lanes});
    // Loads in the order ir::Visit meets them (parents first).
    auto collect_loads = [&](auto& self, const Expr& e) -> void {
      if (e == nullptr) return;
      if (e->kind == ExprKind::kLoad) {
        add_access(e->buffer.get(), {e->operands[0], false, std::max(e->type.lanes, 1)});
      }
      for (const Expr& o : e->operands) self(self, o);
    };
    collect_loads(collect_loads, s.value);
    collect_loads(collect_loads, s.index);

    struct BufferStats {
      const ir::BufferNode* buffer;
      std::vector<float> f;
      double bytes;
      std::vector<double> unique_at;  // unique bytes below each level 0..depth
      int reuse_level;                // the loop carrying reuse, or -1
    };
    std::vector<BufferStats> stats;
    for (const BufferAccesses& ba : buffers) {
      BufferStats st{ba.buffer, std::vector<float>(kNumBufferFeatures, 0.f), 0, {}, -1};
      const double eb = ba.buffer->dtype.bytes();
      const double cap = static_cast<double>(ba.buffer->size()) * eb;
      bool reads = false, writes = false;
      double lanes_total = 0;
      std::vector<std::vector<double>> strides;
      for (const Access& a : ba.accesses) {
        (a.write ? writes : reads) = true;
        lanes_total += a.lanes;
        strides.push_back(Strides(a.index, loops_));
      }
      st.unique_at.assign(depth + 1, 0);
      for (size_t level = 0; level <= depth; ++level) {
        double u = 0;
        for (size_t k = 0; k < ba.accesses.size(); ++k) {
          u = std::max(u, UniqueElements(ba.accesses[k], level, strides[k]));
        }
        st.unique_at[level] = std::min(u * eb, cap > 0 ? cap : u * eb);
      }
      // The innermost loop that moves any access, and its largest stride.
      int moving = -1;
      double stride = 0;
      for (int l = static_cast<int>(depth) - 1; l >= 0 && moving < 0; --l) {
        for (const auto& sv : strides) {
          if (sv[l] != 0) {
            moving = l;
            stride = std::max(stride, sv[l]);
          }
        }
      }
      const double bytes = runs * lanes_total * eb;
      const double unique_bytes = st.unique_at[0];
      double lines = 1;
      if (moving >= 0) {
        const double outer = prod / LoopProduct(moving);
        const double ext = loops_[moving].extent;
        lines = stride * eb >= kCacheLineBytes
                    ? outer * ext
                    : outer * std::ceil((stride * (ext - 1) + 1) * eb / kCacheLineBytes);
        lines *= LoopProduct(moving + 1);
      }
      lines *= share_;
      const double unique_lines = stride * eb >= kCacheLineBytes
                                      ? unique_bytes / eb
                                      : std::ceil(unique_bytes / kCacheLineBytes);
      // Reuse: the innermost loop (extent > 1) that moves no access carries reuse.
      int reuse_level = -1;
      for (int l = static_cast<int>(depth) - 1; l >= 0; --l) {
        if (loops_[l].extent <= 1) continue;
        bool moves = false;
        for (const auto& sv : strides) moves = moves || sv[l] != 0;
        if (!moves) {
          reuse_level = l;
          break;
        }
      }
      double reuse_ct = 0, dis_iter = 0, dis_bytes = 0;
      int reuse_type = 2;
      if (reuse_level >= 0) {
        reuse_type = 0;
        reuse_ct = loops_[reuse_level].extent;
        dis_iter = LoopProduct(reuse_level + 1);
        st.reuse_level = reuse_level;  // distance in bytes: below, once all footprints are known
      } else if (ba.accesses.size() > 1) {
        reuse_type = 1;
        reuse_ct = static_cast<double>(ba.accesses.size() - 1);
        dis_iter = 1;
        dis_bytes = lanes_total * eb;
      }
      const double per = std::max(reuse_ct, 1.0);
      float* f = st.f.data();
      f[0] = reads && !writes;
      f[1] = writes && !reads;
      f[2] = reads && writes;
      f[3] = bytes;
      f[4] = unique_bytes;
      f[5] = lines;
      f[6] = unique_lines;
      f[7 + reuse_type] = 1.f;
      f[10] = dis_iter;
      f[11] = dis_bytes;
      f[12] = reuse_ct;
      f[13] = bytes / per;
      f[14] = unique_bytes / per;
      f[15] = lines / per;
      f[16] = unique_lines / per;
      f[17] = stride;
      f[18] = stride == 1 ? 1.f : 0.f;
      f[19] = ba.buffer->scope == "local" ? 1.f : 0.f;
      st.bytes = bytes;
      stats.push_back(std::move(st));
    }
    // Reuse distance in bytes of a loop-carried reuse: everything the store touches in one
    // iteration of the reuse loop.
    for (BufferStats& st : stats) {
      if (st.reuse_level < 0) continue;
      size_t level = static_cast<size_t>(st.reuse_level) + 1;
      double total = 0;
      for (const BufferStats& o : stats) total += o.unique_at[level];
      st.f[11] = static_cast<float>(total);
    }
    std::vector<const BufferStats*> order;
    for (const BufferStats& st : stats) order.push_back(&st);
    std::stable_sort(order.begin(), order.end(), [](const BufferStats* a, const BufferStats* b) {
      return a->bytes > b->bytes;
    });
    for (size_t k = 0; k < order.size() && k < static_cast<size_t>(kMaxBuffers); ++k) {
      std::copy(order[k]->f.begin(), order[k]->f.end(),
                row.begin() + kOffsetBuffers + k * kNumBufferFeatures);
    }

    // --- allocation ---
    float* al = &row[kOffsetAlloc];
    for (auto it = allocs_.rbegin(); it != allocs_.rend(); ++it) {
      if (it->buffer != s.buffer.get()) continue;
      double size = static_cast<double>(it->buffer->size()) * it->buffer->dtype.bytes();
      al[0] = size;
      al[1] = size * it->outer_prod;
      al[2] = it->outer_prod;
      al[3] = it->buffer->scope == "local";
      al[4] = it->buffer->scope == "shared";
      break;
    }
    al[5] = static_cast<float>(allocs_.size());

    // --- loop nest ---
    row[kOffsetLoopNest] = static_cast<float>(depth);
    row[kOffsetLoopNest + 1] = prod;
    double unroll = 0;
    for (int l = static_cast<int>(depth) - 1; l >= 0 && loops_[l].kind == ForKind::kUnrolled; --l) {
      unroll = (unroll == 0 ? 1 : unroll) * loops_[l].extent;
    }
    row[kOffsetLoopNest + 2] = unroll;

    // --- arithmetic intensity curve, outermost level first ---
    std::vector<double> curve;
    for (size_t level = 0; level < std::max<size_t>(depth, 1); ++level) {
      double flops = float_ops_per_iter * LoopProduct(level);
      double bytes = 0;
      for (const BufferStats& st : stats) bytes += st.unique_at[level];
      curve.push_back(bytes > 0 ? flops / bytes : 0);
    }
    for (int k = 0; k < kNumIntensitySamples; ++k) {
      double t = curve.size() == 1
                     ? 0
                     : static_cast<double>(k) * (curve.size() - 1) / (kNumIntensitySamples - 1);
      size_t lo = static_cast<size_t>(std::floor(t));
      size_t hi = std::min(lo + 1, curve.size() - 1);
      double frac = t - static_cast<double>(lo);
      row[kOffsetIntensity + k] = static_cast<float>(curve[lo] * (1 - frac) + curve[hi] * frac);
    }

    for (float& v : row) {
      if (v == 0.f) {  // most of the row (absent buffers, groups): log2(1 + 0) is +0
        v = 0.f;
        continue;
      }
      double x = std::fabs(static_cast<double>(v));
      v = std::isfinite(x) ? static_cast<float>(std::log2(1.0 + x)) : 64.f;
    }
    out_->data.insert(out_->data.end(), row.begin(), row.end());
    ++out_->num_rows;
  }

  FeatureMatrix* out_;
  std::vector<Loop> loops_;
  std::vector<Alloc> allocs_;
  // The branch conditions (guards) around the current statement and the arm taken (true:
  // then); each counts as a guard of the stores below it, in either arm.
  std::vector<std::pair<Expr, bool>> path_;
  // The share of the loops' iterations on which the enclosing branches take the current arm.
  double share_ = 1;
  ir::RangeMap ranges_;
};

}  // namespace

const std::vector<std::string>& FeatureNames() {
  static const std::vector<std::string>* names = [] {
    auto* n = new std::vector<std::string>{
        "float_addsub", "float_mul",  "float_divmod", "float_cmp",  "float_math", "float_minmax",
        "float_other",  "int_addsub", "int_mul",      "int_divmod", "int_cmp",    "int_minmax",
        "int_select",   "int_other",  "bool_ops",     "guards"};
    for (const char* a : {"vec", "unroll", "parallel"}) {
      for (const char* f :
           {"num", "prod", "len", "pos_none", "pos_inner", "pos_middle", "pos_outer"}) {
        n->push_back(absl::StrCat(a, ".", f));
      }
    }
    for (const char* g : {"is_gpu", "blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x",
                          "threadIdx.y", "threadIdx.z", "vthread"}) {
      n->push_back(absl::StrCat("gpu.", g));
    }
    for (int b = 0; b < kMaxBuffers; ++b) {
      for (const char* f : kBufferFeatureNames) n->push_back(absl::StrCat("buf", b, ".", f));
    }
    for (const char* f : {"size", "total_bytes", "outer_prod", "local", "shared", "count"}) {
      n->push_back(absl::StrCat("alloc.", f));
    }
    for (const char* f : {"num_loops", "prod", "auto_unroll"}) {
      n->push_back(absl::StrCat("nest.", f));
    }
    for (int k = 0; k < kNumIntensitySamples; ++k) n->push_back(absl::StrCat("intensity.", k));
    return n;
  }();
  return *names;
}

absl::StatusOr<FeatureMatrix> ExtractFeatures(const ir::LoweredFunc& func) {
  if (func.body == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("lowered function '", func.name, "' has no body"));
  }
  FeatureMatrix m;
  Extractor(&m).Run(func.body);
  return m;
}

}  // namespace lathe::cost_model
