/* \file
 * The lathe runtime: a persistent fork-join thread pool for lathe_parallel_for and aligned
 * allocation. C11, libc only (pthreads and the futex system call); no thread-local storage,
 * so the embedded copy needs nothing from the dynamic loader (no __tls_get_addr).
 *
 * Protocol. One job at a time owns the pool (callers queue on `submit`). The caller fills in
 * the job, opens it by storing a new generation into `state` (generation in the high 32 bits,
 * a CLOSED bit, and the count of workers inside the job), then bumps the futex word `gen` and
 * wakes sleeping workers. A worker joins a job by incrementing the count with a CAS that fails
 * once the job is closed or replaced, claims tasks from the atomic counter `next` until it
 * runs dry, then leaves (decrements the count). The caller claims tasks too; when they run
 * dry it closes the job and waits only for the workers inside it. So a worker that is asleep
 * or descheduled never delays a call it did not join, and no worker can read a job while the
 * next caller overwrites it. Idle workers spin for a short while (cheap back-to-back calls)
 * and then sleep on the futex.
 */
#define _GNU_SOURCE
#include "codegen/runtime/runtime.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum {
  kMaxThreads = 1024,
  /* How long an idle worker spins before it sleeps, and how long the caller spins waiting
   * for the workers before it starts yielding the CPU. */
  kWorkerSpinNs = 200 * 1000,
  kCallerSpinNs = 50 * 1000,
};

static const uint64_t kClosed = (uint64_t)1 << 31;
static const uint64_t kCountMask = ((uint64_t)1 << 31) - 1;

typedef int (*lathe_task_fn)(int64_t task, void* closure);

static struct {
  pthread_once_t once;
  int num_workers; /* threads besides the caller */
  pid_t pid;       /* the process that created the workers */
  pthread_t workers[kMaxThreads];
  pthread_mutex_t submit;
  _Atomic unsigned long owner; /* pthread_t of the caller that holds `submit`, or 0 */

  /* The current job; written only by the owner while no worker is inside it. */
  lathe_task_fn fn;
  void* closure;
  int64_t num_tasks;
  _Atomic int64_t next;
  _Atomic int error;

