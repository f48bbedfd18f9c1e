// \file
// The public face of the LLVM CPU backend: lowered functions in, callable kernels, LLVM IR
// text, object files and self-contained shared libraries out. No LLVM type appears here.
#ifndef LATHE_CODEGEN_CPU_KERNEL_H_
#define LATHE_CODEGEN_CPU_KERNEL_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ir/stmt.h"

namespace lathe::codegen {

// The C ABI of every built kernel (CONTRACT.md): args are the workload's tensors in order;
// returns 0, or non-zero without touching memory when num_args is wrong.
using KernelFn = int (*)(void* const* args, int num_args);

// Where a kernel's buffers start when it is timed, relative to a 64-byte line: on one, where a
// compiled model places its arena values and weights (and oneDNN, ONNX Runtime and PyTorch
// their tensors), so that each step runs as its record was timed. The C ABI asks only for each
// element's alignment, but an AVX-512 kernel on buffers 16 bytes past a line (malloc's large
// blocks) splits every vector access across two lines: conv 1x1/256/14x14 nchw16c 154 us
// against 114 us aligned (Ice Lake, 2 threads, session 19; whole PP-OCR models read 11-15 %
// faster aligned in one alternated run, within noise in the next). Until session 19 records were
// timed 16 bytes past a line, after det's conv 3x3/96->24 at 160x160 had timed 19-21 ms 64-byte
// aligned against 10-10.7 ms off the line (AVX2 Zen 3, session 8); the tuner now avoids such a
// schedule where it runs.
inline constexpr size_t kTimedBufferOffset = 0;

// A JIT-compiled kernel; owns its code. Run() may be called from several threads at once.
class CpuKernel {
 public:
  virtual ~CpuKernel() = default;
  virtual KernelFn fn() const = 0;
  int Run(void* const* args, int num_args) const { return fn()(args, num_args); }
};

// Compiles `func` for the host CPU with ORC LLJIT.
absl::StatusOr<std::unique_ptr<CpuKernel>> JitCompile(const ir::LoweredFunc& func);

// Textual LLVM IR of the optimized module holding `funcs`.
absl::StatusOr<std::string> EmitLlvmIr(const std::vector<ir::LoweredFunc>& funcs);
// An ELF object file holding `funcs` (the runtime is not included).
absl::Status WriteObjectFile(const std::vector<ir::LoweredFunc>& funcs, const std::string& path);
// A self-contained shared library exporting one symbol per function, with the runtime linked
// in; it needs nothing beyond libc, libm and libpthread.
absl::Status WriteSharedLibrary(const std::vector<ir::LoweredFunc>& funcs, const std::string& path);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_CPU_KERNEL_H_
