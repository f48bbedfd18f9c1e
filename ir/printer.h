// \file
// A text form of expressions, lowered programs and schedules, for tests (golden text),
// `lathe build --emit` debugging and error reports.
#ifndef LATHE_IR_PRINTER_H_
#define LATHE_IR_PRINTER_H_

#include <string>

#include "ir/expr.h"
#include "ir/stmt.h"
#include "ir/tensor.h"

namespace lathe::ir {

std::string ToText(const Expr& e);
// Indented, two spaces per level.
std::string ToText(const Stmt& s, int indent = 0);
std::string ToText(const LoweredFunc& f);
// "C[i, j] = sum(A[i, k]*B[k, j], k in 0..K)"-style definition of a compute tensor.
std::string ToText(const Tensor& t);

}  // namespace lathe::ir

#endif  // LATHE_IR_PRINTER_H_
