// The pipelined contraction templates (contraction.h: contraction_fma_async,
// contraction_mma_tf32_async): both operands' k-tiles copied global -> shared by cp.async in
// a ring of STAGES buffers (STAGES - 1 tiles in flight while one is computed), one barrier
// per k-tile, fragments read from shared memory in a bank-conflict-free layout.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/contraction.h"
#include "codegen/cuda/contraction_text.h"
#include "ir/functor.h"

namespace lathe::codegen::cuda {

namespace {

using internal::Decompose;
using internal::Printer;
using ir::Expr;
using ir::ExprKind;

// One operand as the pipeline copies it: `read` (of an argument), copied where `cond` holds
// (an inlined padding; null: always) and zero-filled elsewhere.
struct AsyncOperand {
  Expr read, cond;
  bool negate = false;  // the read is the select's false side: copied where !cond
  bool k_fast = false;  // its memory runs along k: the tile is [rows][k], else [k][rows]
  int vec = 1;          // floats per copy: 4 (16 bytes, contiguous and aligned) or 1
};

bool IsZero(const Expr& e) {
  return (e->kind == ExprKind::kFloatImm && e->float_value == 0.0) ||
         (e->kind == ExprKind::kIntImm && e->int_value == 0);
}

bool IsArgumentRead(const ir::Workload& w, const Expr& e) {
  if (e->kind != ExprKind::kTensorRead) return false;
  const ir::Tensor* t = w.Find(e->name);
  return t && (*t)->is_placeholder();
}

bool Uses(const Expr& e, const ir::ExprNode* var) {
  bool uses = false;
  ir::Visit(e, [&](const Expr& x) { uses = uses || x.get() == var; });
  return uses;
}

// How many of the innermost `vars` 4 consecutive values of the flattened `vars` (the innermost
// varying fastest), from a flat position that is a multiple of 4, run through while reading 4
// consecutive, 16-byte aligned floats of `read`: the read's innermost indices are exactly those
// vars in order, over the same extents, with a product that is a multiple of 4, and no other
// index uses them. 0 when there are none such.
size_t Contiguous4(const ir::Workload& w, const Expr& read,
                   const std::vector<const ir::ExprNode*>& vars,
                   const std::vector<int64_t>& extents) {
  const ir::Tensor* t = w.Find(read->name);
  const std::vector<int64_t>& shape = (*t)->shape;
  const size_t nd = read->operands.size(), nv = vars.size();
  size_t used = 0;
  int64_t run = 1;
  while (used < nv && used < nd && run % 4 != 0) {
    const Expr& idx = read->operands[nd - 1 - used];
    if (idx->kind != ExprKind::kVar || idx.get() != vars[nv - 1 - used] ||
        shape[nd - 1 - used] != extents[nv - 1 - used]) {
      break;
    }
    run *= extents[nv - 1 - used];
    ++used;
  }
  if (used == 0 || run % 4 != 0) return 0;
  for (size_t i = 0; i + used < nd; ++i) {
    for (size_t v = nv - used; v < nv; ++v) {
      if (Uses(read->operands[i], vars[v])) return 0;
    }
  }
  return used;
}

// `korder`: the reduce axes, outermost first, as K is flattened (empty: their own order).
absl::StatusOr<AsyncOperand> MatchAsyncOperand(const ir::Schedule& sch, const ir::Tensor& t,
                                               const Expr& e, const std::vector<int>& axes,
                                               const char* role,
                                               const std::vector<size_t>& korder = {}) {
  const ir::Workload& w = sch.workload();
  AsyncOperand o;
  if (IsArgumentRead(w, e)) {
    o.read = e;
  } else if (e->kind == ExprKind::kSelect && IsArgumentRead(w, e->operands[1]) &&
             IsZero(e->operands[2])) {
    o.read = e->operands[1];
    o.cond = e->operands[0];
  } else if (e->kind == ExprKind::kSelect && IsArgumentRead(w, e->operands[2]) &&
             IsZero(e->operands[1])) {
    o.read = e->operands[2];
    o.cond = e->operands[0];
    o.negate = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("operand ", role, " of '", t->name,
                     "' is not a read of an argument (or one guarded by a padding): cp.async "
                     "copies memory only"));
  }
  std::vector<const ir::ExprNode*> rvars, avars;
  std::vector<int64_t> rext, aext;
  const std::vector<ir::IterVar>& reduce = t->body->reduce_axes;
  for (size_t i = 0; i < reduce.size(); ++i) {
    const ir::IterVar& r = reduce[korder.empty() ? i : korder[i]];
    rvars.push_back(r->var.get());
    rext.push_back(r->extent);
  }
  for (int a : axes) {
    avars.push_back(t->axes[a]->var.get());
    aext.push_back(t->shape[a]);
  }
  // k-fast when the innermost index runs along K only (a GEMM's A, a convolution's weights,
  // NHWC input channels); a gathered NCHW input (its columns and window both in the innermost
  // index) runs along the columns: longer runs (the image's width) for the copies to coalesce.
  if (!o.read->operands.empty()) {
    bool reduce = false, own = false;
    for (const ir::ExprNode* r : rvars) reduce = reduce || Uses(o.read->operands.back(), r);
    for (const ir::ExprNode* a : avars) own = own || Uses(o.read->operands.back(), a);
    o.k_fast = reduce && !own;
  }
  const std::vector<const ir::ExprNode*>& fast = o.k_fast ? rvars : avars;
  const size_t run = Contiguous4(w, o.read, fast, o.k_fast ? rext : aext);
  // 16-byte copies where 4 elements are contiguous and share the guard (a padding that does
  // not depend on the vars they run through: an NHWC input's channels).
  bool shared_guard = true;
  for (size_t v = fast.size() - run; v < fast.size() && o.cond; ++v) {
    shared_guard = shared_guard && !Uses(o.cond, fast[v]);
  }
  if (run > 0 && shared_guard) o.vec = 4;
  return o;
}

}  // namespace

