#include "gpuemu/platform.h"

#include "absl/strings/str_cat.h"

namespace lathe::gpuemu {

const std::string& PlatformHeader() {
  static const std::string* kHeader =
      new std::string(R"(// lathe gpu emulator: the CUDA platform on the host
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("lathe_shared")))
#define LATHE_GPU_EMULATOR 1

struct uint3 { unsigned int x, y, z; };
struct dim3 { unsigned int x, y, z; };
static void lathe_emu_check_aligned(const void* p, unsigned long bytes);
// A GPU faults on a vector access that is not aligned to its size: float4 checks every copy
// to and from memory (its own address and the other's).
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
  float4() = default;
  float4(float a, float b, float c, float d) : x(a), y(b), z(c), w(d) {}
  float4(const float4& o) : x(o.x), y(o.y), z(o.z), w(o.w) { lathe_emu_check_aligned(&o, 16); }
  float4& operator=(const float4& o) {
    lathe_emu_check_aligned(this, 16);
    lathe_emu_check_aligned(&o, 16);
    x = o.x; y = o.y; z = o.z; w = o.w;
    return *this;
  }
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
  float2() = default;
  float2(float a, float b) : x(a), y(b) {}
  float2(const float2& o) : x(o.x), y(o.y) { lathe_emu_check_aligned(&o, 8); }
  float2& operator=(const float2& o) {
    lathe_emu_check_aligned(this, 8);
    lathe_emu_check_aligned(&o, 8);
    x = o.x; y = o.y;
    return *this;
  }
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4(x, y, z, w); }
static inline float2 make_float2(float x, float y) { return float2(x, y); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }

// One emulated CUDA thread's indices (layout of lathe::gpuemu::EmuThreadState).
struct lathe_emu_thread { uint3 thread_idx; uint3 block_idx; dim3 block_dim; dim3 grid_dim; };
struct lathe_emu_api {
  void (*barrier)(int line);
  void (*warp_barrier)(int line);
  void (*report)(const char* what);
  void (*misaligned)(const void* address, unsigned long bytes);
};
static const lathe_emu_thread* lathe_emu_cur;
static lathe_emu_api lathe_emu_rt;
#define threadIdx (lathe_emu_cur->thread_idx)
#define blockIdx (lathe_emu_cur->block_idx)
#define blockDim (lathe_emu_cur->block_dim)
#define gridDim (lathe_emu_cur->grid_dim)
#define __syncthreads() lathe_emu_rt.barrier(__LINE__)
// Tensor cores (see platform.h). The exchange area holds two rounds per warp: a lane may
// write the next mma's fragments while a slower one still reads this one's (it cannot get
// two mmas ahead: the next warp barrier waits for that lane).
static inline unsigned lathe_cvt_tf32(float x) {
  unsigned u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;  // ties away from zero (.rna)
  return u & 0xffffe000u;
}
static inline float lathe_emu_tf32_value(unsigned u) {
  u &= 0xffffe000u;  // the tensor core reads only the tf32 bits
  float f;
  memcpy(&f, &u, 4);
  return f;
}
struct lathe_emu_mma_lane { unsigned a[4]; unsigned b[2]; };
static lathe_emu_mma_lane lathe_emu_mma_x[2][32][32];  // [round][warp][lane]
// In shared memory: the runtime resets it (all bits set) before every block.
static unsigned lathe_emu_mma_round[32][32] __attribute__((section("lathe_shared")));
static void lathe_emu_mma_m16n8k8_tf32(float* d, const unsigned* a, const unsigned* b,
                                       int line) {
  unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned warp = tid / 32, lane = tid % 32;
  unsigned round = lathe_emu_mma_round[warp][lane]++ & 1;
  lathe_emu_mma_lane* x = lathe_emu_mma_x[round][warp];
  memcpy(x[lane].a, a, sizeof x[lane].a);
  memcpy(x[lane].b, b, sizeof x[lane].b);
  lathe_emu_rt.warp_barrier(line);
  unsigned g = lane >> 2, t = lane & 3;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    unsigned row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float acc = d[i];
    for (unsigned k = 0; k < 8; ++k) {
      // A (16x8, row): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
      unsigned alane = (row % 8) * 4 + k % 4, areg = (row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0);
      // B (8x8, col): b0 (k=t, n=g), b1 (k=t+4, n=g).
      unsigned blane = col * 4 + k % 4, breg = k >= 4 ? 1 : 0;
      acc = fmaf(lathe_emu_tf32_value(x[alane].a[areg]), lathe_emu_tf32_value(x[blane].b[breg]),
                 acc);
    }
    out[i] = acc;
  }
  memcpy(d, out, sizeof out);
}
#define lathe_mma_m16n8k8_tf32(d, a, b) lathe_emu_mma_m16n8k8_tf32(d, a, b, __LINE__)
static void lathe_emu_check_aligned(const void* p, unsigned long bytes) {
  // The compiler may assume a float4's address aligned (its type says so) and drop the test:
  // the empty asm hides where the value came from.
  uintptr_t a = (uintptr_t)p;
  __asm__ volatile("" : "+r"(a));
  if (a % bytes != 0) lathe_emu_rt.misaligned(p, bytes);
}

