#include "gpuemu/launch.h"

#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "gpuemu/buffer.h"

namespace lathe::gpuemu {

namespace {

// --- fiber contexts ---
// On x86-64 a switch saves the callee-saved registers, the SSE and x87 control words and the
// stack pointer, and restores another's: no system call (glibc's swapcontext saves and
// restores the signal mask with one, which cost about 0.7 us per switch here, more than most
// kernels' work between two barriers). Elsewhere ucontext is used.
#if defined(__x86_64__)
extern "C" void lathe_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl lathe_emu_switch
  .hidden lathe_emu_switch
  .type lathe_emu_switch,@function
lathe_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lathe_emu_switch,.-lathe_emu_switch
)");

struct Context {
  void* sp = nullptr;
};
void Switch(Context* from, Context* to) { lathe_emu_switch(&from->sp, to->sp); }
void NewContext(Context* c, char* stack, size_t size, void (*entry)(), Context* /*link*/) {
  // The top, 16-byte aligned: `entry` starts as if called (its stack pointer 8 mod 16), its
  // frame below the registers the first switch pops.
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t{15};
  uint64_t* p = reinterpret_cast<uint64_t*>(top);
  *--p = 0;                                  // entry's (never used) return address
  *--p = reinterpret_cast<uint64_t>(entry);  // where the first switch returns to
  for (int i = 0; i < 6; ++i) *--p = 0;      // rbp, rbx, r12..r15
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  *--p = static_cast<uint64_t>(mxcsr) | static_cast<uint64_t>(fpucw) << 32;
  c->sp = p;
}
constexpr bool kEntryReturns = false;  // an entry must switch away instead of returning
#else
struct Context {
  ucontext_t uc;
};
void Switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
void NewContext(Context* c, char* stack, size_t size, void (*entry)(), Context* link) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = &link->uc;
  makecontext(&c->uc, entry, 0);
}
constexpr bool kEntryReturns = true;
#endif

enum class Run : uint8_t { kReady, kWaiting, kWarpWaiting, kDone };

struct Fiber {
  Context ctx;
  EmuThreadState state;
  Run run = Run::kReady;
  int line = 0;
};

// What the signal handler records (it must not allocate).
struct Fault {
  int signo = 0;
  int code = 0;
  uintptr_t addr = 0;
  int access = -1;  // 0 read, 1 write, -1 unknown
};

struct Launch {
  const ModuleEntries* module = nullptr;
  const LaunchSpec* spec = nullptr;
  float* const* args = nullptr;
  Fiber* fibers = nullptr;
  int threads = 0;
  bool direct = false;
  Context sched;
  int current = -1;
  uint32_t block[3] = {0, 0, 0};
  volatile sig_atomic_t active = 0;
  sigjmp_buf jmp;
  Fault fault;
  bool reported = false;
  std::string report;
  uintptr_t stacks_lo = 0, stacks_hi = 0;
  size_t stack_stride = 0;
};

thread_local Launch* t_launch = nullptr;

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];

size_t PageSize() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

void OnFault(int sig, siginfo_t* info, void* uctx) {
  Launch* l = t_launch;
  if (l && l->active) {
    l->active = 0;
    l->fault.signo = sig;
    l->fault.code = info->si_code;
    l->fault.addr = reinterpret_cast<uintptr_t>(info->si_addr);
#if defined(__x86_64__)
    if (sig == SIGSEGV) {
      // The page-fault error code: bit 1 set for a write.
      l->fault.access = (static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
    }
#endif
    siglongjmp(l->jmp, 1);
  }
  // Not ours: hand over to whoever handled it before, or die as the default action would.
  for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    if (kSignals[i] != sig) continue;
    const struct sigaction& prev = g_previous[i];
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uctx);
      return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
      return;
    }
    signal(sig, SIG_DFL);  // returning re-executes the faulting instruction
    return;
  }
}

void InstallHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = OnFault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
      sigaction(kSignals[i], &sa, &g_previous[i]);
    }
  });
}

