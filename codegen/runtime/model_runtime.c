/* \file
 * See model_runtime.h. Built twice: into lathe's binaries (lathe_model_exec and the arena
 * pool), and, with LATHE_MODEL_ENTRY, into the object embedded in model libraries, where it
 * also defines the exported entry points over the generated `lathe_model_plan` tables.
 */
#include "codegen/runtime/model_runtime.h"

#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

enum { kMaxArgs = 64 };

int lathe_model_exec(const struct lathe_model_desc* d, void* arena, const float* const* inputs,
                     float* const* outputs) {
  void* argv[kMaxArgs];
  for (int32_t s = 0; s < d->num_steps; ++s) {
    const struct lathe_model_step* st = &d->steps[s];
    if (st->num_args > kMaxArgs) return s + 1;
    for (int32_t a = 0; a < st->num_args; ++a) {
      const struct lathe_model_arg* arg = &d->args[st->first_arg + a];
      char* base;
      switch (arg->kind) {
        case LATHE_ARG_ARENA:
          base = (char*)arena;
          break;
        case LATHE_ARG_WEIGHTS:
          base = (char*)d->weights;
          break;
        case LATHE_ARG_INPUT:
          base = (char*)inputs[arg->index];
          break;
        default:
          base = (char*)outputs[arg->index];
          break;
      }
      argv[a] = base + arg->offset;
    }
    if (d->kernels[st->kernel](argv, st->num_args) != 0) return s + 1;
  }
  return 0;
}

static void pool_lock(struct lathe_arena_pool* p) {
  _Atomic int32_t* l = (_Atomic int32_t*)&p->lock;
  int32_t expected = 0;
  while (!atomic_compare_exchange_weak(l, &expected, 1)) {
    expected = 0;
    sched_yield();
  }
}

static void pool_unlock(struct lathe_arena_pool* p) { atomic_store((_Atomic int32_t*)&p->lock, 0); }

void* lathe_arena_acquire(struct lathe_arena_pool* p, int64_t bytes) {
  void* a = NULL;
  pool_lock(p);
  if (p->count > 0) a = p->free[--p->count];
  pool_unlock(p);
  if (a == NULL) a = lathe_alloc(bytes > 0 ? bytes : 64);
  return a;
}

void lathe_arena_release(struct lathe_arena_pool* p, void* arena) {
  if (arena == NULL) return;
  pool_lock(p);
  if (p->count < (int32_t)(sizeof(p->free) / sizeof(p->free[0]))) {
    p->free[p->count++] = arena;
    arena = NULL;
  }
  pool_unlock(p);
  lathe_free(arena); /* more concurrent callers than the pool keeps */
}

#ifdef LATHE_MODEL_ENTRY
/* Defined by the generated tables of the library. */
extern const struct lathe_model_desc lathe_model_plan;

static struct lathe_arena_pool g_arenas;

/* Runs the model: inputs and outputs in the order lathe_model_io() lists them, each a dense
 * row-major float32 buffer of its shape. 0 on success; non-zero when a kernel failed or no
 * memory was left for the activations. Safe to call from several threads at once. */
__attribute__((visibility("default"))) int lathe_model_run(const float* const* inputs,
                                                           float* const* outputs) {
  void* arena = lathe_arena_acquire(&g_arenas, lathe_model_plan.arena_bytes);
  if (arena == NULL) return -1;
  int rc = lathe_model_exec(&lathe_model_plan, arena, inputs, outputs);
  lathe_arena_release(&g_arenas, arena);
  return rc;
}

/* The names and shapes of the inputs and outputs, as JSON:
 * {"inputs":[{"name":"x","shape":[1,3,224,224]}],"outputs":[...]}. */
__attribute__((visibility("default"))) const char* lathe_model_io(void) {
  return lathe_model_plan.io_json;
}
#endif
