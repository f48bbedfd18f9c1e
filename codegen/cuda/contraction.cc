#include "codegen/cuda/contraction.h"

#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/contraction_text.h"
#include "codegen/cuda/cuda_codegen.h"
#include "ir/functor.h"

namespace lathe::codegen::cuda {

namespace {

using internal::ContractionNames;
using internal::Decompose;
using internal::EpilogueValue;
using internal::FlatIndexOf;
using internal::NameContraction;
using internal::Pick;
using internal::Printer;
using ir::Expr;
using ir::ExprKind;

absl::Status NotContraction(const std::string& stage, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("stage '", stage, "' is not a contraction: ", why));
}

// The spatial axes (positions) of `t` whose variables `e` uses.
std::set<int> AxesUsed(const ir::Tensor& t, const Expr& e) {
  std::set<int> out;
  for (size_t a = 0; a < t->axes.size(); ++a) {
    if (ir::UsesVar(e, t->axes[a]->var.get())) out.insert(static_cast<int>(a));
  }
  return out;
}

// True when `e` reads `tensor` only at exactly the variables of `axes`, in order.
bool ReadsAtOwnIndices(const Expr& e, const std::string& tensor, const ir::Tensor& t) {
  bool ok = true;
  ir::Visit(e, [&](const Expr& x) {
    if (x->kind != ExprKind::kTensorRead || x->name != tensor) return;
    if (x->operands.size() != t->axes.size()) {
      ok = false;
      return;
    }
    for (size_t i = 0; i < x->operands.size(); ++i) {
      if (x->operands[i].get() != t->axes[i]->var.get()) ok = false;
    }
  });
  return ok;
}

}  // namespace

bool IsContractionTemplate(const std::string& name) {
  return name == kContractionFma || name == kContractionMmaTf32 || name == kContractionFmaAsync ||
         name == kContractionMmaTf32Async;
}

bool IsTf32ContractionTemplate(const std::string& name) {
  return name == kContractionMmaTf32 || name == kContractionMmaTf32Async;
}

