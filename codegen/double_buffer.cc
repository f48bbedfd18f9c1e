// Double buffering of shared tiles in the GPU recipe: see gpu_passes.h.
#include <algorithm>
#include <cstdint>
#include <set>
#include <unordered_map>
#include <vector>

#include "codegen/gpu_passes.h"
#include "ir/arith.h"
#include "ir/functor.h"

namespace lathe::codegen {

namespace {

using namespace lathe::ir;  // NOLINT: a lowering pass speaks IR throughout

// Where doubling fits: the doubled tiles within 32 KiB (two blocks per SM everywhere) and the
// kernel's static shared memory within 48 KiB.
constexpr int64_t kMaxDoubledBytes = 32 * 1024;
constexpr int64_t kMaxKernelSharedBytes = 48 * 1024;

// Elements of a tile's half: a multiple of 4, so that 4-lane accesses stay 16-byte aligned in
// both halves.
int64_t HalfOf(const Buffer& b) { return (b->size() + 3) / 4 * 4; }

// One kernel (a top-level loop nest) at a time, in the order the backend emits it.
class DoubleBuffer {
 public:
  explicit DoubleBuffer(const Stmt& kernel) {
    VisitStmt(
        kernel, [](const Expr&) {},
        [&](const Stmt& x) {
          if (x->kind == StmtKind::kAllocate && x->buffer->scope == "shared") {
            kernel_shared_bytes_ += x->buffer->size() * x->buffer->dtype.bytes();
          }
          int64_t ext;
          if (x->kind != StmtKind::kFor || x->for_kind != ForKind::kThreadBinding ||
              !AsConstInt(x->extent, &ext)) {
            return;
          }
          int t = GpuTagIndex(x->thread_tag);
          if (t >= 0) dims_[t] = std::max({dims_[t], ext, int64_t{1}});
        });
  }

  Stmt Run(const Stmt& s) {
    if (!s) return s;
    switch (s->kind) {
      case StmtKind::kFor:
        return RunFor(s);
      case StmtKind::kIfThenElse: {
        ++divergent_;
        Stmt out = MapChildren(s, [&](const Stmt& c) { return Run(c); });
        --divergent_;
        return out;
      }
      default:
        return MapChildren(s, [&](const Stmt& c) { return Run(c); });
    }
  }

 private:
  Stmt RunFor(const Stmt& s) {
    int64_t ext = -1;
    const int tag = s->for_kind == ForKind::kThreadBinding ? GpuTagIndex(s->thread_tag) : -1;
    if (tag >= 0) {
      // A thread loop shorter than the block is guarded: its body is thread-dependent.
      const bool guard = AsConstInt(s->extent, &ext) && ext < dims_[tag];
      if (guard) ++divergent_;
      if (tag >= 3) thread_vars_.push_back(s->var.get());
      Stmt out = MapChildren(s, [&](const Stmt& c) { return Run(c); });
      if (tag >= 3) thread_vars_.pop_back();
      if (guard) --divergent_;
      return out;
    }
    if (Stmt d = Doubled(s)) return d;
    return MapChildren(s, [&](const Stmt& c) { return Run(c); });
  }

  // True if `item` mentions a thread index: every thread would fill a different region.
  bool ThreadDependent(const Stmt& item) const {
    bool found = false;
    VisitStmt(
        item,
        [&](const Expr& root) {
          Visit(root, [&](const Expr& e) {
            if (e->kind == ExprKind::kVar && std::find(thread_vars_.begin(), thread_vars_.end(),
                                                       e.get()) != thread_vars_.end()) {
              found = true;
            }
          });
        },
        [](const Stmt&) {});
    return found;
  }

  // `s` double-buffered, or null when it is not of that form or its tiles do not fit.
  Stmt Doubled(const Stmt& s) {
    int64_t ext = 0, mn = 0;
    if (s->for_kind != ForKind::kSerial || !AsConstInt(s->extent, &ext) || ext < 2 ||
        !AsConstInt(s->min, &mn) || mn != 0 || divergent_ > 0) {
      return nullptr;
    }
    // The loop's body: shared tiles (only), filled by a prefix of the statements under them
    // that stores nothing else, read by the rest, which store none of them.
    std::vector<Buffer> tiles;
    std::set<const BufferNode*> shared;
    Stmt cur = s->body;
    for (; cur && cur->kind == StmtKind::kAllocate; cur = cur->body) {
      if (cur->buffer->scope != "shared") return nullptr;
      tiles.push_back(cur->buffer);
      shared.insert(cur->buffer.get());
    }
    if (tiles.empty() || !cur) return nullptr;
    std::vector<Stmt> items = cur->kind == StmtKind::kSeq ? cur->seq : std::vector<Stmt>{cur};
    size_t fills = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      bool into_tiles = false, elsewhere = false, allocates = false;
      VisitStmt(
          items[i], [](const Expr&) {},
          [&](const Stmt& x) {
            if (x->kind == StmtKind::kStore)
              (shared.count(x->buffer.get()) ? into_tiles : elsewhere) = true;
            if (x->kind == StmtKind::kAllocate && x->buffer->scope == "shared") allocates = true;
          });
      if (allocates) return nullptr;
      if (into_tiles && (elsewhere || i != fills)) return nullptr;
      if (into_tiles) ++fills;
    }
    if (fills == 0 || fills == items.size()) return nullptr;
    int64_t bytes = 0;
    for (const Buffer& b : tiles) bytes += b->size() * b->dtype.bytes();
    if (2 * bytes > kMaxDoubledBytes ||
        kernel_shared_bytes_ + doubled_bytes_ + bytes > kMaxKernelSharedBytes) {
      return nullptr;
    }
    for (size_t i = 0; i < fills; ++i) {
      if (ThreadDependent(items[i])) return nullptr;
    }
    doubled_bytes_ += bytes;