  _Atomic uint64_t state; /* generation << 32 | kClosed | workers inside the job */
  _Atomic uint32_t gen;   /* futex word: the low 32 bits of the newest generation */
  _Atomic int sleepers;   /* workers blocked (or about to block) on `gen` */
} g_pool = {.once = PTHREAD_ONCE_INIT, .submit = PTHREAD_MUTEX_INITIALIZER};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static inline int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(_Atomic uint32_t* addr, uint32_t expected) {
  syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t* addr) {
  syscall(SYS_futex, (uint32_t*)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs tasks of the current job until none is left or one has failed. */
static void run_tasks(void) {
  const lathe_task_fn fn = g_pool.fn;
  void* const closure = g_pool.closure;
  const int64_t num_tasks = g_pool.num_tasks;
  for (;;) {
    if (atomic_load_explicit(&g_pool.error, memory_order_relaxed) != 0) return;
    const int64_t task = atomic_fetch_add_explicit(&g_pool.next, 1, memory_order_relaxed);
    if (task >= num_tasks) return;
    const int rc = fn(task, closure);
    if (rc != 0) {
      int expected = 0;
      atomic_compare_exchange_strong(&g_pool.error, &expected, rc);
    }
  }
}

static void* worker_main(void* arg) {
  (void)arg;
  uint32_t seen = 0; /* the pool is created before the first job, at generation 0 */
  for (;;) {
    uint32_t gen = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
    if (gen == seen) {
      const int64_t deadline = now_ns() + kWorkerSpinNs;
      for (int spins = 0; gen == seen; ++spins) {
        cpu_relax();
        gen = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
        if ((spins & 255) == 255 && now_ns() > deadline) break;
      }
      while (gen == seen) {
        /* Dekker-style handshake with the caller: it bumps `gen` then reads `sleepers`; we
         * raise `sleepers` then the kernel re-checks `gen` atomically. Both seq_cst. */
        atomic_fetch_add(&g_pool.sleepers, 1);
        futex_wait(&g_pool.gen, seen);
        atomic_fetch_sub(&g_pool.sleepers, 1);
        gen = atomic_load_explicit(&g_pool.gen, memory_order_acquire);
      }
    }
    seen = gen;
    /* Join the job of generation `seen` unless it is closed or already replaced. */
    uint64_t state = atomic_load_explicit(&g_pool.state, memory_order_acquire);
    while ((uint32_t)(state >> 32) == seen && (state & kClosed) == 0) {
      if (atomic_compare_exchange_weak_explicit(&g_pool.state, &state, state + 1,
                                                memory_order_acquire, memory_order_acquire)) {
        run_tasks();
        atomic_fetch_sub_explicit(&g_pool.state, 1, memory_order_release);
        break;
      }
    }
  }
  return NULL;
}

static int parse_num_threads(const char* text) {
  if (text == NULL || *text == '\0') return 0;
  char* end = NULL;
  errno = 0;
  const long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < 1 || value > kMaxThreads) return 0;
  return (int)value;
}

static void pool_init(void) {
  int threads = parse_num_threads(getenv("LATHE_NUM_THREADS"));
  if (threads == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    threads = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads <= 0) threads = 1;
    if (threads > kMaxThreads) threads = kMaxThreads;
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int created = 0;
  for (int i = 0; i < threads - 1; ++i) {
    if (pthread_create(&g_pool.workers[created], &attr, worker_main, NULL) != 0) break;
    ++created;
  }
  pthread_attr_destroy(&attr);
  g_pool.num_workers = created;
  g_pool.pid = getpid();
}

static int is_pool_thread(pthread_t self) {
  if ((unsigned long)self == atomic_load_explicit(&g_pool.owner, memory_order_relaxed)) return 1;
  for (int i = 0; i < g_pool.num_workers; ++i) {
    if (pthread_equal(self, g_pool.workers[i])) return 1;
  }
  return 0;
}

static int run_serially(int64_t num_tasks, lathe_task_fn fn, void* closure) {
  for (int64_t task = 0; task < num_tasks; ++task) {
    const int rc = fn(task, closure);
    if (rc != 0) return rc;
  }
  return 0;
}

int lathe_num_threads(void) {
  pthread_once(&g_pool.once, pool_init);
  return g_pool.num_workers + 1;
}

int lathe_parallel_for(int64_t num_tasks, lathe_task_fn fn, void* closure) {
  if (num_tasks <= 0) return 0;
  pthread_once(&g_pool.once, pool_init);
  const pthread_t self = pthread_self();
  /* Single tasks, single-threaded pools and nested calls from inside a task run inline, and
   * so does everything in a child forked after the pool started (its workers did not survive
   * the fork). pthread_atfork would avoid the getpid() call, but it lives in
   * libc_nonshared.a, which the embedded copy cannot link against. */
  if (num_tasks == 1 || g_pool.num_workers == 0 || is_pool_thread(self) || getpid() != g_pool.pid) {
    return run_serially(num_tasks, fn, closure);
  }

  pthread_mutex_lock(&g_pool.submit);
  atomic_store_explicit(&g_pool.owner, (unsigned long)self, memory_order_relaxed);
  g_pool.fn = fn;
  g_pool.closure = closure;
  g_pool.num_tasks = num_tasks;
  atomic_store_explicit(&g_pool.next, 0, memory_order_relaxed);
  atomic_store_explicit(&g_pool.error, 0, memory_order_relaxed);
  const uint32_t gen = atomic_load_explicit(&g_pool.gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&g_pool.state, (uint64_t)gen << 32, memory_order_release); /* open */
  atomic_store(&g_pool.gen, gen); /* seq_cst: pairs with the workers' `sleepers` handshake */
  if (atomic_load(&g_pool.sleepers) > 0) futex_wake_all(&g_pool.gen);

  run_tasks();

  /* Close the job; then wait for the workers that joined it to finish their last task. */
  uint64_t state = atomic_fetch_or_explicit(&g_pool.state, kClosed, memory_order_acq_rel);
  if ((state & kCountMask) != 0) {
    const int64_t deadline = now_ns() + kCallerSpinNs;
    int spins = 0;
    while ((atomic_load_explicit(&g_pool.state, memory_order_acquire) & kCountMask) != 0) {
      /* After a short spin, yield: a worker may be waiting for this CPU. */
      if (++spins > 256 && now_ns() > deadline) {
        sched_yield();
      } else {
        cpu_relax();
      }
    }
  }
  const int rc = atomic_load_explicit(&g_pool.error, memory_order_relaxed);
  atomic_store_explicit(&g_pool.owner, 0, memory_order_relaxed);
  pthread_mutex_unlock(&g_pool.submit);
  return rc;
}

void* lathe_alloc(int64_t bytes) {
  if (bytes < 0) return NULL;
  /* Round up so that vector loads of the last, partial 64-byte line stay inside. */
  const uint64_t size = ((uint64_t)bytes + 63u) & ~(uint64_t)63u;
  void* ptr = NULL;
  if (posix_memalign(&ptr, 64, size == 0 ? 64 : (size_t)size) != 0) return NULL;
  return ptr;
}

void lathe_free(void* ptr) { free(ptr); }