absl::Status CheckContractionParams(const std::string& name, const std::vector<int64_t>& p) {
  if (!IsContractionTemplate(name)) {
    return absl::InvalidArgumentError("unknown kernel template '" + name + "'");
  }
  const bool async = name == kContractionFmaAsync || name == kContractionMmaTf32Async;
  if (async && (p.size() < 6 || p.size() > 7 || p[5] < 2 || p[5] > 8 ||
                (p.size() == 7 && (p[6] < 1 || p[6] > 64)))) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": expects {BM, BN, BK, x, y, STAGES[, SPLITS]} with STAGES in [2, 8] and "
                     "SPLITS in [1, 64], got {",
                     absl::StrJoin(p, ","), "}"));
  }
  if (!async && p.size() != 5 && p.size() != 6) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": expects 5 or 6 parameters {BM, BN, BK, x, y[, pipelined]}, got ", p.size()));
  }
  if (!async && p.size() == 6 && p[5] != 0 && p[5] != 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": pipelined is 0 or 1, got ", p[5]));
  }
  for (int64_t v : std::vector<int64_t>(p.begin(), p.begin() + std::min<size_t>(5, p.size()))) {
    if (v < 1 || v > 256) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": parameter ", v, " out of [1, 256]"));
    }
  }
  const int64_t bm = p[0], bn = p[1], bk = p[2];
  if (name == kContractionFma || name == kContractionFmaAsync) {
    if (name == kContractionFmaAsync && (bm % 4 || bn % 4 || bk % 4 || p[3] % 4 || p[4] % 4)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": BM, BN, BK, TM and TN must be multiples of 4 (got ",
                       absl::StrJoin(p, ","), ")"));
    }
    if (bm % p[3] || bn % p[4]) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the thread tile ", p[3], "x", p[4],
                                                     " does not divide ", bm, "x", bn));
    }
    const int64_t threads = bm / p[3] * (bn / p[4]);
    if (threads < 32 || threads > 1024) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", threads, " threads per block"));
    }
    return absl::OkStatus();
  }
  if (bk % 8 || bm % (16 * p[3]) || bn % (8 * p[4]) || p[3] * p[4] > 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": BK must be a multiple of 8, BM/WM of 16 and BN/WN of 8, at most 32 "
                     "warps (got ",
                     absl::StrJoin(p, ","), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ContractionShape> MatchContraction(const ir::Schedule& sch,
                                                  const std::string& stage) {
  const ir::Stage* s = sch.FindStage(stage);
  if (!s || s->attach == ir::AttachKind::kInline) return NotContraction(stage, "no such stage");
  const ir::Tensor& t = s->tensor;
  if (!t->is_reduction()) return NotContraction(stage, "not a reduction");
  const Expr& body = t->body;
  if (body->kind != ExprKind::kReduce || body->reduce_op != ir::ReduceOp::kSum ||
      body->operands.size() != 1) {
    return NotContraction(stage, "not an unconditional sum");
  }
  const Expr& prod = body->operands[0];
  if (prod->kind != ExprKind::kMul) return NotContraction(stage, "not a sum of products");
  ContractionShape c;
  c.stage = stage;
  // Other stages: at most one elementwise output reading the reduction at its own indices.
  for (const ir::Stage& o : sch.stages()) {
    if (o.name == stage || o.attach == ir::AttachKind::kInline) continue;
    if (!c.epilogue.empty() || s->is_output || !o.is_output || o.tensor->is_reduction() ||
        o.tensor->shape != t->shape || !ReadsAtOwnIndices(o.tensor->body, stage, o.tensor)) {
      return NotContraction(stage, "stage '" + o.name + "' is not an elementwise epilogue of it");
    }
    c.epilogue = o.name;
  }
  if (!s->is_output && c.epilogue.empty()) return NotContraction(stage, "its result is not stored");
  std::set<int> ua = AxesUsed(t, prod->operands[0]), ub = AxesUsed(t, prod->operands[1]);
  const int last = static_cast<int>(t->axes.size()) - 1;
  // The columns hold the output's innermost axis (coalesced stores).
  bool swap = ua.count(last) && !ub.count(last);
  if (swap) std::swap(ua, ub);
  c.a = prod->operands[swap ? 1 : 0];
  c.b = prod->operands[swap ? 0 : 1];
  for (int a = 0; a <= last; ++a) {
    const int64_t e = t->shape[a];
    if (ua.count(a) && !ub.count(a)) {
      c.rows.push_back(a);
      c.m *= e;
    } else if (ub.count(a) && !ua.count(a)) {
      c.cols.push_back(a);
      c.n *= e;
    } else {
      c.batch.push_back(a);
      c.batches *= e;
    }
  }
  for (const ir::IterVar& r : body->reduce_axes) c.k *= r->extent;
  if (c.rows.empty() || c.cols.empty()) {
    return NotContraction(stage, "no output axis is read by one operand alone (rows or columns)");
  }
  if (c.m * c.n * c.batches > std::numeric_limits<int32_t>::max() / 2 ||
      c.k > std::numeric_limits<int32_t>::max() / 2) {
    return NotContraction(stage, "too large for 32-bit indices");
  }
  return c;
}

namespace internal {

ContractionNames NameContraction(const ir::Schedule& sch, const ir::Tensor& t,
                                 const ContractionShape& c, const std::vector<size_t>& korder) {
  ContractionNames n;
  for (size_t a = 0; a < t->axes.size(); ++a) {
    n.spatial.push_back(absl::StrCat("s", a));
    n.vars[t->axes[a]->var.get()] = n.spatial.back();
  }
  const std::vector<ir::IterVar>& reduce = t->body->reduce_axes;
  for (size_t r : korder) {
    n.reduce.push_back(absl::StrCat("r", r));
    n.reduce_extents.push_back(reduce[r]->extent);
    n.vars[reduce[r]->var.get()] = n.reduce.back();
  }
  const ir::Stage* epi = c.epilogue.empty() ? nullptr : sch.FindStage(c.epilogue);
  if (epi) {
    for (size_t a = 0; a < epi->tensor->axes.size(); ++a) {
      n.vars[epi->tensor->axes[a]->var.get()] = n.spatial[a];
    }
  }
  return n;
}

std::string FlatIndexOf(const std::vector<std::string>& names, const std::vector<int64_t>& shape) {
  std::string index;
  for (size_t a = 0; a < names.size(); ++a) {
    index = a == 0 ? names[a] : absl::StrCat("(", index, ") * ", shape[a], " + ", names[a]);
  }
  return index;
}

std::string EpilogueValue(Printer& pr, const ContractionShape& c, const ir::Stage* epi,
                          const std::string& acc) {
  if (epi == nullptr) return acc;
  pr.Replace(c.stage, acc);
  return pr.E(epi->tensor->body);
}

}  // namespace internal

absl::StatusOr<CudaSource> GenerateContraction(const ir::Schedule& sch, const std::string& name) {
  const ir::Stage* ts = nullptr;
  for (const ir::Stage& s : sch.stages()) {
    if (!s.tensorize.empty()) {
      if (ts) return absl::InvalidArgumentError("more than one tensorized stage");
      ts = &s;
    }
  }
  if (!ts) return absl::InvalidArgumentError("no tensorized stage");
  if (auto st = CheckContractionParams(ts->tensorize, ts->tensorize_params); !st.ok()) return st;
  auto shape = MatchContraction(sch, ts->name);
  if (!shape.ok()) return shape.status();
  const ContractionShape& c = *shape;
  const ir::Workload& w = sch.workload();
  if (ts->tensorize == kContractionFmaAsync || ts->tensorize == kContractionMmaTf32Async) {
    return internal::GenerateAsyncContraction(sch, *ts, c, name);
  }
  const ir::Tensor& t = ts->tensor;
  const bool mma = ts->tensorize == kContractionMmaTf32;
  const std::vector<int64_t>& p = ts->tensorize_params;
  const int64_t bm = p[0], bn = p[1], bk = p[2];
  const int64_t threads = mma ? 32 * p[3] * p[4] : bm / p[3] * (bn / p[4]);
  const bool pipelined = p.size() == 6 && p[5] == 1;
  // k-major tiles; rows padded so that a warp's fragment reads (lanes 4g+t reading [k+t][r+g])
  // fall in distinct banks: a row length of 8 mod 32 (fma: 4, float4-friendly).
  auto padded = [&](int64_t x) { return mma ? x + (8 - x % 32 + 32) % 32 : x + 4; };
  const int64_t lda = padded(bm), ldb = padded(bn);

  std::vector<size_t> korder(t->body->reduce_axes.size());
  for (size_t r = 0; r < korder.size(); ++r) korder[r] = r;
  ContractionNames names = NameContraction(sch, t, c, korder);
  std::map<const ir::ExprNode*, std::string>& vars = names.vars;
  const std::vector<std::string>& sp_names = names.spatial;
  const std::vector<std::string>& r_names = names.reduce;
  const std::vector<int64_t>& r_ext = names.reduce_extents;
  const ir::Stage* epi = c.epilogue.empty() ? nullptr : sch.FindStage(c.epilogue);
  Printer pr(w, vars);
  auto names_of = [&](const std::vector<int>& axes) { return Pick(sp_names, axes); };
  auto extents_of = [&](const std::vector<int>& axes) { return Pick(t->shape, axes); };

  const std::string kname = name + "_k0";
  std::string k;
  absl::StrAppend(&k, "// ", ts->tensorize, " ", absl::StrJoin(p, ","), ": M=", c.m, " N=", c.n,
                  " K=", c.k, " batch=", c.batches, "\n");
  absl::StrAppend(&k, "extern \"C\" __global__ void __launch_bounds__(", threads, ") ", kname, "(");
  for (size_t i = 0; i < w.args.size(); ++i) {
    absl::StrAppend(&k, i ? ", " : "", "float* __restrict__ p", i);
  }
  absl::StrAppend(&k, ") {\n");
  absl::StrAppend(&k, "  __shared__ __align__(16) float As[", bk, "][", lda, "];\n");
  absl::StrAppend(&k, "  __shared__ __align__(16) float Bs[", bk, "][", ldb, "];\n");
  absl::StrAppend(&k, "  const int tid = threadIdx.x;\n");
  absl::StrAppend(&k, "  const int m0 = blockIdx.y * ", bm, ", n0 = blockIdx.x * ", bn, ";\n");
  if (!c.batch.empty()) {
    absl::StrAppend(&k, "  const int z = blockIdx.z;\n",
                    Decompose("  ", "z", names_of(c.batch), extents_of(c.batch)));
  }
  if (mma) {
    absl::StrAppend(&k,
                    "  const int warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;\n",
                    "  const int wm = warp / ", p[4], ", wn = warp % ", p[4], ";\n");
  } else {
    absl::StrAppend(&k, "  const int tx = tid % ", bn / p[4], ", ty = tid / ", bn / p[4], ";\n");
  }
  const int64_t wtm = mma ? bm / p[3] : 0, wtn = mma ? bn / p[4] : 0;
  const int64_t mt = mma ? wtm / 16 : p[3], nt = mma ? wtn / 8 : p[4];
  if (mma) {
    absl::StrAppend(&k, "  float acc[", mt, "][", nt, "][4];\n");
  } else {
    absl::StrAppend(&k, "  float acc[", mt, "][", nt, "];\n");
  }
  absl::StrAppend(&k, "#pragma unroll\n  for (int i = 0; i < ", mt, "; ++i)\n",
                  "#pragma unroll\n    for (int j = 0; j < ", nt, "; ++j)\n");
  absl::StrAppend(&k,
                  mma ? "#pragma unroll\n      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;\n"
                      : "      acc[i][j] = 0.0f;\n");
  // Cooperative, guarded staging of one operand's k-tile through registers. Pipelined (the 6th
  // parameter): the next tile is loaded from global memory while the block computes on this one,
  // then stored to shared memory after the barrier (more registers). k-fastest when the operand's
  // last index is a reduce variable (its memory runs along k), else along the rows/columns.
  struct Operand {
    const char* tile;  // the shared array
    const char* regs;  // the per-thread prefetch registers
    Expr expr;
    std::vector<int> axes;
    int64_t len, extent;
    const char* origin;
    int64_t per_thread;
    bool k_fast;
  };
  auto operand = [&](const char* tile, const char* regs, const Expr& e,
                     const std::vector<int>& axes, int64_t len, int64_t extent,
                     const char* origin) {
    Operand o{tile, regs, e, axes, len, extent, origin, (bk * len + threads - 1) / threads, false};
    ir::Visit(e, [&](const Expr& x) {
      if (x->kind != ExprKind::kTensorRead || x->operands.empty()) return;
      for (const ir::IterVar& r : t->body->reduce_axes) {
        if (ir::UsesVar(x->operands.back(), r->var.get())) o.k_fast = true;
      }
    });
    return o;
  };
  const Operand ops[2] = {operand("As", "pa", c.a, c.rows, bm, c.m, "m0"),
                          operand("Bs", "pb", c.b, c.cols, bn, c.n, "n0")};
  auto element = [&](const Operand& o, const std::string& indent) {
    std::string s = absl::StrCat(indent, "const int e = tid + q * ", threads, ";\n");
    if (o.k_fast) {
      absl::StrAppend(&s, indent, "const int kk = e % ", bk, ", mm = e / ", bk, ";\n");
    } else {
      absl::StrAppend(&s, indent, "const int kk = e / ", o.len, ", mm = e % ", o.len, ";\n");
    }
    return s;
  };
  // Loads the k-tile at `kbase` into the registers.
  auto load = [&](const Operand& o, const std::string& kbase) {
    std::string s;
    absl::StrAppend(&s, "#pragma unroll\n    for (int q = 0; q < ", o.per_thread, "; ++q) {\n",
                    element(o, "      "), "      const int x = ", o.origin, " + mm, kx = ", kbase,
                    " + kk;\n", "      float v = 0.0f;\n", "      if (e < ", bk * o.len, " && x < ",
                    o.extent, " && kx < ", c.k, ") {\n",
                    Decompose("        ", "x", names_of(o.axes), extents_of(o.axes)),
                    Decompose("        ", "kx", r_names, r_ext), "        v = ", pr.E(o.expr),
                    ";\n      }\n      ", o.regs, "[q] = v;\n    }\n");
    return s;
  };
  auto store = [&](const Operand& o) {
    std::string s;
    absl::StrAppend(&s, "#pragma unroll\n    for (int q = 0; q < ", o.per_thread, "; ++q) {\n",
                    element(o, "      "), "      if (e < ", bk * o.len, ") ", o.tile,
                    "[kk][mm] = ", mma ? "__uint_as_float(lathe_cvt_tf32(" : "((", o.regs,
                    "[q]));\n    }\n");
    return s;
  };
  absl::StrAppend(&k, "  float pa[", ops[0].per_thread, "], pb[", ops[1].per_thread, "];\n");
  if (pipelined) {
    absl::StrAppend(&k, "  {\n", load(ops[0], "0"), load(ops[1], "0"), "  }\n");
    absl::StrAppend(&k, "  for (int k0 = 0; k0 < ", c.k, "; k0 += ", bk, ") {\n", store(ops[0]),
                    store(ops[1]), "    __syncthreads();\n", "    if (k0 + ", bk, " < ", c.k,
                    ") {\n", load(ops[0], absl::StrCat("k0 + ", bk)),
                    load(ops[1], absl::StrCat("k0 + ", bk)), "    }\n");
  } else {
    absl::StrAppend(&k, "  for (int k0 = 0; k0 < ", c.k, "; k0 += ", bk, ") {\n",
                    load(ops[0], "k0"), load(ops[1], "k0"), store(ops[0]), store(ops[1]),
                    "    __syncthreads();\n");
  }
  if (mma) {
    absl::StrAppend(&k, "#pragma unroll\n    for (int ks = 0; ks < ", bk, "; ks += 8) {\n",
                    "      unsigned af[", mt, "][4], bf[", nt, "][2];\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int i = 0; i < ", mt, "; ++i) {\n",
                    "        const int r = wm * ", wtm, " + i * 16 + g;\n",
                    "        af[i][0] = __float_as_uint(As[ks + t][r]);\n",
                    "        af[i][1] = __float_as_uint(As[ks + t][r + 8]);\n",
                    "        af[i][2] = __float_as_uint(As[ks + t + 4][r]);\n",
                    "        af[i][3] = __float_as_uint(As[ks + t + 4][r + 8]);\n      }\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int j = 0; j < ", nt, "; ++j) {\n",
                    "        const int cc = wn * ", wtn, " + j * 8 + g;\n",
                    "        bf[j][0] = __float_as_uint(Bs[ks + t][cc]);\n",
                    "        bf[j][1] = __float_as_uint(Bs[ks + t + 4][cc]);\n      }\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int i = 0; i < ", mt, "; ++i)\n",
                    "#pragma unroll\n        for (int j = 0; j < ", nt, "; ++j)\n",
                    "          lathe_mma_m16n8k8_tf32(acc[i][j], af[i], bf[j]);\n    }\n");
  } else {
    absl::StrAppend(&k, "#pragma unroll\n    for (int kk = 0; kk < ", bk, "; ++kk) {\n",
                    "      float a[", mt, "], b[", nt, "];\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int i = 0; i < ", mt,
                    "; ++i) a[i] = As[kk][ty + i * ", bm / mt, "];\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int j = 0; j < ", nt,
                    "; ++j) b[j] = Bs[kk][tx + j * ", bn / nt, "];\n");
    absl::StrAppend(&k, "#pragma unroll\n      for (int i = 0; i < ", mt, "; ++i)\n",
                    "#pragma unroll\n        for (int j = 0; j < ", nt,
                    "; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);\n    }\n");
  }
  absl::StrAppend(&k, "    __syncthreads();\n  }\n");
  // Epilogue: each output element, guarded, its value through the output stage.
  const ir::Tensor& out = w.output();
  const std::string index = FlatIndexOf(sp_names, t->shape);
  const std::string value = EpilogueValue(pr, c, epi, "v");
  absl::StrAppend(&k, "#pragma unroll\n  for (int i = 0; i < ", mt, "; ++i)\n",
                  "#pragma unroll\n    for (int j = 0; j < ", nt, "; ++j)\n");
  if (mma) {
    absl::StrAppend(&k, "#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n",
                    "        const int x = m0 + wm * ", wtm, " + i * 16 + g + (q >= 2 ? 8 : 0);\n",
                    "        const int y = n0 + wn * ", wtn, " + j * 8 + 2 * t + (q & 1);\n",
                    "        const float v = acc[i][j][q];\n");
  } else {
    absl::StrAppend(&k, "      {\n        const int x = m0 + ty + i * ", bm / mt, ";\n",
                    "        const int y = n0 + tx + j * ", bn / nt, ";\n",
                    "        const float v = acc[i][j];\n");
  }
  absl::StrAppend(&k, "        if (x < ", c.m, " && y < ", c.n, ") {\n",
                  Decompose("          ", "x", names_of(c.rows), extents_of(c.rows)),
                  Decompose("          ", "y", names_of(c.cols), extents_of(c.cols)), "          ",
                  pr.ParamName(out->name), "[", index, "] = ", value, ";\n",
                  "        }\n      }\n}\n");
  if (!pr.status().ok()) return pr.status();

  CudaSource src;
  src.prelude = CudaPrelude();
  src.kernels = std::string(internal::kTensorCoreHelpers) + k;
  src.source = src.prelude + src.kernels;
  src.plan.name = name;
  for (const ir::Tensor& a : w.args) src.plan.args.push_back(a->name);
  KernelLaunch l;
  l.name = kname;
  l.grid[0] = (c.n + bn - 1) / bn;
  l.grid[1] = (c.m + bm - 1) / bm;
  l.grid[2] = c.batches;
  l.block[0] = threads;
  l.shared_bytes = 4 * bk * (lda + ldb);
  l.args = src.plan.args;
  src.plan.kernels.push_back(std::move(l));
  return src;
}

}  // namespace lathe::codegen::cuda
