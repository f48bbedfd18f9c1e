// \file
// Statements of the lowered tensor program: loop nests over flat buffers. A LoweredFunc is
// what backends (LLVM CPU, CUDA) consume.
#ifndef LATHE_IR_STMT_H_
#define LATHE_IR_STMT_H_

#include <memory>
#include <string>
#include <vector>

#include "ir/expr.h"

namespace lathe::ir {

enum class StmtKind : uint8_t { kFor, kStore, kIfThenElse, kSeq, kAllocate };

// How a loop runs. kThreadBinding loops carry a `thread_tag` (blockIdx.x, threadIdx.y,
// vthread, ...) and are realised by the GPU backend.
enum class ForKind : uint8_t { kSerial, kParallel, kVectorized, kUnrolled, kThreadBinding };
const char* ForKindName(ForKind kind);

struct StmtNode;
using Stmt = std::shared_ptr<const StmtNode>;

// One statement node. Fields by kind:
//   For: var, min, extent, for_kind, thread_tag, body.
//   Store: buffer, index (flat), value, predicate (optional mask, vector stores only).
//   IfThenElse: cond, body, else_body (may be null).
//   Seq: seq.
//   Allocate: buffer (its scope decides where it lives), body (the buffer's lifetime).
struct StmtNode {
  StmtKind kind;
  Expr var, min, extent;
  ForKind for_kind = ForKind::kSerial;
  std::string thread_tag;
  Buffer buffer;
  Expr index, value, predicate, cond;
  Stmt body, else_body;
  std::vector<Stmt> seq;
};

Stmt For(Expr var, Expr min, Expr extent, ForKind kind, Stmt body, std::string thread_tag = "");
Stmt Store(Buffer buffer, Expr index, Expr value, Expr predicate = nullptr);
Stmt IfThenElse(Expr cond, Stmt then_case, Stmt else_case = nullptr);
// Flattens nested sequences and drops null statements; a single statement is returned as is.
Stmt Seq(std::vector<Stmt> stmts);
Stmt Allocate(Buffer buffer, Stmt body);

// A lowered kernel: `args` are the workload's tensors in CONTRACT.md order.
struct LoweredFunc {
  std::string name;
  std::vector<Buffer> args;
  Stmt body;
};

}  // namespace lathe::ir

#endif  // LATHE_IR_STMT_H_
