/* \file
 * The lathe runtime: the few C functions that every generated CPU kernel may call. It is
 * linked into the lathe binaries (the JIT resolves these symbols from there) and embedded as
 * an object file into every shared library that `lathe build --emit so` writes, where its
 * symbols are hidden. It depends only on libc (pthreads are part of glibc 2.34+).
 */
#ifndef LATHE_CODEGEN_RUNTIME_RUNTIME_H_
#define LATHE_CODEGEN_RUNTIME_RUNTIME_H_

#include <stdint.h>

/* The embedded copy (built with LATHE_RUNTIME_HIDDEN) keeps its symbols out of the dynamic
 * symbol table of the kernels' shared library, so two libraries never share a pool by
 * accident and the host process's copy is never interposed. */
#if defined(LATHE_RUNTIME_HIDDEN)
#define LATHE_RUNTIME_API __attribute__((visibility("hidden")))
#else
#define LATHE_RUNTIME_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(task, closure) once for every task in [0, num_tasks) on a persistent thread pool
 * (created on first use; its size is $LATHE_NUM_THREADS when that is a valid positive number,
 * else the number of CPUs in the affinity mask). The calling thread takes part. Tasks are
 * handed out one at a time from an atomic counter. Once a task fails, no new tasks start.
 * Returns the first non-zero value returned by fn, or 0. num_tasks <= 0 returns 0 at once.
 * Thread-safe: concurrent callers queue for the pool; a call made from inside a task runs its
 * tasks serially on the calling thread. */
LATHE_RUNTIME_API int lathe_parallel_for(int64_t num_tasks, int (*fn)(int64_t task, void* closure),
                                         void* closure);

/* Number of threads (the caller included) that lathe_parallel_for uses; starts the pool. */
LATHE_RUNTIME_API int lathe_num_threads(void);

/* 64-byte aligned memory of at least `bytes` bytes (a zero-byte request returns a unique
 * pointer); NULL when bytes < 0 or memory is exhausted. Free it with lathe_free. */
LATHE_RUNTIME_API void* lathe_alloc(int64_t bytes);
/* Frees memory from lathe_alloc; NULL is ignored. */
LATHE_RUNTIME_API void lathe_free(void* ptr);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LATHE_CODEGEN_RUNTIME_RUNTIME_H_ */