// The current thread waits (`wait`: for its block or its warp) at `what` on `line`; a kernel
// emulated without barriers reports it instead.
void WaitAt(int line, Run wait, const char* what) {
  Launch* l = t_launch;
  if (l->direct) {
    l->reported = true;
    l->report =
        absl::StrCat(what, " on line ", line, " was reached in a kernel emulated without barriers");
    siglongjmp(l->jmp, 2);
  }
  Fiber& f = l->fibers[l->current];
  f.run = wait;
  f.line = line;
  Switch(&f.ctx, &l->sched);
}

void Barrier(int line) { WaitAt(line, Run::kWaiting, "__syncthreads()"); }

void WarpBarrier(int line) { WaitAt(line, Run::kWarpWaiting, "a warp-level mma"); }

// Ends the running CUDA thread after a report (l->report set): the launch stops there.
[[noreturn]] void EndThread(Launch* l) {
  l->reported = true;
  if (l->direct) siglongjmp(l->jmp, 2);
  Fiber& f = l->fibers[l->current];
  f.run = Run::kDone;
  Switch(&f.ctx, &l->sched);  // the scheduler never resumes it
  __builtin_trap();
}

void Report(const char* what) {
  Launch* l = t_launch;
  l->report = what;
  EndThread(l);
}

void Misaligned(const void* address, unsigned long bytes) {
  Launch* l = t_launch;
  l->report = absl::StrCat("misaligned address: a ", bytes, "-byte vector access to ",
                           DescribeAddress(reinterpret_cast<uintptr_t>(address)),
                           ", which requires ", bytes, " byte alignment");
  EndThread(l);
}

void FiberMain() {
  Launch* l = t_launch;
  l->spec->entry(l->args);
  Fiber& f = l->fibers[l->current];
  f.run = Run::kDone;
  if (kEntryReturns) return;  // to uc_link: the scheduler
  Switch(&f.ctx, &l->sched);  // never resumed
  __builtin_trap();
}

// Fiber stacks of this thread, reused by its launches; each has a guard page below it.
struct StackPool {
  char* base = nullptr;
  size_t bytes = 0;
  size_t stride = 0;
  int count = 0;
  ~StackPool() {
    if (base) munmap(base, bytes);
  }
  bool Reserve(int n, size_t stack_bytes) {
    size_t page = PageSize();
    size_t stride = (stack_bytes + page - 1) / page * page + page;
    if (base && n <= count && stride == this->stride) return true;
    if (base) munmap(base, bytes);
    base = nullptr;
    bytes = stride * static_cast<size_t>(n);
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    base = static_cast<char*>(m);
    for (int i = 0; i < n; ++i) mprotect(base + stride * i, page, PROT_NONE);
    this->stride = stride;
    count = n;
    return true;
  }
};

std::string Triple(const uint32_t v[3]) {
  return absl::StrCat("(", v[0], ",", v[1], ",", v[2], ")");
}

std::string Where(const Launch& l) {
  std::string out = absl::StrCat("kernel '", l.spec->kernel, "' block ", Triple(l.block));
  if (l.current >= 0)
    absl::StrAppend(&out, " thread ", Triple(l.fibers[l.current].state.thread_idx));
  return out;
}

std::string DescribeFault(const Launch& l) {
  const Fault& f = l.fault;
  if (f.signo == SIGSEGV || f.signo == SIGBUS) {
    if (f.addr >= l.stacks_lo && f.addr < l.stacks_hi &&
        (f.addr - l.stacks_lo) % l.stack_stride < PageSize()) {
      return absl::StrCat("illegal address: ", Where(l),
                          " overflowed its stack (per-thread arrays too large for the emulator's ",
                          l.spec->stack_bytes / 1024, " KiB)");
    }
    const char* what = f.access == 1 ? "write of " : f.access == 0 ? "read of " : "access to ";
    return absl::StrCat("illegal address: ", Where(l), ": ", what, DescribeAddress(f.addr));
  }
  if (f.signo == SIGFPE) {
    return absl::StrCat("arithmetic error: ", Where(l),
                        f.code == FPE_INTDIV ? ": integer division by zero" : "");
  }
  return absl::StrCat("illegal instruction: ", Where(l), " at 0x", absl::Hex(f.addr));
}

