// tests/arch/context_test.cpp — arch/context.hpp (+ the sanitizer annotations of
// arch/sanitizer.hpp).
//
// Every switch goes through switch_to(), which wraps corun_context_switch in the ASan/TSan
// fiber annotations exactly as the scheduler must, so these tests pass under
// -fsanitize=address,undefined and -fsanitize=thread without reports. Stacks are mmap'd
// 64 KiB regions with a PROT_NONE guard page below them. Values that must survive a switch are
// checked in two ways: an assembly helper that loads known values into every callee-saved
// register right before the switch and reads them back right after (exact), and ordinary C++
// locals pinned in registers with empty asm statements (what compiled code relies on).
//
// The same tests run on x86-64 and aarch64 (make test ARCH=aarch64, under qemu); what differs
// is a few inline-asm helpers per architecture: the register loader (x86-64 rbx rbp r12-r15;
// aarch64 x19-x28 d8-d15), an assembly entry that records sp, fp and the return address as
// the trampoline hands them over (sp 16-aligned at the call, fp 0, return address in the
// trampoline), and raw reads/writes of the FP control registers (MXCSR control bits and the
// x87 control word; FPCR). The frame-pointer walk (what perf record -g follows) is portable:
// both ABIs keep {caller's fp, return address} at fp.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <unwind.h>

#include <cfenv>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "arch/context.hpp"
#include "arch/sanitizer.hpp"

using corun::arch::Context;
using corun::arch::SanFiber;

