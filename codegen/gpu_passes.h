// \file
// The passes of Lower()'s GPU recipe after structural lowering: what the CUDA backend compiles
// and the cost model featurizes is the program they leave, so the emitter (codegen/cuda/
// cuda_codegen.cc) prints it as it is.
//   1. VectorizeGpuAccesses: a vectorized loop of 4 lanes whose store or load is proven to start
//      at a multiple of 4 elements becomes one 4-lane access (a float4 on the GPU);
//   2. DoubleBufferSharedTiles: a serial loop that fills shared tiles and then reads them gets
//      its tiles doubled, the first fill peeled before it and the next iteration's fill
//      issued ahead of this iteration's reads.
#ifndef LATHE_CODEGEN_GPU_PASSES_H_
#define LATHE_CODEGEN_GPU_PASSES_H_

#include <string>

#include "ir/expr.h"
#include "ir/stmt.h"

namespace lathe::codegen {

// Rewrites each loop marked kVectorized, of extent 4 from 0, whose body is one scalar store
// into 4-lane accesses where alignment is provable (buffers are 16-byte aligned: arguments by
// the allocator, shared and local arrays by their declarations):
//   - the store's index steps by one with the loop and starts at a multiple of 4: the store
//     becomes Store(buffer, Ramp(base, 1, 4), value), its value a 4-lane Load(Ramp(...)) when
//     the value is a load of that form, else the value over the loop's lanes;
//   - otherwise, when the value is such a load: the store scatters it, its index the 4 lanes'
//     indices (a 4-lane vector that is not a unit Ramp).
// Any other loop is left as it is (the backend unrolls it).
ir::Stmt VectorizeGpuAccesses(const ir::Stmt& body);

// Doubles the shared tiles of each serial loop (constant extent >= 2 from 0, under no
// thread-dependent guard) whose body is allocations of shared tiles over statements of which a
// prefix fills the tiles (and stores nothing else) and the rest reads them. The tiles, half a
// multiple of 4 elements apart so that 4-lane accesses stay aligned in both halves, are
// allocated around the loop; iteration k reads half k % 2. The result, for a loop over k:
//   Allocate(tiles x 2) {
//     for k in [0, 1): fills into half 0
//     for k in [0, extent): { if (k + 1 < extent) for k_next in [k + 1, 1): fills into half
//                             k_next % 2;  reads of half k % 2 }
//   }
// The backend places barriers: after the first fill and at the end of each iteration. Left as it
// is where the doubled tiles exceed 32 KiB (two blocks per SM everywhere) or the kernel's shared
// memory would exceed 48 KiB, or where a fill depends on a thread index (the backend rejects
// such fills). Run after VectorizeGpuAccesses.
ir::Stmt DoubleBufferSharedTiles(const ir::Stmt& body);

// The index of a GPU loop tag: 0-2 for blockIdx.x/y/z, 3-5 for threadIdx.x/y/z, -1 for
// anything else (vthread).
int GpuTagIndex(const std::string& tag);

// Lane `lane` of a vector expression made by VectorizeGpuAccesses (a Ramp, a Broadcast, or an
// operation over them), as a scalar expression; a scalar expression is its own lane.
ir::Expr VectorLane(const ir::Expr& e, int lane);

}  // namespace lathe::codegen

#endif  // LATHE_CODEGEN_GPU_PASSES_H_