// Releases every warp whose threads all wait at the same warp barrier. Fails (naming both
// threads) when a warp's threads wait at different warp barriers, or some at a warp barrier
// and others elsewhere: mma.sync needs the whole warp converged. Sets `released` when a warp
// went on.
absl::Status ReleaseWarps(Launch& l, bool* released) {
  *released = false;
  for (int w = 0; w * 32 < l.threads; ++w) {
    const int lo = w * 32, hi = std::min(l.threads, lo + 32);
    int first = -1, other = -1;
    for (int t = lo; t < hi; ++t) {
      if (l.fibers[t].run == Run::kWarpWaiting && first < 0) first = t;
    }
    if (first < 0) continue;
    for (int t = lo; t < hi && other < 0; ++t) {
      if (l.fibers[t].run != Run::kWarpWaiting || l.fibers[t].line != l.fibers[first].line) {
        other = t;
      }
    }
    if (other >= 0) {
      const Fiber& o = l.fibers[other];
      l.current = -1;
      return absl::AbortedError(absl::StrCat(
          "warp divergence: ", Where(l), ": thread ", Triple(l.fibers[first].state.thread_idx),
          " waits at the warp-level mma on line ", l.fibers[first].line, ", thread ",
          Triple(o.state.thread_idx),
          o.run == Run::kDone          ? " returned"
          : o.run == Run::kWarpWaiting ? absl::StrCat(" at the one on line ", o.line)
                                       : absl::StrCat(" waits at __syncthreads() on line ", o.line),
          " (mma.sync needs every thread of the warp)"));
    }
    for (int t = lo; t < hi; ++t) l.fibers[t].run = Run::kReady;
    *released = true;
  }
  return absl::OkStatus();
}

absl::Status RunBlock(Launch& l) {
  const LaunchSpec& s = *l.spec;
  if (l.module->shared_end > l.module->shared_begin) {
    std::memset(l.module->shared_begin, 0xff,
                static_cast<size_t>(l.module->shared_end - l.module->shared_begin));
  }
  int n = l.threads;
  for (int t = 0; t < n; ++t) {
    EmuThreadState& st = l.fibers[t].state;
    st.thread_idx[0] = static_cast<uint32_t>(t % s.block[0]);
    st.thread_idx[1] = static_cast<uint32_t>(t / s.block[0] % s.block[1]);
    st.thread_idx[2] = static_cast<uint32_t>(t / (s.block[0] * s.block[1]));
    for (int d = 0; d < 3; ++d) {
      st.block_idx[d] = l.block[d];
      st.block_dim[d] = static_cast<uint32_t>(s.block[d]);
      st.grid_dim[d] = static_cast<uint32_t>(s.grid[d]);
    }
  }
  if (l.direct) {
    for (int t = 0; t < n; ++t) {
      l.current = t;
      l.module->set_current(&l.fibers[t].state);
      s.entry(l.args);
    }
    l.current = -1;
    return absl::OkStatus();
  }
  for (int t = 0; t < n; ++t) {
    Fiber& f = l.fibers[t];
    NewContext(&f.ctx, reinterpret_cast<char*>(l.stacks_lo) + l.stack_stride * t + PageSize(),
               l.stack_stride - PageSize(), FiberMain, &l.sched);
    f.run = Run::kReady;
  }
  for (int phase = 0;; ++phase) {
    for (int i = 0; i < n; ++i) {
      int t = phase % 2 == 0 ? i : n - 1 - i;
      if (l.fibers[t].run != Run::kReady) continue;
      l.current = t;
      l.module->set_current(&l.fibers[t].state);
      Switch(&l.sched, &l.fibers[t].ctx);
      if (l.reported) return absl::AbortedError(absl::StrCat(Where(l), ": ", l.report));
    }
    bool released = false;
    if (absl::Status st = ReleaseWarps(l, &released); !st.ok()) return st;
    if (released) continue;
    int waiting = -1, done = -1;
    for (int t = 0; t < n; ++t) {
      if (l.fibers[t].run == Run::kWaiting) {
        if (waiting < 0) {
          waiting = t;
        } else if (l.fibers[t].line != l.fibers[waiting].line) {
          l.current = -1;
          return absl::AbortedError(absl::StrCat(
              "barrier divergence: ", Where(l), ": thread ",
              Triple(l.fibers[waiting].state.thread_idx), " waits at __syncthreads() on line ",
              l.fibers[waiting].line, ", thread ", Triple(l.fibers[t].state.thread_idx),
              " at the one on line ", l.fibers[t].line));
        }
      } else if (done < 0) {
        done = t;
      }
    }
    l.current = -1;
    if (waiting < 0) return absl::OkStatus();
    if (done >= 0) {
      return absl::AbortedError(absl::StrCat(
          "barrier divergence: ", Where(l), ": thread ", Triple(l.fibers[done].state.thread_idx),
          " returned while thread ", Triple(l.fibers[waiting].state.thread_idx),
          " waits at __syncthreads() on line ", l.fibers[waiting].line,
          " (a GPU would hang or corrupt the barrier)"));
    }
    for (int t = 0; t < n; ++t) l.fibers[t].run = Run::kReady;
  }
}

}  // namespace