namespace {

constexpr std::size_t kStackSize = 64 * 1024;

// An mmap'd stack with a guard page below it.
class TestStack {
 public:
  TestStack() {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    guard_ = page;
    base_ = mmap(nullptr, kStackSize + guard_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    REQUIRE(base_ != MAP_FAILED);
    REQUIRE(mprotect(base_, guard_, PROT_NONE) == 0);
  }
  ~TestStack() { munmap(base_, kStackSize + guard_); }
  TestStack(const TestStack&) = delete;
  TestStack& operator=(const TestStack&) = delete;
  void* lo() const { return static_cast<char*>(base_) + guard_; }
  void* hi() const { return static_cast<char*>(base_) + guard_ + kStackSize; }

 private:
  void* base_ = nullptr;
  std::size_t guard_ = 0;
};

// One side of a switch: its registers and its sanitizer view.
struct Side {
  Context ctx;
  SanFiber san;
};

// A task-like context on its own stack.
struct Fiber : Side {
  TestStack stack;
  void start(void (*entry)(void*), void* arg) {
    corun::arch::san_init_task(san, stack.lo(), kStackSize);
    corun::arch::context_init(&ctx, stack.lo(), stack.hi(), entry, arg);
  }
  void finish() { corun::arch::san_destroy_task(san); }
};

// The annotated switch, as the scheduler does it.
void switch_to(Side& from, Side& to, bool from_exiting = false) {
  corun::arch::san_before_switch(from.san, to.san, from_exiting);
  corun::arch::corun_context_switch(&from.ctx, &to.ctx);
  corun::arch::san_after_switch(from.san);
}

// The test thread's native stack.
struct MainSide : Side {
  MainSide() { corun::arch::san_init_thread(san); }
};

bool in_trampoline(std::uintptr_t ip) {
  const auto t = reinterpret_cast<std::uintptr_t>(&corun::arch::corun_context_trampoline);
  return ip > t && ip < t + 64;
}

// ---- ping-pong ------------------------------------------------------------------------------

struct PingPong {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int rounds = 0;
  int count = 0;
};

void ping_pong_entry(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  corun::arch::san_after_switch(p->self->san);
  for (int i = 0; i < p->rounds; ++i) {
    ++p->count;
    switch_to(*p->self, *p->main);
  }
  ++p->count;
  switch_to(*p->self, *p->main, /*from_exiting=*/true);
  __builtin_trap();  // never resumed
}

// ---- ring: each context switches straight to the next one ---------------------------------

struct Ring {
  MainSide* main = nullptr;
  std::vector<Fiber>* fibers = nullptr;
  std::vector<int>* visits = nullptr;
  int laps = 0;
};
struct RingArg {
  Ring* ring;
  std::size_t index;
};

void ring_entry(void* arg) {
  auto* a = static_cast<RingArg*>(arg);
  Ring& r = *a->ring;
  const std::size_t i = a->index;
  const std::size_t n = r.fibers->size();
  Fiber& self = (*r.fibers)[i];
  corun::arch::san_after_switch(self.san);
  for (int lap = 0; lap < r.laps; ++lap) {
    ++(*r.visits)[i];
    if (i + 1 < n) {
      switch_to(self, (*r.fibers)[i + 1]);
    } else {
      switch_to(self, *r.main);
    }
  }
  switch_to(self, *r.main, /*from_exiting=*/true);
  __builtin_trap();
}

// ---- entry arg, alignment, frame chain, unwinding ------------------------------------------

struct EntryProbe {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  void* seen_arg = nullptr;
  std::uintptr_t aligned_local = 1;
  std::uintptr_t frame_addr = 1;
  void* saved_fp = reinterpret_cast<void*>(1);
  std::uintptr_t saved_ret = 0;
  std::uintptr_t sp_hint = 0;
  char formatted[64] = {};
  long double ld = 0;
  int unwind_rc = -1;
  int unwind_frames = 0;
  std::uintptr_t unwind_last_ip = 0;
};

struct UnwindState {
  int frames = 0;
  std::uintptr_t last_ip = 0;
};

_Unwind_Reason_Code unwind_cb(_Unwind_Context* ctx, void* arg) {
  auto* s = static_cast<UnwindState*>(arg);
  const auto ip = static_cast<std::uintptr_t>(_Unwind_GetIP(ctx));
  // libgcc reports the frame "above" an undefined return address as ip 0, then ends.
  if (ip == 0) return _URC_NO_REASON;
  s->last_ip = ip;
  if (++s->frames > 64) return _URC_NORMAL_STOP;  // a runaway walk: fail below
  return _URC_NO_REASON;
}

[[gnu::noinline]] void use_sse_and_long_double(EntryProbe* p) {
  // Variadic calls with FP args make glibc's printf spill xmm registers with movaps, which
  // faults on a misaligned stack; long double goes through the x87 unit.
  volatile long double x = 1.25L;
  p->ld = x * 3.0L;
  std::snprintf(p->formatted, sizeof p->formatted, "%.2f %.2Lf", 2.5, p->ld);
}

void probe_entry(void* arg) {
  auto* p = static_cast<EntryProbe*>(arg);
  corun::arch::san_after_switch(p->self->san);
  p->seen_arg = arg;
  alignas(16) volatile char local[16] = {};
  p->aligned_local = reinterpret_cast<std::uintptr_t>(&local[0]);
  // The frame record of this function: [fp] = caller's fp (must be 0: end of chain),
  // [fp+8] = return address (inside the trampoline). Same layout on x86-64 and aarch64.
  void** fp = static_cast<void**>(__builtin_frame_address(0));
  p->frame_addr = reinterpret_cast<std::uintptr_t>(fp);
  p->saved_fp = fp[0];
  p->saved_ret = reinterpret_cast<std::uintptr_t>(fp[1]);
  use_sse_and_long_double(p);
  UnwindState us;
  p->unwind_rc = _Unwind_Backtrace(unwind_cb, &us);
  p->unwind_frames = us.frames;
  p->unwind_last_ip = us.last_ip;
  switch_to(*p->self, *p->main, /*from_exiting=*/true);
  __builtin_trap();
}

// ---- callee-saved registers: exact check with an assembly helper ----------------------------

constexpr int kRegVals = 18;  // x86-64 uses 6 (rbx rbp r12-r15); aarch64 18 (x19-x28, d8-d15)

}  // namespace

// Loads vals into the callee-saved registers, switches from -> to, stores the registers into
// out when resumed. Itself ABI-conforming (saves and restores what it uses).
extern "C" void corun_test_switch_regs(Context* from, const Context* to, const std::uint64_t* vals,
                                       std::uint64_t* out);

#if defined(__x86_64__)
asm(R"(
        .text
        .globl  corun_test_switch_regs
        .hidden corun_test_switch_regs
        .type   corun_test_switch_regs, %function
corun_test_switch_regs:
        pushq   %rbp
        pushq   %rbx
        pushq   %r12
        pushq   %r13
        pushq   %r14
        pushq   %r15
        pushq   %rcx            # out; 7 pushes keep the call 16-byte aligned
        movq    0(%rdx), %rbx
        movq    8(%rdx), %rbp
        movq    16(%rdx), %r12
        movq    24(%rdx), %r13
        movq    32(%rdx), %r14
        movq    40(%rdx), %r15
        call    corun_context_switch@PLT
        popq    %rcx
        movq    %rbx, 0(%rcx)
        movq    %rbp, 8(%rcx)
        movq    %r12, 16(%rcx)
        movq    %r13, 24(%rcx)
        movq    %r14, 32(%rcx)
        movq    %r15, 40(%rcx)
        popq    %r15
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret
        .size   corun_test_switch_regs, .-corun_test_switch_regs
)");
constexpr int kRegsUsed = 6;
#elif defined(__aarch64__)
asm(R"(
        .text
        .globl  corun_test_switch_regs
        .hidden corun_test_switch_regs
        .type   corun_test_switch_regs, %function
corun_test_switch_regs:
        stp     x29, x30, [sp, #-176]!
        mov     x29, sp
        stp     x19, x20, [sp, #16]
        stp     x21, x22, [sp, #32]
        stp     x23, x24, [sp, #48]
        stp     x25, x26, [sp, #64]
        stp     x27, x28, [sp, #80]
        stp     d8, d9, [sp, #96]
        stp     d10, d11, [sp, #112]
        stp     d12, d13, [sp, #128]
        stp     d14, d15, [sp, #144]
        str     x3, [sp, #160]
        ldp     x19, x20, [x2, #0]
        ldp     x21, x22, [x2, #16]
        ldp     x23, x24, [x2, #32]
        ldp     x25, x26, [x2, #48]
        ldp     x27, x28, [x2, #64]
        ldp     d8, d9, [x2, #80]
        ldp     d10, d11, [x2, #96]
        ldp     d12, d13, [x2, #112]
        ldp     d14, d15, [x2, #128]
        bl      corun_context_switch
        ldr     x3, [sp, #160]
        stp     x19, x20, [x3, #0]
        stp     x21, x22, [x3, #16]
        stp     x23, x24, [x3, #32]
        stp     x25, x26, [x3, #48]
        stp     x27, x28, [x3, #64]
        stp     d8, d9, [x3, #80]
        stp     d10, d11, [x3, #96]
        stp     d12, d13, [x3, #112]
        stp     d14, d15, [x3, #128]
        ldp     x19, x20, [sp, #16]
        ldp     x21, x22, [sp, #32]
        ldp     x23, x24, [sp, #48]
        ldp     x25, x26, [sp, #64]
        ldp     x27, x28, [sp, #80]
        ldp     d8, d9, [sp, #96]
        ldp     d10, d11, [sp, #112]
        ldp     d12, d13, [sp, #128]
        ldp     d14, d15, [sp, #144]
        ldp     x29, x30, [sp], #176
        ret
        .size   corun_test_switch_regs, .-corun_test_switch_regs
)");
constexpr int kRegsUsed = 18;
#endif

namespace {

std::uint64_t reg_pattern(int side, int round, int reg) {
  return 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(side * 100000 + round * 100 + reg + 1);
}

struct RegTest {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int rounds = 0;
  int mismatches = 0;
};

void regs_entry(void* arg) {
  auto* t = static_cast<RegTest*>(arg);
  corun::arch::san_after_switch(t->self->san);
  for (int r = 0; r < t->rounds; ++r) {
    std::uint64_t vals[kRegVals], out[kRegVals] = {};
    for (int i = 0; i < kRegVals; ++i) vals[i] = reg_pattern(2, r, i);
    corun::arch::san_before_switch(t->self->san, t->main->san, false);
    corun_test_switch_regs(&t->self->ctx, &t->main->ctx, vals, out);
    corun::arch::san_after_switch(t->self->san);
    for (int i = 0; i < kRegsUsed; ++i) t->mismatches += out[i] != vals[i];
  }
  switch_to(*t->self, *t->main, /*from_exiting=*/true);
  __builtin_trap();
}

// ---- callee-saved registers: compiler-held values -------------------------------------------

#if defined(__x86_64__)
#define FPREG "+x"
#elif defined(__aarch64__)
#define FPREG "+w"
#endif

struct LiveTest {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int rounds = 0;
  int mismatches = 0;
};

// Holds 6 integers and 8 doubles live across each switch; the empty asm statements force them
// into registers right before and right after, so the compiler must keep them in callee-saved
// registers (or its own spill slots) across the call. The other side does the same with other
// values, so a register that is not restored shows up as a mismatch.
[[gnu::noinline]] int hold_values_across_switch(Side& from, Side& to, std::uint64_t seed) {
  std::uint64_t a = seed + 1, b = seed * 3, c = seed ^ 0x5555, d = seed + 77, e = seed << 3,
                f = ~seed;
  double x0 = static_cast<double>(seed) + 0.5, x1 = x0 * 2, x2 = x0 * 3, x3 = x0 * 4, x4 = x0 * 5,
         x5 = x0 * 6, x6 = x0 * 7, x7 = x0 * 8;
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  asm volatile("" : FPREG(x0), FPREG(x1), FPREG(x2), FPREG(x3));
  asm volatile("" : FPREG(x4), FPREG(x5), FPREG(x6), FPREG(x7));
  switch_to(from, to);
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  asm volatile("" : FPREG(x0), FPREG(x1), FPREG(x2), FPREG(x3));
  asm volatile("" : FPREG(x4), FPREG(x5), FPREG(x6), FPREG(x7));
  const double y0 = static_cast<double>(seed) + 0.5;
  int bad = 0;
  bad += a != seed + 1;
  bad += b != seed * 3;
  bad += c != (seed ^ 0x5555);
  bad += d != seed + 77;
  bad += e != seed << 3;
  bad += f != ~seed;
  bad += x0 != y0;
  bad += x1 != y0 * 2;
  bad += x2 != y0 * 3;
  bad += x3 != y0 * 4;
  bad += x4 != y0 * 5;
  bad += x5 != y0 * 6;
  bad += x6 != y0 * 7;
  bad += x7 != y0 * 8;
  return bad;
}

void live_entry(void* arg) {
  auto* t = static_cast<LiveTest*>(arg);
  corun::arch::san_after_switch(t->self->san);
  for (int r = 0; r < t->rounds; ++r) {
    t->mismatches += hold_values_across_switch(*t->self, *t->main, 1000003u * (r + 7));
  }
  switch_to(*t->self, *t->main, /*from_exiting=*/true);
  __builtin_trap();
}

// ---- floating-point control state per context ----------------------------------------------

struct FpTest {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int initial_round = -1;
  int rounds = 0;
  int mismatches = 0;
  double quotient = 0;
};

volatile double g_one = 1.0;
volatile double g_three = 3.0;

int current_rounding_bits() {
#if defined(__x86_64__)
  return static_cast<int>(_mm_getcsr() & 0x6000);  // MXCSR RC field; fegetround reads x87 CW
#else
  return fegetround();
#endif
}

void fp_entry(void* arg) {
  auto* t = static_cast<FpTest*>(arg);
  corun::arch::san_after_switch(t->self->san);
  t->initial_round = fegetround();
  fesetround(FE_UPWARD);
  const int mine = current_rounding_bits();
  for (int r = 0; r < t->rounds; ++r) {
    switch_to(*t->self, *t->main);
    t->mismatches += fegetround() != FE_UPWARD;
    t->mismatches += current_rounding_bits() != mine;
  }
  t->quotient = g_one / g_three;  // rounded up
  fesetround(FE_TONEAREST);
  switch_to(*t->self, *t->main, /*from_exiting=*/true);
  __builtin_trap();
}

// ---- traps and bad input (in a child process) ----------------------------------------------

void returning_entry(void*) {}

int child_status(void (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    // The child must die of the signal itself, not be "reported" by doctest's handlers.
    for (int sig : {SIGILL, SIGTRAP, SIGABRT, SIGSEGV, SIGBUS}) std::signal(sig, SIG_DFL);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) {
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// ---- entry state, exactly: an assembly entry records sp, fp and lr as the trampoline left
// them, then tail-calls the C++ continuation (same stack state, same arg) -------------------

struct EntryRegs {
  std::uintptr_t sp = 0;  // sp at the first instruction of entry
  std::uintptr_t fp = 1;  // rbp / x29 there: 0 ends the frame chain
  std::uintptr_t ra = 0;  // return address: [rsp] on x86-64, x30 on aarch64
  MainSide* main = nullptr;
  Fiber* self = nullptr;
};

}  // namespace

extern "C" void corun_test_entry_probe(void* arg);  // records EntryRegs, then jumps on
extern "C" [[noreturn]] void corun_test_entry_probe_cont(void* arg) {
  auto* e = static_cast<EntryRegs*>(arg);
  corun::arch::san_after_switch(e->self->san);
  switch_to(*e->self, *e->main, /*from_exiting=*/true);
  __builtin_trap();
}

// At a function's first instruction the ABI wants (sp + 8) % 16 == 0 on x86-64 (the call
// pushed 8 bytes onto a 16-aligned sp) and sp % 16 == 0 on aarch64 (bl pushes nothing).
#if defined(__x86_64__)
asm(R"(
        .text
        .globl  corun_test_entry_probe
        .hidden corun_test_entry_probe
        .type   corun_test_entry_probe, %function
corun_test_entry_probe:
        movq    %rsp, 0(%rdi)
        movq    %rbp, 8(%rdi)
        movq    (%rsp), %rax
        movq    %rax, 16(%rdi)
        jmp     corun_test_entry_probe_cont@PLT
        .size   corun_test_entry_probe, .-corun_test_entry_probe
)");
constexpr std::uintptr_t kEntrySpBelowTop = 8;  // the return address the call pushed
#elif defined(__aarch64__)
asm(R"(
        .text
        .globl  corun_test_entry_probe
        .hidden corun_test_entry_probe
        .type   corun_test_entry_probe, %function
corun_test_entry_probe:
        mov     x9, sp
        str     x9, [x0, #0]
        str     x29, [x0, #8]
        str     x30, [x0, #16]
        b       corun_test_entry_probe_cont
        .size   corun_test_entry_probe, .-corun_test_entry_probe
)");
constexpr std::uintptr_t kEntrySpBelowTop = 0;
#endif

namespace {

// ---- the frame-pointer chain, walked as perf -g (and gdb without CFI) walk it -------------

// A frame record is two words at fp: the caller's fp, then the return address. Same layout
// on x86-64 (push rbp; mov rsp, rbp) and aarch64 (stp x29, x30, [sp, #-N]!; mov x29, sp).
struct ChainWalk {
  int frames = 0;                // records visited
  bool in_stack = true;          // every fp inside [lo, hi)
  bool increasing = true;        // every caller's record above its callee's
  std::uintptr_t last_ret = 0;   // return address of the outermost record
  std::uintptr_t outermost = 1;  // the fp the walk ended on (0: a clean end)
};

ChainWalk walk_frames(std::uintptr_t fp, std::uintptr_t lo, std::uintptr_t hi) {
  ChainWalk w;
  std::uintptr_t prev = 0;
  while (fp != 0 && w.frames < 64) {
    if (fp < lo || fp + 16 > hi || fp % 8 != 0) {
      w.in_stack = false;
      break;
    }
    if (fp <= prev) w.increasing = false;
    prev = fp;
    const auto* rec = reinterpret_cast<const std::uintptr_t*>(fp);
    w.last_ret = rec[1];
    fp = rec[0];
    ++w.frames;
  }
  w.outermost = fp;
  return w;
}

struct ChainTest {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int depth = 0;
  ChainWalk running;  // walked by the task itself at the deepest call
};

int g_chain_sink = 0;  // keeps the nested calls from being tail calls

[[gnu::noinline]] void chain_level(ChainTest* t, int level) {
  if (level < t->depth) {
    chain_level(t, level + 1);
    asm volatile("" ::: "memory");
    ++g_chain_sink;
    return;
  }
  const auto fp = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  t->running = walk_frames(fp, reinterpret_cast<std::uintptr_t>(t->self->stack.lo()),
                           reinterpret_cast<std::uintptr_t>(t->self->stack.hi()));
  switch_to(*t->self, *t->main);  // suspended here: main walks the saved chain
  ++g_chain_sink;
}

void chain_entry(void* arg) {
  auto* t = static_cast<ChainTest*>(arg);
  corun::arch::san_after_switch(t->self->san);
  chain_level(t, 1);
  switch_to(*t->self, *t->main, /*from_exiting=*/true);
  __builtin_trap();
}

// The saved frame pointer of a suspended context.
std::uintptr_t saved_fp(const Context& c) {
#if defined(__x86_64__)
  return c.rbp;
#else
  return c.x29;
#endif
}

// ---- floating-point control registers, raw ------------------------------------------------

// The callee-saved FP control state: x86-64 the control bits of MXCSR (the low 6 are sticky
// status flags, caller-saved) and the x87 control word; aarch64 FPCR.
struct FpControl {
  std::uint64_t a = 0;  // MXCSR & 0xFFC0 | FPCR
  std::uint64_t b = 0;  // x87 control word | 0
  bool operator==(const FpControl&) const = default;
};

FpControl read_fp_control() {
  FpControl c;
#if defined(__x86_64__)
  std::uint32_t mxcsr = 0;
  std::uint16_t cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(cw));
  c.a = mxcsr & 0xFFC0u;
  c.b = cw;
#else
  std::uint64_t fpcr = 0;
  asm volatile("mrs %0, fpcr" : "=r"(fpcr));
  c.a = fpcr;
#endif
  return c;
}

void write_fp_control(const FpControl& c) {
#if defined(__x86_64__)
  const auto mxcsr = static_cast<std::uint32_t>(c.a);
  const auto cw = static_cast<std::uint16_t>(c.b);
  asm volatile("ldmxcsr %0" ::"m"(mxcsr));
  asm volatile("fldcw %0" ::"m"(cw));
#else
  asm volatile("msr fpcr, %0" ::"r"(c.a));
#endif
}

// The ABI's initial values (what context_init gives a fresh context).
#if defined(__x86_64__)
constexpr FpControl kFpDefault{0x1F80, 0x037F};
// main: round up, FTZ, DAZ; x87 round down, extended precision.
constexpr FpControl kFpMain{0x1F80 | 0x4000 | 0x8000 | 0x0040, 0x037F | 0x0400};
// task: round toward zero, all exceptions masked; x87 toward zero, double precision.
constexpr FpControl kFpTask{0x1F80 | 0x6000, 0x027F | 0x0C00};
#else
constexpr FpControl kFpDefault{0, 0};
constexpr FpControl kFpMain{(2u << 22) | (1u << 24), 0};  // round to -inf, flush to zero
constexpr FpControl kFpTask{(3u << 22) | (1u << 25), 0};  // round toward zero, default NaN
#endif

struct FpRawTest {
  MainSide* main = nullptr;
  Fiber* self = nullptr;
  int rounds = 0;
  FpControl initial;
  int mismatches = 0;
};

void fp_raw_entry(void* arg) {
  auto* t = static_cast<FpRawTest*>(arg);
  corun::arch::san_after_switch(t->self->san);
  t->initial = read_fp_control();
  write_fp_control(kFpTask);
  for (int r = 0; r < t->rounds; ++r) {
    switch_to(*t->self, *t->main);
    t->mismatches += !(read_fp_control() == kFpTask);
  }
  write_fp_control(kFpDefault);
  switch_to(*t->self, *t->main, /*from_exiting=*/true);
  __builtin_trap();
}
}  // namespace

TEST_SUITE("unit.arch") {
  TEST_CASE("context: ping-pong between the thread and 1..8 contexts") {
    for (int n = 1; n <= 8; ++n) {
      CAPTURE(n);
      MainSide main;
      std::vector<Fiber> fibers(static_cast<std::size_t>(n));
      std::vector<PingPong> pp(static_cast<std::size_t>(n));
      const int rounds = 2000;
      for (int i = 0; i < n; ++i) {
        pp[i] = PingPong{&main, &fibers[i], rounds, 0};
        fibers[i].start(ping_pong_entry, &pp[i]);
      }
      for (int r = 0; r <= rounds; ++r) {
        for (int i = 0; i < n; ++i) switch_to(main, fibers[i]);
      }
      for (int i = 0; i < n; ++i) {
        CHECK(pp[i].count == rounds + 1);
        fibers[i].finish();
      }
    }
  }

  TEST_CASE("context: ring of contexts switching directly to each other") {
    MainSide main;
    std::vector<Fiber> fibers(8);
    std::vector<int> visits(fibers.size(), 0);
    Ring ring{&main, &fibers, &visits, 1000};
    std::vector<RingArg> args(fibers.size());
    for (std::size_t i = 0; i < fibers.size(); ++i) {
      args[i] = RingArg{&ring, i};
      fibers[i].start(ring_entry, &args[i]);
    }
    for (int lap = 0; lap < ring.laps; ++lap) switch_to(main, fibers[0]);
    // Each context now waits in its last switch; resume each once to let it exit.
    for (auto& f : fibers) switch_to(main, f);
    for (std::size_t i = 0; i < fibers.size(); ++i) {
      CHECK(visits[i] == ring.laps);
      fibers[i].finish();
    }
  }

  TEST_CASE("context: entry gets its arg on an aligned stack with an ended frame chain") {
    MainSide main;
    Fiber fiber;
    EntryProbe p;
    p.main = &main;
    p.self = &fiber;
    fiber.start(probe_entry, &p);
    switch_to(main, fiber);
    fiber.finish();
    CHECK(p.seen_arg == &p);
    CHECK(p.aligned_local % 16 == 0);
    CHECK(p.frame_addr % 16 == 0);  // fp = sp right after the frame record push: 16-aligned
    CHECK(p.frame_addr > reinterpret_cast<std::uintptr_t>(fiber.stack.lo()));
    CHECK(p.frame_addr < reinterpret_cast<std::uintptr_t>(fiber.stack.hi()));
    CHECK(p.saved_fp == nullptr);       // frame-pointer chain ends at the trampoline
    CHECK(in_trampoline(p.saved_ret));  // and entry was called by it
    CHECK(std::strcmp(p.formatted, "2.50 3.75") == 0);
    CHECK(p.ld == 3.75L);
    CHECK(p.unwind_rc == _URC_END_OF_STACK);  // CFI: the trampoline is the outermost frame
    CHECK(p.unwind_frames < 16);
    CHECK(in_trampoline(p.unwind_last_ip));
  }

  TEST_CASE("context: callee-saved registers survive switches (assembly check)") {
    MainSide main;
    Fiber fiber;
    RegTest t{&main, &fiber, 500, 0};
    fiber.start(regs_entry, &t);
    switch_to(main, fiber);  // fiber runs up to its first helper switch
    int mismatches = 0;
    for (int r = 0; r < t.rounds; ++r) {
      std::uint64_t vals[kRegVals], out[kRegVals] = {};
      for (int i = 0; i < kRegVals; ++i) vals[i] = reg_pattern(1, r, i);
      corun::arch::san_before_switch(main.san, fiber.san, false);
      corun_test_switch_regs(&main.ctx, &fiber.ctx, vals, out);
      corun::arch::san_after_switch(main.san);
      for (int i = 0; i < kRegsUsed; ++i) mismatches += out[i] != vals[i];
    }
    // main's last helper call resumed the fiber, which then exited back into that call.
    fiber.finish();
    CHECK(mismatches == 0);
    CHECK(t.mismatches == 0);
  }

  TEST_CASE("context: values the compiler keeps in registers survive switches") {
    MainSide main;
    Fiber fiber;
    LiveTest t{&main, &fiber, 1000, 0};
    fiber.start(live_entry, &t);
    int mismatches = 0;
    for (int r = 0; r <= t.rounds; ++r) {
      mismatches += hold_values_across_switch(main, fiber, 7919u * (r + 3));
    }
    fiber.finish();
    CHECK(mismatches == 0);
    CHECK(t.mismatches == 0);
  }

  TEST_CASE("context: floating-point rounding mode is per context") {
    REQUIRE(fegetround() == FE_TONEAREST);
    MainSide main;
    Fiber fiber;
    FpTest t{&main, &fiber, -1, 200, 0, 0};
    fesetround(FE_DOWNWARD);  // must not leak into the fresh context
    const int mine = current_rounding_bits();
    fiber.start(fp_entry, &t);
    int mismatches = 0;
    for (int r = 0; r <= t.rounds; ++r) {
      switch_to(main, fiber);
      mismatches += fegetround() != FE_DOWNWARD;
      mismatches += current_rounding_bits() != mine;
    }
    volatile double down = g_one / g_three;  // volatile: computed before the mode reset
    fesetround(FE_TONEAREST);
    fiber.finish();
    CHECK(t.initial_round == FE_TONEAREST);
    CHECK(mismatches == 0);
    CHECK(t.mismatches == 0);
    CHECK(t.quotient > down);  // the context really computed with its own mode
  }

  TEST_CASE("context: at entry sp is ABI-aligned at the stack top, fp = 0, lr in trampoline") {
    // Exact, from an assembly entry: what the trampoline hands to entry, before any compiled
    // prologue can hide it. Also with a stack top that is not 16-aligned: context_init
    // rounds it down.
    for (std::uintptr_t skew : {0, 8, 5}) {
      CAPTURE(skew);
      MainSide main;
      Fiber fiber;
      EntryRegs e;
      e.main = &main;
      e.self = &fiber;
      corun::arch::san_init_task(fiber.san, fiber.stack.lo(), kStackSize);
      void* hi = static_cast<char*>(fiber.stack.hi()) - skew;
      corun::arch::context_init(&fiber.ctx, fiber.stack.lo(), hi, corun_test_entry_probe, &e);
      switch_to(main, fiber);
      fiber.finish();
      const std::uintptr_t top = reinterpret_cast<std::uintptr_t>(hi) & ~std::uintptr_t{15};
      CHECK((e.sp + kEntrySpBelowTop) % 16 == 0);
      CHECK(e.sp == top - kEntrySpBelowTop);
      CHECK(e.fp == 0);
      CHECK(in_trampoline(e.ra));
    }
  }

  TEST_CASE("context: the frame-pointer chain ends at the trampoline, running and suspended") {
    // What perf record -g does with frame pointers: follow [fp] = caller's fp and [fp + 8] =
    // return address until fp is 0. From a call 5 deep in a task, the walk must stay on the
    // task's stack, climb, and end on the trampoline's return address with fp 0 -- not run
    // into the creator's stack or garbage. Then the same from the suspended context's saved
    // fp, as a debugger or a sampling profiler sees a parked task.
    MainSide main;
    Fiber fiber;
    ChainTest t;
    t.main = &main;
    t.self = &fiber;
    t.depth = 5;
    fiber.start(chain_entry, &t);
    switch_to(main, fiber);  // the task is now suspended 5 calls deep
    const auto lo = reinterpret_cast<std::uintptr_t>(fiber.stack.lo());
    const auto hi = reinterpret_cast<std::uintptr_t>(fiber.stack.hi());
    const ChainWalk parked = walk_frames(saved_fp(fiber.ctx), lo, hi);
    switch_to(main, fiber);  // let it finish
    fiber.finish();

    CHECK(t.running.in_stack);
    CHECK(t.running.increasing);
    CHECK(t.running.outermost == 0);
    CHECK(t.running.frames == t.depth + 1);  // chain_level x depth, then chain_entry
    CHECK(in_trampoline(t.running.last_ret));

    CHECK(parked.in_stack);
    CHECK(parked.increasing);
    CHECK(parked.outermost == 0);
    CHECK(parked.frames >= t.depth + 1);  // + switch_to if it was not inlined
    CHECK(parked.frames <= t.depth + 3);
    CHECK(in_trampoline(parked.last_ret));
  }

  TEST_CASE("context: FP control registers are per context; a fresh one gets the ABI's") {
    // Raw registers, every control bit: x86-64 MXCSR (rounding, FTZ, DAZ, masks) and the x87
    // control word (rounding, precision); aarch64 FPCR (RMode, FZ, DN).
    const FpControl before = read_fp_control();
    REQUIRE(before == kFpDefault);
    MainSide main;
    Fiber fiber;
    FpRawTest t;
    t.main = &main;
    t.self = &fiber;
    t.rounds = 200;
    write_fp_control(kFpMain);  // must not leak into the fresh context
    const bool took = read_fp_control() == kFpMain;
    fiber.start(fp_raw_entry, &t);
    int mismatches = 0;
    for (int r = 0; r <= t.rounds; ++r) {
      switch_to(main, fiber);
      mismatches += !(read_fp_control() == kFpMain);
    }
    write_fp_control(kFpDefault);
    fiber.finish();
    CHECK(took);  // the hardware (or emulator) keeps these bits
    CHECK(t.initial == kFpDefault);
    CHECK(mismatches == 0);
    CHECK(t.mismatches == 0);
    CHECK(read_fp_control() == kFpDefault);
  }

  TEST_CASE("context: a returning entry traps; bad context_init arguments abort") {
    const int ret_status = child_status([] {
      static TestStack stack;
      static Context self, fresh;
      corun::arch::context_init(&fresh, stack.lo(), stack.hi(), returning_entry, nullptr);
      corun::arch::corun_context_switch(&self, &fresh);
    });
    REQUIRE(WIFSIGNALED(ret_status));
    CHECK((WTERMSIG(ret_status) == SIGILL || WTERMSIG(ret_status) == SIGTRAP));

    const int bad_status = child_status([] {
      static char small[64];
      static Context c;
      corun::arch::context_init(&c, small, small + sizeof small, returning_entry, nullptr);
    });
    REQUIRE(WIFSIGNALED(bad_status));
    CHECK(WTERMSIG(bad_status) == SIGABRT);
  }
}
