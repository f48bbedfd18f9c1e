#include "codegen/model_library.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "codegen/link.h"
#include "codegen/llvm_codegen.h"
#include "codegen/llvm_target.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"

namespace lathe::codegen {

extern const unsigned char kLatheModelRuntimeObject[];
extern const size_t kLatheModelRuntimeObjectSize;

namespace {

llvm::GlobalVariable* Global(llvm::Module& m, llvm::Constant* init, const std::string& name,
                             uint64_t align) {
  auto* g = new llvm::GlobalVariable(m, init->getType(), /*isConstant=*/true,
                                     llvm::GlobalValue::InternalLinkage, init, name);
  g->setAlignment(llvm::Align(align));
  return g;
}

llvm::Constant* I8Ptr(llvm::LLVMContext& ctx, llvm::Constant* c) {
  return llvm::ConstantExpr::getBitCast(c, llvm::Type::getInt8PtrTy(ctx));
}

}  // namespace

absl::Status WriteModelLibrary(const std::vector<ir::LoweredFunc>& funcs, const ModelTables& t,
                               const std::string& path) {
  absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> tm = CreateHostTargetMachine(false);
  if (!tm.ok()) return tm.status();
  llvm::LLVMContext ctx;
  absl::StatusOr<std::unique_ptr<llvm::Module>> mod = GenerateModule(funcs, ctx, **tm);
  if (!mod.ok()) return mod.status();
  llvm::Module& m = **mod;
  llvm::Type* i8p = llvm::Type::getInt8PtrTy(ctx);
  llvm::Type* i32 = llvm::Type::getInt32Ty(ctx);
  llvm::Type* i64 = llvm::Type::getInt64Ty(ctx);

  std::vector<llvm::Constant*> fns;
  for (const std::string& name : t.kernels) {
    llvm::Function* f = m.getFunction(name);
    if (f == nullptr) return absl::InternalError("model library: no kernel function " + name);
    fns.push_back(I8Ptr(ctx, f));
  }
  llvm::Constant* kernels =
      Global(m, llvm::ConstantArray::get(llvm::ArrayType::get(i8p, fns.size()), fns),
             "lathe_model_kernels", 8);
  std::vector<uint32_t> step_words;
  for (const lathe_model_step& s : t.steps) {
    step_words.insert(step_words.end(),
                      {static_cast<uint32_t>(s.kernel), static_cast<uint32_t>(s.first_arg),
                       static_cast<uint32_t>(s.num_args), 0u});
  }
  std::vector<uint64_t> arg_words;
  int32_t max_args = 0;
  for (const lathe_model_step& s : t.steps) max_args = std::max(max_args, s.num_args);
  for (const lathe_model_arg& a : t.args) {
    arg_words.push_back(static_cast<uint32_t>(a.kind) |
                        (static_cast<uint64_t>(static_cast<uint32_t>(a.index)) << 32));
    arg_words.push_back(static_cast<uint64_t>(a.offset));
  }
  if (step_words.empty()) step_words.push_back(0);
  if (arg_words.empty()) arg_words.push_back(0);
  llvm::Constant* steps =
      Global(m, llvm::ConstantDataArray::get(ctx, step_words), "lathe_model_steps", 16);
  llvm::Constant* args =
      Global(m, llvm::ConstantDataArray::get(ctx, arg_words), "lathe_model_args", 16);
  std::string weight_bytes = t.weights.empty() ? std::string(64, '\0') : t.weights;
  llvm::Constant* weights =
      Global(m,
             llvm::ConstantDataArray::getRaw(weight_bytes, weight_bytes.size(),
                                             llvm::Type::getInt8Ty(ctx)),
             "lathe_model_weights", 64);
  llvm::Constant* io =
      Global(m, llvm::ConstantDataArray::getString(ctx, t.io_json, true), "lathe_model_io_json", 1);
  llvm::StructType* desc_ty =
      llvm::StructType::get(ctx, {i8p, i8p, i8p, i8p, i8p, i64, i32, i32, i32, i32});
  llvm::Constant* desc = llvm::ConstantStruct::get(
      desc_ty,
      {I8Ptr(ctx, kernels), I8Ptr(ctx, steps), I8Ptr(ctx, args), I8Ptr(ctx, weights),
       I8Ptr(ctx, io), llvm::ConstantInt::get(i64, t.arena_bytes),
       llvm::ConstantInt::get(i32, t.steps.size()), llvm::ConstantInt::get(i32, t.num_inputs),
       llvm::ConstantInt::get(i32, t.num_outputs), llvm::ConstantInt::get(i32, max_args)});
  auto* plan = new llvm::GlobalVariable(m, desc_ty, true, llvm::GlobalValue::ExternalLinkage, desc,
                                        "lathe_model_plan");
  plan->setVisibility(llvm::GlobalValue::HiddenVisibility);
  plan->setAlignment(llvm::Align(8));

  if (absl::Status s = OptimizeModule(m, **tm); !s.ok()) return s;
  absl::StatusOr<std::string> obj = EmitObject(m, **tm);
  if (!obj.ok()) return obj.status();
  std::string runtime(reinterpret_cast<const char*>(kLatheModelRuntimeObject),
                      kLatheModelRuntimeObjectSize);
  return LinkSharedLibrary({*obj, runtime}, path);
}

}  // namespace lathe::codegen