extern "C" __attribute__((visibility("default"))) void lathe_emu_init(const lathe_emu_api* api) {
  lathe_emu_rt = *api;
}
extern "C" __attribute__((visibility("default"))) void lathe_emu_set_current(
    const lathe_emu_thread* t) {
  lathe_emu_cur = t;
}
// The bounds of this module's shared memory (GNU ld defines __start_/__stop_ symbols for a
// section whose name is an identifier); a module without __shared__ variables has none.
extern "C" char __start_lathe_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_lathe_shared[] __attribute__((weak, visibility("hidden")));
extern "C" __attribute__((visibility("default"))) void lathe_emu_shared(char** begin,
                                                                         char** end) {
  *begin = __start_lathe_shared;
  *end = __stop_lathe_shared;
}

// Dynamic shared memory: codegen/cuda declares it with this macro (extern __shared__ for
// NVRTC); here it is a shared array of the size the launch asks for.
#define LATHE_DYNAMIC_SHARED(name, floats) \
  static float name[floats] __attribute__((aligned(16), section("lathe_shared")))

// cp.async (see platform.h). A copy is queued by the thread that issues it, its source read
// then (kernels never write the operands they copy), its destination filled with NaN bytes
// until the thread's cp.async.wait_group completes the copy's group: a read of the data
// before the wait (or of a stage another copy is refilling) sees NaN, not the value.
struct lathe_emu_cp {
  char* dst;
  unsigned char data[16];
  unsigned bytes, group;
};
enum { LATHE_EMU_CP_MAX = 256 };
struct lathe_emu_cp_state { unsigned pending, committed; };
// The state lives in function-local statics: a module that never issues a copy has none (and
// its blocks have no more shared memory to reset).
static lathe_emu_cp* lathe_emu_cp_queue(unsigned tid) {
  static lathe_emu_cp queue[1024][LATHE_EMU_CP_MAX];  // [thread][pending copy]
  return queue[tid];
}
static lathe_emu_cp_state* lathe_emu_cp_self(unsigned* tid) {
  // In shared memory: all bits set before every block, read as "no copy issued yet".
  static lathe_emu_cp_state threads[1024] __attribute__((section("lathe_shared")));
  *tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  lathe_emu_cp_state* s = &threads[*tid];
  if (s->pending == 0xffffffffu) s->pending = s->committed = 0;
  return s;
}
static void lathe_emu_cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes,
                               int line) {
  char msg[256];
  char* d = (char*)dst;
  if (d < __start_lathe_shared || d + bytes > __stop_lathe_shared) {
    snprintf(msg, sizeof msg, "line %d: cp.async to an address outside shared memory", line);
    lathe_emu_rt.report(msg);
  }
  if (((uintptr_t)dst | (uintptr_t)src) % bytes != 0 || src_bytes > bytes) {
    snprintf(msg, sizeof msg,
             "line %d: cp.async of %u bytes (%u from global) needs both addresses aligned to %u",
             line, bytes, src_bytes, bytes);
    lathe_emu_rt.report(msg);
  }
  unsigned tid;
  lathe_emu_cp_state* s = lathe_emu_cp_self(&tid);
  if (s->pending == LATHE_EMU_CP_MAX) {
    snprintf(msg, sizeof msg, "line %d: more than %d cp.async copies in flight in one thread",
             line, (int)LATHE_EMU_CP_MAX);
    lathe_emu_rt.report(msg);
  }
  lathe_emu_cp* c = &lathe_emu_cp_queue(tid)[s->pending++];
  c->dst = d;
  c->bytes = bytes;
  c->group = s->committed;
  memset(c->data, 0, sizeof c->data);
  if (src_bytes) memcpy(c->data, src, src_bytes);  // the rest zero-filled, as PTX's src-size
  memset(d, 0xff, bytes);
}
static void lathe_emu_cp_commit() {
  unsigned tid;
  lathe_emu_cp_self(&tid)->committed++;
}
// cp.async.wait_group n: the copies of every committed group but the newest n land.
static void lathe_emu_cp_wait(unsigned n) {
  unsigned tid;
  lathe_emu_cp_state* s = lathe_emu_cp_self(&tid);
  lathe_emu_cp* q = lathe_emu_cp_queue(tid);
  unsigned kept = 0;
  for (unsigned i = 0; i < s->pending; ++i) {
    if (q[i].group + n < s->committed) {
      memcpy(q[i].dst, q[i].data, q[i].bytes);
    } else {
      q[kept++] = q[i];
    }
  }
  s->pending = kept;
}
#define lathe_cp_async16(dst, src, src_bytes) lathe_emu_cp_async(dst, src, 16, src_bytes, __LINE__)
#define lathe_cp_async4(dst, src, src_bytes) lathe_emu_cp_async(dst, src, 4, src_bytes, __LINE__)
#define lathe_cp_async_commit() lathe_emu_cp_commit()
#define lathe_cp_async_wait(n) lathe_emu_cp_wait(n)

