#include "codegen/cuda/contraction_text.h"

#include "absl/strings/str_cat.h"
#include "codegen/cuda/cuda_codegen.h"

namespace lathe::codegen::cuda::internal {

using ir::Expr;
using ir::ExprKind;

std::string Printer::E(const Expr& e) {
  if (auto text = CudaOperatorText(e, [&](const Expr& x) { return E(x); })) return *text;
  auto bin = [&](const char* op) {
    return absl::StrCat("(", E(e->operands[0]), " ", op, " ", E(e->operands[1]), ")");
  };
  switch (e->kind) {
    case ExprKind::kIntImm:
      if (e->type.is_bool()) return e->int_value ? "true" : "false";
      return e->int_value < 0 ? absl::StrCat("(", e->int_value, ")") : absl::StrCat(e->int_value);
    case ExprKind::kFloatImm:
      return CudaFloatLiteral(e->float_value);
    case ExprKind::kVar: {
      auto it = vars_.find(e.get());
      if (it == vars_.end()) return Fail("variable '" + e->name + "' has no value here");
      return it->second;
    }
    case ExprKind::kDiv:
      if (e->type.is_float()) return bin("/");
      return absl::StrCat("lathe_floordiv<int>(", E(e->operands[0]), ", ", E(e->operands[1]), ")");
    case ExprKind::kMod:
      return absl::StrCat("lathe_floormod<int>(", E(e->operands[0]), ", ", E(e->operands[1]), ")");
    case ExprKind::kMin:  // integers (CudaOperatorText prints float ones)
    case ExprKind::kMax:
      return absl::StrCat(e->kind == ExprKind::kMin ? "lathe_min<int>(" : "lathe_max<int>(",
                          E(e->operands[0]), ", ", E(e->operands[1]), ")");
    case ExprKind::kCast:
      if (e->type.is_float()) return absl::StrCat("((float)(", E(e->operands[0]), "))");
      if (e->type.is_bool()) return absl::StrCat("((bool)(", E(e->operands[0]), "))");
      return absl::StrCat("((int)(", E(e->operands[0]), "))");
    case ExprKind::kCall:  // one CudaOperatorText has no CUDA function for
      return Fail("no CUDA function for call '" + e->name + "'");
    case ExprKind::kTensorRead: {
      if (e->name == replace_) return with_;
      return absl::StrCat(ParamName(e->name), "[", FlatIndex(e), "]");
    }
    default:
      return Fail(absl::StrCat("no CUDA for a ", ir::ExprKindName(e->kind), " node"));
  }
}

std::string Printer::FlatIndex(const Expr& e) {
  const ir::Tensor* t = w_.Find(e->name);
  if (!t || !(*t)->is_placeholder()) return Fail("reads '" + e->name + "', no argument");
  std::string index;
  for (size_t i = 0; i < e->operands.size(); ++i) {
    std::string x = E(e->operands[i]);
    index = i == 0 ? x : absl::StrCat("(", index, ") * ", (*t)->shape[i], " + ", x);
  }
  return index.empty() ? "0" : index;
}

std::string Printer::ParamName(const std::string& tensor) const {
  for (size_t i = 0; i < w_.args.size(); ++i) {
    if (w_.args[i]->name == tensor) return absl::StrCat("p", i);
  }
  return "p_missing";
}

std::string Printer::Fail(const std::string& why) {
  if (status_.ok()) status_ = absl::InvalidArgumentError("contraction codegen: " + why);
  return "0";
}

std::string Decompose(const std::string& indent, const std::string& flat,
                      const std::vector<std::string>& names, const std::vector<int64_t>& extents) {
  std::string out;
  int64_t stride = 1;
  for (size_t i = names.size(); i-- > 0;) {
    std::string v = stride == 1 ? flat : absl::StrCat("(", flat, " / ", stride, ")");
    if (i > 0) v = absl::StrCat(v, " % ", extents[i]);
    absl::StrAppend(&out, indent, "const int ", names[i], " = ", v, ";\n");
    stride *= extents[i];
  }
  return out;
}

extern const char kTensorCoreHelpers[] = R"(#ifndef LATHE_TC_HELPERS
#define LATHE_TC_HELPERS
#ifndef LATHE_GPU_EMULATOR
// cvt.rna.tf32.f32: fp32 to tf32 (10 mantissa bits, nearest, ties away from zero).
__device__ __forceinline__ unsigned lathe_cvt_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
// d += a * b on the warp's m16n8k8 fragments (PTX ISA layouts), fp32 accumulation.
__device__ __forceinline__ void lathe_mma_m16n8k8_tf32(float* d, const unsigned* a,
                                                       const unsigned* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif
#endif
)";

extern const char kAsyncCopyHelpers[] = R"(#ifndef LATHE_ASYNC_HELPERS
#define LATHE_ASYNC_HELPERS
#ifndef LATHE_GPU_EMULATOR
#define LATHE_DYNAMIC_SHARED(name, floats) extern __shared__ __align__(16) float name[]
// cp.async.cg (16 bytes, L2 only) / .ca (4 bytes): global to shared without registers; the
// bytes past src_bytes are zero-filled (an operand's padding or a tile's tail).
__device__ __forceinline__ void lathe_cp_async16(float* dst, const float* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void lathe_cp_async4(float* dst, const float* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(dst)),
               "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void lathe_cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
#define lathe_cp_async_wait(n) asm volatile("cp.async.wait_group %0;\n" ::"n"(n) : "memory")
#endif
#endif
)";

}  // namespace lathe::codegen::cuda::internal