    // The doubled tiles, and the accesses of one half (`k` selects it; null: the first).
    std::unordered_map<const BufferNode*, Buffer> doubled;
    for (const Buffer& b : tiles) {
      doubled[b.get()] = MakeBuffer(b->name, b->dtype, {HalfOf(b) + b->size()}, b->scope);
    }
    auto in_half = [&](const Stmt& x, const Expr& k) {
      auto moved = [&](const Buffer& b, const Expr& index) {
        if (!k) return index;
        Expr offset = Mul(Mod(k, IntImm(2)), IntImm(HalfOf(b)));
        if (index->kind == ExprKind::kRamp) {
          return Ramp(Add(offset, index->operands[0]), index->operands[1], index->type.lanes);
        }
        return Add(offset, index);
      };
      return RewriteStmt(
          x,
          [&](const Expr& e) {
            if (e->kind != ExprKind::kLoad) return e;
            auto it = doubled.find(e->buffer.get());
            if (it == doubled.end()) return e;
            return Load(it->second, moved(e->buffer, e->operands[0]),
                        e->operands.size() > 1 ? e->operands[1] : nullptr);
          },
          [&](const Stmt& st) {
            if (st->kind != StmtKind::kStore) return st;
            auto it = doubled.find(st->buffer.get());
            if (it == doubled.end()) return st;
            return Store(it->second, moved(st->buffer, st->index), st->value, st->predicate);
          });
    };
    const std::vector<Stmt> fill_items(items.begin(),
                                       items.begin() + static_cast<ptrdiff_t>(fills));
    const Stmt fill = Seq(fill_items);
    std::vector<Stmt> read_items;
    for (size_t i = fills; i < items.size(); ++i) read_items.push_back(Run(items[i]));

    const Expr& k = s->var;
    Stmt first = For(k, IntImm(0), IntImm(1), ForKind::kSerial, in_half(fill, nullptr));
    Expr next = MakeVar(k->name + "_next", k->type);
    Stmt ahead = IfThenElse(LT(Add(k, IntImm(1)), IntImm(ext)),
                            For(next, Add(k, IntImm(1)), IntImm(1), ForKind::kSerial,
                                in_half(Substitute(fill, {{k.get(), next}}), next)));
    Stmt loop =
        For(k, s->min, s->extent, ForKind::kSerial, Seq({ahead, in_half(Seq(read_items), k)}));
    Stmt out = Seq({first, loop});
    for (auto it = tiles.rbegin(); it != tiles.rend(); ++it) {
      out = Allocate(doubled.at(it->get()), out);
    }
    return out;
  }

  int64_t dims_[6] = {1, 1, 1, 1, 1, 1};
  int64_t kernel_shared_bytes_ = 0, doubled_bytes_ = 0;
  int divergent_ = 0;
  std::vector<const ExprNode*> thread_vars_;
};

}  // namespace

int GpuTagIndex(const std::string& tag) {
  static const char* const kTags[6] = {"blockIdx.x",  "blockIdx.y",  "blockIdx.z",
                                       "threadIdx.x", "threadIdx.y", "threadIdx.z"};
  for (int i = 0; i < 6; ++i) {
    if (tag == kTags[i]) return i;
  }
  return -1;
}

Stmt DoubleBufferSharedTiles(const Stmt& body) {
  // Root allocations (global intermediates) over the kernels, one per top-level statement.
  if (!body) return body;
  if (body->kind == StmtKind::kAllocate) {
    return MapChildren(body, [](const Stmt& c) { return DoubleBufferSharedTiles(c); });
  }
  if (body->kind == StmtKind::kSeq) {
    return MapChildren(body, [](const Stmt& kernel) { return DoubleBuffer(kernel).Run(kernel); });
  }
  return DoubleBuffer(body).Run(body);
}

}  // namespace lathe::codegen
