// \file
// Copies that transpose a tile, found in a lowered function for code generation to emit as
// row loads and an in-register transposition instead of one gather per vector.
//
// The stored value may compute with the gathered vector (an output tile's epilogue:
// relu(acc + bias)); it is then computed on the transposed vector.
//
// A packing copy that puts a source's strided axis innermost (a plain NCHW convolution's
// weights W[k][c][r][s] copied to [c][r][s][k] per channel tile, so that a vector of output
// channels is one load) lowers, once its channel loop is vectorized and the source's
// contiguous axes inside it unrolled, to
//
//   unrolled r, s:  dst[ramp(B(r,s), 1, L)] = src[ramp(A(r,s), S, L)]
//
// each store a gather of L elements S apart, where A(r,s) runs over consecutive elements:
// A(r,s) = A0 + t for t = 0..m-1. The m gathers read an L x m block of the source whose rows
// are contiguous: L loads of m elements (row j at A0 + j*S) and a transposition give the m
// vectors (column t of the block is the vector that store t writes). On AVX-512 gathers run
// about one element a cycle: a plain 3x3 512->512 conv at 7x7 spent ~30 % of its time so
// (its 9.4 MB of weights transposed on every call).
#ifndef LATHE_CODEGEN_TRANSPOSE_COPY_H_
#define LATHE_CODEGEN_TRANSPOSE_COPY_H_

#include <optional>
#include <vector>

#include "ir/stmt.h"

namespace lathe::codegen {

// The most stores (columns) one nest may have: each is emitted unrolled.
inline constexpr int kMaxTransposedColumns = 64;

struct TransposedCopy {
  ir::Buffer src, dst;
  int lanes = 0;        // L: the vector width of each store, and the rows of the block
  ir::Expr row_stride;  // S: source elements between consecutive lanes (rows)
  ir::Expr tile;        // a variable: the gathered vector, in each column's `value`
  // Blocks of at most L consecutive columns: the source index of row 0's first element and,
  // per column, its offset from it (< L), the destination index of its vector's first lane and
  // the value stored (in terms of `tile`).
  struct Column {
    int offset = 0;
    ir::Expr dst_base, value;
    // Where the gather is masked by a condition the same for every lane (an inlined padding's
    // bounds): that condition for this column (a scalar bool; null when the gather is not
    // masked). Row loads read this column's lane only where it holds, and yield 0 elsewhere.
    ir::Expr guard;
  };
  struct Block {
    ir::Expr src_base;
    std::vector<Column> columns;
  };
  std::vector<Block> blocks;
};

// `s` (an unrolled loop, possibly around further unrolled loops, whose innermost body is one
// store) as a transposed copy, or nothing: the store writes a contiguous vector of L lanes (a
// power of two from 4 up) without a mask; its value holds one load of another buffer whose
// index is a ramp of a stride that no loop of the nest changes and is not 1, unmasked or
// masked by one condition for all its lanes (a padding inlined into a copy: select(c, X[...]
// if c, 0)), no other gather and no load of the stored buffer; over the nest's iterations that
// load's first lanes rise (so that the stores keep their order), at least L / 4 of them in
// each block of L consecutive elements they fall in.
std::optional<TransposedCopy> MatchTransposedCopy(const ir::Stmt& s);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_TRANSPOSE_COPY_H_
