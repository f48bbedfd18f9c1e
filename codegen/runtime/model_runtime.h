/* \file
 * The runtime of a compiled model: executes its static plan (kernel calls with arguments at
 * fixed places: the activation arena, the weights, the caller's inputs and outputs) and
 * hands out arenas so that concurrent calls never share one and steady-state calls never
 * allocate. Used in-process by `lathe run` (model/executor) and embedded, with the exported
 * entry points, into every library that `lathe build --model` writes. C11, libc only.
 */
#ifndef LATHE_CODEGEN_RUNTIME_MODEL_RUNTIME_H_
#define LATHE_CODEGEN_RUNTIME_MODEL_RUNTIME_H_

#include <stdint.h>

#include "codegen/runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*lathe_kernel_fn)(void* const* args, int num_args);

/* Argument kinds. */
enum { LATHE_ARG_ARENA = 0, LATHE_ARG_WEIGHTS = 1, LATHE_ARG_INPUT = 2, LATHE_ARG_OUTPUT = 3 };

struct lathe_model_step {
  int32_t kernel;    /* index into kernels */
  int32_t first_arg; /* index into args */
  int32_t num_args;
  int32_t reserved;
};

struct lathe_model_arg {
  int32_t kind;   /* LATHE_ARG_* */
  int32_t index;  /* input or output index */
  int64_t offset; /* bytes */
};

/* The plan. Field order and types are part of the ABI between the generated tables of a
 * model library and this runtime. */
struct lathe_model_desc {
  const lathe_kernel_fn* kernels;
  const struct lathe_model_step* steps;
  const struct lathe_model_arg* args;
  const void* weights;
  const char* io_json;
  int64_t arena_bytes;
  int32_t num_steps;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t max_args;
};

/* Runs every step in order with `arena` (at least arena_bytes, 64-byte aligned). Returns 0,
 * or the 1-based index of the first step whose kernel failed. Thread-safe for distinct
 * arenas. */
LATHE_RUNTIME_API int lathe_model_exec(const struct lathe_model_desc* desc, void* arena,
                                       const float* const* inputs, float* const* outputs);

/* A lock-protected stack of arenas of one size: acquire pops one (allocating only when all
 * are in use), release pushes it back. Never freed while the process lives (the library is
 * nodelete). Zero-initialise the struct before first use. */
struct lathe_arena_pool {
  int32_t lock; /* 0 free, 1 held (spin) */
  int32_t count;
  void* free[64];
};
LATHE_RUNTIME_API void* lathe_arena_acquire(struct lathe_arena_pool* pool, int64_t bytes);
LATHE_RUNTIME_API void lathe_arena_release(struct lathe_arena_pool* pool, void* arena);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LATHE_CODEGEN_RUNTIME_MODEL_RUNTIME_H_ */