void InitModule(void (*init)(const EmuRuntimeApi*)) {
  static const EmuRuntimeApi kApi = {Barrier, WarpBarrier, Report, Misaligned};
  init(&kApi);
}

absl::Status RunKernel(const ModuleEntries& module, const LaunchSpec& spec,
                       const std::vector<float*>& args) {
  int64_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  int64_t blocks = spec.grid[0] * spec.grid[1] * spec.grid[2];
  for (int d = 0; d < 3; ++d) {
    if (spec.block[d] < 1 || spec.grid[d] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("kernel '", spec.kernel, "': empty grid or block"));
    }
  }
  if (threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel '", spec.kernel, "': ", threads, " threads per block (at most 1024)"));
  }
  InstallHandlers();
  thread_local StackPool pool;
  thread_local std::vector<Fiber> fibers;
  thread_local std::vector<char> alt_stack;
  if (static_cast<int64_t>(fibers.size()) < threads) fibers.resize(static_cast<size_t>(threads));

  Launch l;
  l.module = &module;
  l.spec = &spec;
  l.args = args.data();
  l.fibers = fibers.data();
  l.threads = static_cast<int>(threads);
  l.direct = !spec.uses_barriers;
  if (!l.direct) {
    if (!pool.Reserve(l.threads, static_cast<size_t>(spec.stack_bytes))) {
      return absl::ResourceExhaustedError("cannot map the emulator's fiber stacks");
    }
    l.stacks_lo = reinterpret_cast<uintptr_t>(pool.base);
    l.stacks_hi = l.stacks_lo + pool.bytes;
    l.stack_stride = pool.stride;
  }
  // Faults are handled on a stack of their own: the faulting one may be exhausted.
  if (alt_stack.empty()) alt_stack.resize(64 * 1024);
  stack_t alt, old_alt;
  alt.ss_sp = alt_stack.data();
  alt.ss_size = alt_stack.size();
  alt.ss_flags = 0;
  sigaltstack(&alt, &old_alt);
  Launch* const outer = t_launch;
  t_launch = &l;

  absl::Status status;
  if (sigsetjmp(l.jmp, 1) != 0) {
    l.active = 0;
    status =
        absl::AbortedError(l.reported ? absl::StrCat(Where(l), ": ", l.report) : DescribeFault(l));
  } else {
    l.active = 1;
    for (int64_t b = 0; b < blocks && status.ok(); ++b) {
      l.block[0] = static_cast<uint32_t>(b % spec.grid[0]);
      l.block[1] = static_cast<uint32_t>(b / spec.grid[0] % spec.grid[1]);
      l.block[2] = static_cast<uint32_t>(b / (spec.grid[0] * spec.grid[1]));
      status = RunBlock(l);
    }
    l.active = 0;
  }
  t_launch = outer;
  sigaltstack(&old_alt, nullptr);
  return status;
}

}  // namespace lathe::gpuemu