absl::Status CheckAsyncOperands(const ir::Schedule& sch, const ContractionShape& c) {
  const ir::Stage* s = sch.FindStage(c.stage);
  if (!s) return absl::InvalidArgumentError("no stage '" + c.stage + "'");
  if (auto a = MatchAsyncOperand(sch, s->tensor, c.a, c.rows, "A"); !a.ok()) return a.status();
  if (auto b = MatchAsyncOperand(sch, s->tensor, c.b, c.cols, "B"); !b.ok()) return b.status();
  return absl::OkStatus();
}

namespace internal {

absl::StatusOr<CudaSource> GenerateAsyncContraction(const ir::Schedule& sch, const ir::Stage& ts,
                                                    const ContractionShape& c,
                                                    const std::string& name) {
  const ir::Workload& w = sch.workload();
  const ir::Tensor& t = ts.tensor;
  const bool mma = ts.tensorize == kContractionMmaTf32Async;
  const std::vector<int64_t>& p = ts.tensorize_params;
  const int64_t bm = p[0], bn = p[1], bk = p[2], stages = p[5];
  const int64_t threads = mma ? 32 * p[3] * p[4] : bm / p[3] * (bn / p[4]);
  auto a_op = MatchAsyncOperand(sch, t, c.a, c.rows, "A");
  if (!a_op.ok()) return a_op.status();
  auto b_op = MatchAsyncOperand(sch, t, c.b, c.cols, "B");
  if (!b_op.ok()) return b_op.status();
  // The order K is flattened in (any: the sum does not care). A gathered operand staged along
  // its rows or columns under a guard (an NCHW convolution's padded input: the window r, s in
  // the guard, the channels not) puts the reduce axes its guard uses outermost: where the
  // innermost (the channels) is a multiple of BK, a k-tile then shares the guard and the outer
  // axes, decomposed once per tile, and each copy adds its k offset to the channel. The
  // weights then run along k with a stride (4-byte copies instead of 16-byte ones).
  const std::vector<ir::IterVar>& reduce = t->body->reduce_axes;
  std::vector<size_t> korder;
  for (size_t r = 0; r < reduce.size(); ++r) korder.push_back(r);
  for (const AsyncOperand* op : {&*a_op, &*b_op}) {
    if (!op->cond || op->k_fast) continue;
    std::vector<size_t> outer, inner;
    for (size_t r : korder) (Uses(op->cond, reduce[r]->var.get()) ? outer : inner).push_back(r);
    if (outer.empty() || inner.empty() || reduce[inner.back()]->extent % bk != 0) continue;
    korder = outer;
    korder.insert(korder.end(), inner.begin(), inner.end());
    a_op = MatchAsyncOperand(sch, t, c.a, c.rows, "A", korder);
    b_op = MatchAsyncOperand(sch, t, c.b, c.cols, "B", korder);
    if (!a_op.ok()) return a_op.status();
    if (!b_op.ok()) return b_op.status();
    break;
  }
  // A k-tile shares every reduce axis but the innermost, decomposed once per tile.
  const bool tile_shares_outer = reduce[korder.back()]->extent % bk == 0;

  ContractionNames names = NameContraction(sch, t, c, korder);
  std::map<const ir::ExprNode*, std::string>& vars = names.vars;
  const std::vector<std::string>& sp_names = names.spatial;
  const std::vector<std::string>& r_names = names.reduce;  // in K's order, outermost first
  const std::vector<int64_t>& r_ext = names.reduce_extents;
  const ir::Stage* epi = c.epilogue.empty() ? nullptr : sch.FindStage(c.epilogue);
  Printer pr(w, vars);
  auto names_of = [&](const std::vector<int>& axes) { return Pick(sp_names, axes); };
  auto extents_of = [&](const std::vector<int>& axes) { return Pick(t->shape, axes); };

  // Shared tiles, per stage. k-major ([k][rows], rows contiguous) or rows-major ([rows][k]).
  // Row lengths, for reads without bank conflicts. mma (lane 4g+t, k pairs 2t, 2t+1 below): a
  // [rows][k] tile is read in 8-byte pairs at (row g, k 2t), a half-warp's 16 lanes over rows
  // g = 0..3: a row length of 8 or 24 mod 32 floats puts them in 32 banks; a [k][rows] tile
  // at (k 2t, row g or 2g): a row length of 4 mod 16 does. fma reads float4s: along rows
  // (consecutive threads, any length) or, for a [rows][k] tile, rows ty + TY*i (an odd number
  // of float4s per row: distinct bank groups).
  struct Tile {
    const AsyncOperand* op;
    const char* smem;
    const std::vector<int>* axes;
    int64_t len, extent, ld, floats;
    const char* origin;
  };
  auto make_tile = [&](const AsyncOperand& op, const char* smem, const std::vector<int>& axes,
                       int64_t len, int64_t extent, const char* origin) {
    Tile tl{&op, smem, &axes, len, extent, 0, 0, origin};
    if (op.k_fast) {
      tl.ld = mma ? (bk % 16 == 8 ? bk : bk + 8) : (bk / 4) % 2 == 1 ? bk : bk + 4;
      tl.floats = len * tl.ld;
    } else {
      tl.ld = mma ? len + (4 - len % 16 + 16) % 16 : len;
      tl.floats = bk * tl.ld;
    }
    return tl;
  };
  const Tile tiles[2] = {make_tile(*a_op, "As", c.rows, bm, c.m, "m0"),
                         make_tile(*b_op, "Bs", c.cols, bn, c.n, "n0")};
  const int64_t stage_floats = tiles[0].floats + tiles[1].floats;
  const int64_t k_tiles = (c.k + bk - 1) / bk;
  // Split-K (7th parameter): the grid's z runs over batches x splits, each split reducing a
  // run of k-tiles into a temporary; a second kernel sums the splits and applies the epilogue.
  const int64_t split_tiles = (k_tiles + (p.size() > 6 ? p[6] : 1) - 1) / (p.size() > 6 ? p[6] : 1);
  const int64_t splits = (k_tiles + split_tiles - 1) / split_tiles;
  const std::string temp = name + "_splits";

  const std::string kname = name + "_k0";
  std::string k;
  absl::StrAppend(&k, "// ", ts.tensorize, " ", absl::StrJoin(p, ","), ": M=", c.m, " N=", c.n,
                  " K=", c.k, " batch=", c.batches, "; A ", a_op->k_fast ? "k-fast" : "m-fast",
                  " x", a_op->vec, ", B ", b_op->k_fast ? "k-fast" : "n-fast", " x", b_op->vec,
                  "\n");
  absl::StrAppend(&k, "extern \"C\" __global__ void __launch_bounds__(", threads, ") ", kname, "(");
  for (size_t i = 0; i < w.args.size(); ++i) {
    absl::StrAppend(&k, i ? ", " : "", "float* __restrict__ p", i);
  }
  if (splits > 1) absl::StrAppend(&k, ", float* __restrict__ ptmp");
  absl::StrAppend(&k, ") {\n");
  absl::StrAppend(&k, "  LATHE_DYNAMIC_SHARED(lathe_smem, ", stages * stage_floats, ");\n",
                  "  float* const As = lathe_smem;\n", "  float* const Bs = lathe_smem + ",
                  stages * tiles[0].floats, ";\n");
  absl::StrAppend(&k, "  const int tid = threadIdx.x;\n");
  absl::StrAppend(&k, "  const int m0 = blockIdx.y * ", bm, ", n0 = blockIdx.x * ", bn, ";\n");
  if (splits > 1) {
    absl::StrAppend(&k, "  const int z = blockIdx.z / ", splits, ", kz = blockIdx.z % ", splits,
                    ";\n", "  const int kt0 = kz * ", split_tiles, ", kt_n = lathe_min<int>(",
                    split_tiles, ", ", k_tiles, " - kt0);\n");
  } else {
    absl::StrAppend(&k, "  const int z = blockIdx.z, kt0 = 0, kt_n = ", k_tiles, ";\n");
  }
  if (!c.batch.empty()) {
    absl::StrAppend(&k, Decompose("  ", "z", names_of(c.batch), extents_of(c.batch)));
  }

  // Copies one operand's k-tile at `kbase` into stage `stage`.
  auto load = [&](const Tile& tl, const std::string& stage, const std::string& kbase) {
    const AsyncOperand& op = *tl.op;
    const int64_t per_row = op.k_fast ? bk / op.vec : tl.len / op.vec;  // copies per smem row
    const int64_t copies = bk * tl.len / op.vec;
    const int64_t per_thread = (copies + threads - 1) / threads;
    std::string s = "    {\n";
    // The tile's outer reduce axes, once (the innermost: its base, plus each copy's offset).
    if (tile_shares_outer) {
      std::vector<std::string> names = r_names;
      names.back() += "_base";
      absl::StrAppend(&s, "      const int kt_base = ", kbase, ";\n",
                      Decompose("      ", "kt_base", names, r_ext));
    }
    absl::StrAppend(&s, "#pragma unroll\n    for (int q = 0; q < ", per_thread, "; ++q) {\n",
                    "      const int e = tid + q * ", threads, ";\n");
    if (copies % threads != 0) absl::StrAppend(&s, "      if (e < ", copies, ") {\n");
    // (row, k) of the copy's first element in the tile, and its place in shared memory; where
    // the threads cover whole smem rows, the position along the row is the same for every q
    // (so is what is computed from it: the compiler keeps it out of the loops).
    const std::string along = threads % per_row == 0 ? absl::StrCat("(tid % ", per_row, ")")
                                                     : absl::StrCat("(e % ", per_row, ")");
    const std::string across =
        threads % per_row == 0 ? absl::StrCat("(tid / ", per_row, " + q * ", threads / per_row, ")")
                               : absl::StrCat("(e / ", per_row, ")");
    if (op.k_fast) {
      absl::StrAppend(&s, "      const int mm = ", across, ", kk = ", along, " * ", op.vec,
                      ";\n      float* const dst = ", tl.smem, " + (", stage, ") * ", tl.floats,
                      " + mm * ", tl.ld, " + kk;\n");
    } else {
      absl::StrAppend(&s, "      const int kk = ", across, ", mm = ", along, " * ", op.vec,
                      ";\n      float* const dst = ", tl.smem, " + (", stage, ") * ", tl.floats,
                      " + kk * ", tl.ld, " + mm;\n");
    }
    absl::StrAppend(&s, "      const int x = ", tl.origin, " + mm;\n",
                    "      const float* src = ", pr.ParamName(op.read->name), ";\n",
                    "      int bytes = 0;\n");
    std::vector<std::string> guards;
    if (tl.extent % tl.len != 0) guards.push_back(absl::StrCat("x < ", tl.extent));
    std::string inner = Decompose("        ", "x", names_of(*tl.axes), extents_of(*tl.axes));
    if (tile_shares_outer) {
      absl::StrAppend(&inner, "        const int ", r_names.back(), " = ", r_names.back(),
                      "_base + kk;\n");
    } else {
      absl::StrAppend(&s, "      const int kx = ", kbase, " + kk;\n");
      if (c.k % bk != 0) guards.push_back(absl::StrCat("kx < ", c.k));
      absl::StrAppend(&inner, Decompose("        ", "kx", r_names, r_ext));
    }
    std::string copy =
        absl::StrCat("src = &", pr.ParamName(op.read->name), "[", pr.FlatIndex(op.read), "];\n",
                     "        bytes = ", 4 * op.vec, ";\n");
    if (op.cond) {
      absl::StrAppend(&inner, "        if (", op.negate ? "!" : "", "(", pr.E(op.cond), ")) {\n  ",
                      "        ", copy, "        }\n");
    } else {
      absl::StrAppend(&inner, "        ", copy);
    }
    absl::StrAppend(&s, "      if (", guards.empty() ? "true" : absl::StrJoin(guards, " && "),
                    ") {\n", inner, "      }\n", "      ",
                    op.vec == 4 ? "lathe_cp_async16" : "lathe_cp_async4", "(dst, src, bytes);\n");
    if (copies % threads != 0) absl::StrAppend(&s, "      }\n");
    absl::StrAppend(&s, "    }\n    }\n");
    return s;
  };

  // The accumulators and the compute of one k-tile from stage `rd`.
  int64_t mt, nt;
  bool pair_b = false;  // mma: B's n8 tiles interleaved in pairs (see below)
  std::string compute;
  std::string rows_of_i, cols_of_j;  // the output row / column of accumulator (i, j) (fma)
  if (mma) {
    const int64_t wtm = bm / p[3], wtn = bn / p[4];
    mt = wtm / 16;
    nt = wtn / 8;
    absl::StrAppend(&k,
                    "  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;\n",
                    "  const int wm = warp / ", p[4], ", wn = warp % ", p[4], ";\n");
    // Fragments. Within a k-step the MMA's k order is free as long as A and B agree: logical k
    // t and t+4 (a0/a2 and a1/a3 of lane 4g+t; b0/b1) sit at physical k 2t and 2t+1, so a
    // [rows][k] tile gives each lane its pair in one 8-byte load. A [k][columns] B pairs n8
    // tiles instead: tiles 2j' and 2j'+1 interleave their columns (column n of tile j at
    // 16*(j/2) + 2n + j%2), one 8-byte load per pair of tiles and k; the epilogue maps back.
    // TF32 rounding: +0x1000 to the bits (half an ulp of the 10-bit mantissa), the tensor core
    // reading only the top 19 bits: round to nearest, ties away (cvt.rna's result for finite
    // values) in one integer add instead of cvt.rna's four instructions on sm_90.
    const Tile& ta = tiles[0];
    const Tile& tb = tiles[1];
    pair_b = !b_op->k_fast && nt % 2 == 0;
    if (a_op->k_fast) {
      absl::StrAppend(&k, "  const float* const a_frag = As + (wm * ", wtm, " + g) * ", ta.ld,
                      " + 2 * t;\n");
    } else {
      absl::StrAppend(&k, "  const float* const a_frag = As + 2 * t * ", ta.ld, " + wm * ", wtm,
                      " + g;\n");
    }
    if (b_op->k_fast) {
      absl::StrAppend(&k, "  const float* const b_frag = Bs + (wn * ", wtn, " + g) * ", tb.ld,
                      " + 2 * t;\n");
    } else {
      absl::StrAppend(&k, "  const float* const b_frag = Bs + 2 * t * ", tb.ld, " + wn * ", wtn,
                      pair_b ? " + 2 * g;\n" : " + g;\n");
    }
    absl::StrAppend(&k, "  float acc[", mt, "][", nt, "][4];\n");
    auto bits = [](const std::string& x) {
      return absl::StrCat("__float_as_uint(", x, ") + 0x1000u");
    };
    auto frags = [&](const std::string& buf, const std::string& ks) {
      std::string s;
      const std::string af = absl::StrCat("af[", buf, "][i]"), bf = absl::StrCat("bf[", buf, "]");
      absl::StrAppend(&s, "#pragma unroll\n      for (int i = 0; i < ", mt, "; ++i) {\n");
      if (a_op->k_fast) {
        absl::StrAppend(&s, "        const float2 lo = *(const float2*)&a_st[i * ", 16 * ta.ld,
                        " + ", ks, "];\n", "        const float2 hi = *(const float2*)&a_st[i * ",
                        16 * ta.ld, " + ", 8 * ta.ld, " + ", ks, "];\n");
        absl::StrAppend(&s, "        ", af, "[0] = ", bits("lo.x"), "; ", af,
                        "[2] = ", bits("lo.y"), ";\n", "        ", af, "[1] = ", bits("hi.x"), "; ",
                        af, "[3] = ", bits("hi.y"), ";\n");
      } else {
        for (int q = 0; q < 4; ++q) {
          absl::StrAppend(&s, "        ", af, "[", q, "] = ",
                          bits(absl::StrCat("a_st[(", ks, q >= 2 ? " + 1" : "", ") * ", ta.ld,
                                            " + i * 16", q % 2 ? " + 8" : "", "]")),
                          ";\n");
        }
      }
      absl::StrAppend(&s, "      }\n");
      if (b_op->k_fast) {
        absl::StrAppend(&s, "#pragma unroll\n      for (int j = 0; j < ", nt, "; ++j) {\n",
                        "        const float2 v = *(const float2*)&b_st[j * ", 8 * tb.ld, " + ", ks,
                        "];\n", "        ", bf, "[j][0] = ", bits("v.x"), "; ", bf,
                        "[j][1] = ", bits("v.y"), ";\n      }\n");
      } else if (pair_b) {
        absl::StrAppend(&s, "#pragma unroll\n      for (int j = 0; j < ", nt / 2, "; ++j) {\n",
                        "        const float2 v0 = *(const float2*)&b_st[(", ks, ") * ", tb.ld,
                        " + j * 16];\n", "        const float2 v1 = *(const float2*)&b_st[(", ks,
                        " + 1) * ", tb.ld, " + j * 16];\n");
        absl::StrAppend(&s, "        ", bf, "[2 * j][0] = ", bits("v0.x"), "; ", bf,
                        "[2 * j + 1][0] = ", bits("v0.y"), ";\n", "        ", bf,
                        "[2 * j][1] = ", bits("v1.x"), "; ", bf, "[2 * j + 1][1] = ", bits("v1.y"),
                        ";\n      }\n");
      } else {
        absl::StrAppend(&s, "#pragma unroll\n      for (int j = 0; j < ", nt, "; ++j) {\n");
        for (int q = 0; q < 2; ++q) {
          absl::StrAppend(
              &s, "        ", bf, "[j][", q,
              "] = ", bits(absl::StrCat("b_st[(", ks, q ? " + 1" : "", ") * ", tb.ld, " + j * 8]")),
              ";\n");
        }
        absl::StrAppend(&s, "      }\n");
      }
      return s;
    };
    const int64_t steps = bk / 8;
    absl::StrAppend(&compute, "    const float* const a_st = a_frag + rd * ", ta.floats, ";\n",
                    "    const float* const b_st = b_frag + rd * ", tb.floats, ";\n",
                    "    unsigned af[2][", mt, "][4], bf[2][", nt, "][2];\n", "    {\n",
                    frags("0", "0"), "    }\n");
    absl::StrAppend(&compute, "#pragma unroll\n    for (int ks = 0; ks < ", steps, "; ++ks) {\n",
                    "      if (ks + 1 < ", steps, ") {\n", frags("(ks + 1) & 1", "(ks + 1) * 8"),
                    "      }\n", "#pragma unroll\n      for (int i = 0; i < ", mt, "; ++i)\n",
                    "#pragma unroll\n        for (int j = 0; j < ", nt, "; ++j)\n",
                    "          lathe_mma_m16n8k8_tf32(acc[i][j], af[ks & 1][i], bf[ks & 1][j]);\n",
                    "    }\n");
  } else {
    const int64_t tm = p[3], tn = p[4], tx_n = bn / tn, ty_n = bm / tm;
    mt = tm;
    nt = tn;
    absl::StrAppend(&k, "  const int tx = tid % ", tx_n, ", ty = tid / ", tx_n, ";\n");
    absl::StrAppend(&k, "  float acc[", mt, "][", nt, "];\n");
    // Rows of a [rows][k] tile are strided (ty + TY*i: float4s along k), those of a [k][rows]
    // tile come in float4 groups (the group c at c*4*TY + ty*4).
    auto place = [&](bool k_fast, const std::string& idx, const char* id, int64_t n_threads) {
      return k_fast ? absl::StrCat(id, " + ", n_threads, " * ", idx)
                    : absl::StrCat("(", idx, ") / 4 * ", 4 * n_threads, " + ", id, " * 4 + (", idx,
                                   ") % 4");
    };
    rows_of_i = place(a_op->k_fast, "i", "ty", ty_n);
    cols_of_j = place(b_op->k_fast, "j", "tx", tx_n);
    auto fetch = [&](const Tile& tl, bool k_fast, const char* arr, int64_t n, const char* id,
                     int64_t n_threads) {
      std::string s;
      const std::string st = absl::StrCat("(", tl.smem, " + rd * ", tl.floats, ")");
      if (k_fast) {
        absl::StrAppend(&s, "#pragma unroll\n      for (int i = 0; i < ", n, "; ++i) {\n",
                        "        const float4 v = *(const float4*)&", st, "[(", id, " + ",
                        n_threads, " * i) * ", tl.ld, " + kq];\n", "        ", arr,
                        "[0][i] = v.x; ", arr, "[1][i] = v.y; ", arr, "[2][i] = v.z; ", arr,
                        "[3][i] = v.w;\n      }\n");
      } else {
        absl::StrAppend(&s, "#pragma unroll\n      for (int kk = 0; kk < 4; ++kk)\n",
                        "#pragma unroll\n        for (int cg = 0; cg < ", n / 4, "; ++cg) {\n",
                        "          const float4 v = *(const float4*)&", st, "[(kq + kk) * ", tl.ld,
                        " + cg * ", 4 * n_threads, " + ", id, " * 4];\n", "          ", arr,
                        "[kk][cg * 4] = v.x; ", arr, "[kk][cg * 4 + 1] = v.y; ", arr,
                        "[kk][cg * 4 + 2] = v.z; ", arr, "[kk][cg * 4 + 3] = v.w;\n        }\n");
      }
      return s;
    };
    absl::StrAppend(&compute, "#pragma unroll\n    for (int kq = 0; kq < ", bk, "; kq += 4) {\n",
                    "      float a[4][", mt, "], b[4][", nt, "];\n",
                    fetch(tiles[0], a_op->k_fast, "a", mt, "ty", ty_n),
                    fetch(tiles[1], b_op->k_fast, "b", nt, "tx", tx_n),
                    "#pragma unroll\n      for (int kk = 0; kk < 4; ++kk)\n",
                    "#pragma unroll\n        for (int i = 0; i < ", mt, "; ++i)\n",
                    "#pragma unroll\n          for (int j = 0; j < ", nt, "; ++j)\n",
                    "            acc[i][j] = fmaf(a[kk][i], b[kk][j], acc[i][j]);\n    }\n");
  }
  absl::StrAppend(&k, "#pragma unroll\n  for (int i = 0; i < ", mt, "; ++i)\n",
                  "#pragma unroll\n    for (int j = 0; j < ", nt, "; ++j)\n");
  absl::StrAppend(&k,
                  mma ? "#pragma unroll\n      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;\n"
                      : "      acc[i][j] = 0.0f;\n");

  // The pipeline: STAGES - 1 k-tiles in flight (a group each, empty past the end), then per
  // k-tile: wait for its group, one barrier (its data visible to all; every thread done with
  // the stage the next copy refills), issue the copy STAGES - 1 tiles ahead, compute.
  absl::StrAppend(&k, "#pragma unroll\n  for (int s = 0; s < ", stages - 1, "; ++s) {\n",
                  "    if (s < kt_n) {\n", load(tiles[0], "s", "(kt0 + s) * " + std::to_string(bk)),
                  load(tiles[1], "s", "(kt0 + s) * " + std::to_string(bk)), "    }\n",
                  "    lathe_cp_async_commit();\n  }\n");
  absl::StrAppend(&k, "  int rd = 0, wr = ", stages - 1, ";\n",
                  "  for (int kt = 0; kt < kt_n; ++kt) {\n", "    lathe_cp_async_wait(", stages - 2,
                  ");\n", "    __syncthreads();\n", "    if (kt + ", stages - 1, " < kt_n) {\n",
                  "      const int k_next = (kt0 + kt + ", stages - 1, ") * ", bk, ";\n",
                  load(tiles[0], "wr", "k_next"), load(tiles[1], "wr", "k_next"), "    }\n",
                  "    lathe_cp_async_commit();\n", compute, "    rd = rd + 1 == ", stages,
                  " ? 0 : rd + 1;\n", "    wr = wr + 1 == ", stages, " ? 0 : wr + 1;\n", "  }\n");

  // Epilogue: each output element, guarded, its value through the output stage.
  const ir::Tensor& out = w.output();
  const std::string index = FlatIndexOf(sp_names, t->shape);
  const std::string value = EpilogueValue(pr, c, epi, "v");
  absl::StrAppend(&k, "#pragma unroll\n  for (int i = 0; i < ", mt, "; ++i)\n",
                  "#pragma unroll\n    for (int j = 0; j < ", nt, "; ++j)\n");
  if (mma) {
    absl::StrAppend(&k, "#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n",
                    "        const int x = m0 + wm * ", bm / p[3],
                    " + i * 16 + g + (q >= 2 ? 8 : 0);\n", "        const int y = n0 + wn * ",
                    bn / p[4],
                    pair_b ? " + j / 2 * 16 + 2 * (2 * t + (q & 1)) + j % 2;\n"
                           : " + j * 8 + 2 * t + (q & 1);\n",
                    "        const float v = acc[i][j][q];\n");
  } else {
    absl::StrAppend(&k, "      {\n        const int x = m0 + ", rows_of_i, ";\n",
                    "        const int y = n0 + ", cols_of_j, ";\n",
                    "        const float v = acc[i][j];\n");
  }
  std::vector<std::string> out_guards;
  if (c.m % bm != 0) out_guards.push_back(absl::StrCat("x < ", c.m));
  if (c.n % bn != 0) out_guards.push_back(absl::StrCat("y < ", c.n));
  const std::string guard = out_guards.empty() ? "true" : absl::StrJoin(out_guards, " && ");
  const std::string store =
      absl::StrCat(Decompose("          ", "x", names_of(c.rows), extents_of(c.rows)),
                   Decompose("          ", "y", names_of(c.cols), extents_of(c.cols)), "          ",
                   pr.ParamName(out->name), "[", index, "] = ", value, ";\n");
  const int64_t outputs = c.batches * c.m * c.n;
  if (splits > 1) {
    absl::StrAppend(&k, "        if (", guard, ") ptmp[(kz * ", c.batches, " + z) * ", c.m * c.n,
                    " + x * ", c.n, " + y] = v;\n      }\n}\n");
    // The sum of the splits, one output per thread.
    absl::StrAppend(&k, "extern \"C\" __global__ void __launch_bounds__(256) ", name, "_k1(");
    for (size_t i = 0; i < w.args.size(); ++i) {
      absl::StrAppend(&k, i ? ", " : "", "float* __restrict__ p", i);
    }
    absl::StrAppend(&k, ", const float* __restrict__ ptmp) {\n",
                    "  const int o = blockIdx.x * 256 + threadIdx.x;\n", "  if (o >= ", outputs,
                    ") return;\n", "  float v = 0.0f;\n", "#pragma unroll\n",
                    "  for (int s = 0; s < ", splits, "; ++s) v += ptmp[s * ", outputs, " + o];\n",
                    "  const int y = o % ", c.n, ", x = o / ", c.n, " % ", c.m, ", z = o / ",
                    c.m * c.n, ";\n  {\n");
    if (!c.batch.empty()) {
      absl::StrAppend(&k, Decompose("    ", "z", names_of(c.batch), extents_of(c.batch)));
    }
    absl::StrAppend(&k, store, "  }\n}\n");
  } else {
    absl::StrAppend(&k, "        if (", guard, ") {\n", store, "        }\n      }\n}\n");
  }
  if (!pr.status().ok()) return pr.status();

  CudaSource src;
  src.prelude = CudaPrelude();
  src.kernels =
      absl::StrCat(mma ? internal::kTensorCoreHelpers : "", internal::kAsyncCopyHelpers, k);
  src.source = src.prelude + src.kernels;
  src.plan.name = name;
  for (const ir::Tensor& a : w.args) src.plan.args.push_back(a->name);
  KernelLaunch l;
  l.name = kname;
  l.grid[0] = (c.n + bn - 1) / bn;
  l.grid[1] = (c.m + bm - 1) / bm;
  l.grid[2] = c.batches * splits;
  l.block[0] = threads;
  l.dynamic_shared_bytes = 4 * stages * stage_floats;
  l.args = src.plan.args;
  if (splits > 1) {
    src.plan.temporaries.push_back({temp, 4 * splits * outputs});
    l.args.push_back(temp);
    KernelLaunch sum;
    sum.name = name + "_k1";
    sum.grid[0] = (outputs + 255) / 256;
    sum.block[0] = 256;
    sum.args = l.args;
    src.plan.kernels.push_back(std::move(l));
    src.plan.kernels.push_back(std::move(sum));
  } else {
    src.plan.kernels.push_back(std::move(l));
  }
  return src;
}

}  // namespace internal

}  // namespace lathe::codegen::cuda