// The sanitizer's checks call these (GCC's and clang's common ABI); they are defined here so
// that the module needs no sanitizer runtime, and report to the emulator.
struct lathe_ubsan_loc { const char* file; uint32_t line; uint32_t column; };
struct lathe_ubsan_type { uint16_t kind; uint16_t info; char name[1]; };
struct lathe_ubsan_oob {
  lathe_ubsan_loc loc; const lathe_ubsan_type* array_type; const lathe_ubsan_type* index_type;
};
struct lathe_ubsan_mismatch {
  lathe_ubsan_loc loc; const lathe_ubsan_type* type; unsigned char log_alignment;
  unsigned char check_kind;
};
static long long lathe_ubsan_int(const lathe_ubsan_type* t, uintptr_t v) {
  unsigned bits = 1u << (t->info >> 1);
  if ((t->info & 1) && bits < 64) {
    unsigned long long m = 1ull << (bits - 1);
    unsigned long long x = v & ((m << 1) - 1);
    return (long long)((x ^ m) - m);
  }
  return (long long)v;
}
#define LATHE_HIDDEN extern "C" __attribute__((visibility("hidden"), noreturn))
LATHE_HIDDEN void __ubsan_handle_out_of_bounds_abort(lathe_ubsan_oob* d, uintptr_t index) {
  char msg[512];
  snprintf(msg, sizeof msg, "%s:%u:%u: index %lld out of bounds for type %s", d->loc.file,
           d->loc.line, d->loc.column, lathe_ubsan_int(d->index_type, index),
           d->array_type->name);
  lathe_emu_rt.report(msg);
  __builtin_trap();
}
LATHE_HIDDEN void __ubsan_handle_out_of_bounds(lathe_ubsan_oob* d, uintptr_t index) {
  __ubsan_handle_out_of_bounds_abort(d, index);
}
LATHE_HIDDEN void __ubsan_handle_type_mismatch_v1_abort(lathe_ubsan_mismatch* d,
                                                        uintptr_t ptr) {
  static const char* const kKinds[] = {"load of", "store to", "reference binding to",
                                       "member access within", "member call on"};
  const char* kind = d->check_kind < 5 ? kKinds[d->check_kind] : "access to";
  unsigned long align = 1ul << d->log_alignment;
  char msg[512];
  if (!ptr) {
    snprintf(msg, sizeof msg, "%s:%u:%u: %s null pointer of type %s", d->loc.file, d->loc.line,
             d->loc.column, kind, d->type->name);
  } else if (ptr & (align - 1)) {
    // The offset from alignment, never the address itself: messages reach users and logs.
    snprintf(msg, sizeof msg,
             "%s:%u:%u: misaligned address: %s an address %lu bytes past a %lu-byte boundary, "
             "of type %s, which requires %lu byte alignment",
             d->loc.file, d->loc.line, d->loc.column, kind, (unsigned long)(ptr & (align - 1)),
             align, d->type->name, align);
  } else {
    snprintf(msg, sizeof msg, "%s:%u:%u: %s an address with too little space for type %s",
             d->loc.file, d->loc.line, d->loc.column, kind, d->type->name);
  }
  lathe_emu_rt.report(msg);
  __builtin_trap();
}
LATHE_HIDDEN void __ubsan_handle_type_mismatch_v1(lathe_ubsan_mismatch* d, uintptr_t ptr) {
  __ubsan_handle_type_mismatch_v1_abort(d, ptr);
}
#undef LATHE_HIDDEN
)");
  return *kHeader;
}

std::string TranslationUnit(const std::string& cuda_text, const std::string& file_name,
                            const std::vector<KernelSignature>& kernels) {
  std::string out = PlatformHeader();
  absl::StrAppend(&out, "#line 1 \"", file_name, "\"\n", cuda_text);
  if (!cuda_text.empty() && cuda_text.back() != '\n') out += "\n";
  absl::StrAppend(&out, "#line 1 \"", file_name, ".entries\"\n");
  for (const KernelSignature& k : kernels) {
    absl::StrAppend(&out,
                    "extern \"C\" __attribute__((visibility(\"default\"))) void lathe_emu_entry_",
                    k.name, "(float* const* a) { ", k.name, "(");
    for (int i = 0; i < k.num_args; ++i) absl::StrAppend(&out, i ? ", " : "", "a[", i, "]");
    absl::StrAppend(&out, "); }\n");
  }
  return out;
}

}  // namespace lathe::gpuemu
