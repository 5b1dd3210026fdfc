// corun arch: user-space context switch (the machine half of a task switch).
//
// What it is: a Context holds exactly the callee-saved state of the platform ABI plus the
// stack pointer and the resume address. corun_context_switch(from, to) stores the running
// state into *from and resumes *to; it returns (into from's caller) only when someone later
// switches back to *from. context_init prepares a fresh Context so that the first switch to it
// calls entry(arg) on the given stack. The assembly is one file per architecture
// (context_x86_64.S, context_aarch64.S); field offsets come from context_offsets.h and are
// static_asserted below.
//
// Invariants:
//  - Registers live in the Context struct, never pushed on the task stack: offsets are
//    checkable, and a fresh stack needs no hand-built frame.
//  - Caller-saved registers are not saved: the switch is an ordinary function call, so the
//    compiler already assumes they are clobbered.
//  - x86-64 saves MXCSR and the x87 control word; aarch64 saves FPCR. The ABIs make their
//    control bits callee-saved, so a task that changes the rounding mode keeps it to itself.
//    A fresh context starts with the ABI's initial values (round-to-nearest, all FP
//    exceptions masked), not with whatever its creator had set.
//  - entry must never return. It ends by switching away for good; a return traps (ud2/brk).
//  - The trampoline that calls entry ends the frame-pointer chain (rbp/x29 = 0) and its CFI
//    marks the return address undefined, so gdb, perf and _Unwind_Backtrace stop there.
//  - No syscalls, no signal mask: the signal mask is per thread and tasks share it.
//  - The switch is not a compiler barrier for other threads; whoever hands a Context to
//    another thread must publish it with release/acquire (the scheduler's queues do).
//
// Rejected:
//  - ucontext (swapcontext): a rt_sigprocmask syscall per switch, ~100x slower.
//  - Pushing registers on the stack (Boost.Context fcontext style): one pointer instead of a
//    struct, but offsets are implicit and the layout of a fresh stack is hand-made.
//  - `jmp` to every saved address on x86-64 (the earlier design): it leaves the leaving
//    task's return address on the return stack buffer, so every `ret` of the resumed task
//    mispredicts; a saved context is now resumed by `ret`, a fresh one by `jmp` (see
//    context_x86_64.S for why and the figures). Neither works under a CET shadow stack,
//    which would need its own switch; the objects are not marked SHSTK/IBT compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "arch/context_offsets.h"

namespace corun::arch {

#if defined(__x86_64__)

// Saved state of a suspended x86-64 context. Touched only by the thread that switches into or
// out of it; handing a suspended Context to another thread needs a release/acquire edge.
struct alignas(16) Context {
  std::uint64_t rbx = 0;
  std::uint64_t rbp = 0;
  std::uint64_t r12 = 0;  // fresh context: entry function
  std::uint64_t r13 = 0;  // fresh context: entry argument
  std::uint64_t r14 = 0;
  std::uint64_t r15 = 0;
  std::uint64_t rsp = 0;
  std::uint64_t rip = 0;         // resume address
  std::uint32_t mxcsr = 0x1F80;  // ABI initial value: round to nearest, exceptions masked
  std::uint16_t fpucw = 0x037F;  // ABI initial value: extended precision, nearest, masked
  std::uint16_t pad0 = 0;
  std::uint64_t pad1 = 0;
};

static_assert(offsetof(Context, rbx) == CORUN_CTX_X64_RBX);
static_assert(offsetof(Context, rbp) == CORUN_CTX_X64_RBP);
static_assert(offsetof(Context, r12) == CORUN_CTX_X64_R12);
static_assert(offsetof(Context, r13) == CORUN_CTX_X64_R13);
static_assert(offsetof(Context, r14) == CORUN_CTX_X64_R14);
static_assert(offsetof(Context, r15) == CORUN_CTX_X64_R15);
static_assert(offsetof(Context, rsp) == CORUN_CTX_X64_RSP);
static_assert(offsetof(Context, rip) == CORUN_CTX_X64_RIP);
static_assert(offsetof(Context, mxcsr) == CORUN_CTX_X64_MXCSR);
static_assert(offsetof(Context, fpucw) == CORUN_CTX_X64_FPUCW);
static_assert(sizeof(Context) == CORUN_CTX_X64_SIZE);

#elif defined(__aarch64__)

// Saved state of a suspended aarch64 context. Same ownership rule as on x86-64.
struct alignas(16) Context {
  std::uint64_t x19 = 0;  // fresh context: entry function
  std::uint64_t x20 = 0;  // fresh context: entry argument
  std::uint64_t x21 = 0;
  std::uint64_t x22 = 0;
  std::uint64_t x23 = 0;
  std::uint64_t x24 = 0;
  std::uint64_t x25 = 0;
  std::uint64_t x26 = 0;
  std::uint64_t x27 = 0;
  std::uint64_t x28 = 0;
  std::uint64_t x29 = 0;  // frame pointer
  std::uint64_t x30 = 0;  // link register = resume address
  std::uint64_t sp = 0;
  std::uint64_t d8 = 0;  // raw bits of d8-d15
  std::uint64_t d9 = 0;
  std::uint64_t d10 = 0;
  std::uint64_t d11 = 0;
  std::uint64_t d12 = 0;
  std::uint64_t d13 = 0;
  std::uint64_t d14 = 0;
  std::uint64_t d15 = 0;
  std::uint64_t fpcr = 0;  // ABI initial value: round to nearest, no traps, no flush-to-zero
};

static_assert(offsetof(Context, x19) == CORUN_CTX_A64_X19);
static_assert(offsetof(Context, x21) == CORUN_CTX_A64_X21);
static_assert(offsetof(Context, x23) == CORUN_CTX_A64_X23);
static_assert(offsetof(Context, x25) == CORUN_CTX_A64_X25);
static_assert(offsetof(Context, x27) == CORUN_CTX_A64_X27);
static_assert(offsetof(Context, x29) == CORUN_CTX_A64_X29);
static_assert(offsetof(Context, x30) == CORUN_CTX_A64_X30);
static_assert(offsetof(Context, sp) == CORUN_CTX_A64_SP);
static_assert(offsetof(Context, d8) == CORUN_CTX_A64_D8);
static_assert(offsetof(Context, d10) == CORUN_CTX_A64_D10);
static_assert(offsetof(Context, d12) == CORUN_CTX_A64_D12);
static_assert(offsetof(Context, d14) == CORUN_CTX_A64_D14);
static_assert(offsetof(Context, fpcr) == CORUN_CTX_A64_FPCR);
static_assert(sizeof(Context) == CORUN_CTX_A64_SIZE);

#else
#error "corun: unsupported architecture; context switching exists for x86-64 and aarch64 only"
#endif

// Saves the callee-saved state of the caller into *from and resumes *to. Returns when another
// switch resumes *from. from and to must differ; *to must be fresh (context_init) or saved by
// an earlier switch and not resumed since. Implemented in context_<arch>.S.
extern "C" void corun_context_switch(Context* from, const Context* to) noexcept;

// First code run by a fresh context: calls entry(arg) with an empty frame chain; traps if
// entry returns. Implemented in context_<arch>.S; never call it directly.
extern "C" void corun_context_trampoline() noexcept;

// Smallest stack context_init accepts. A real task needs far more; this only catches nonsense.
inline constexpr std::size_t kMinContextStack = 256;

// Prepares *ctx so that the first corun_context_switch to it runs entry(arg) on the stack
// [stack_lo, stack_hi) with the ABI's alignment (16 bytes at the call). entry must not return.
// Bad bounds (null, inverted, smaller than kMinContextStack, or no entry) abort with a message:
// this is a runtime bug, not user input.
inline void context_init(Context* ctx, void* stack_lo, void* stack_hi, void (*entry)(void*),
                         void* arg) noexcept {
  const auto lo = reinterpret_cast<std::uintptr_t>(stack_lo);
  const auto hi = reinterpret_cast<std::uintptr_t>(stack_hi);
  if (ctx == nullptr || entry == nullptr || lo == 0 || hi <= lo || hi - lo < kMinContextStack) {
    std::fprintf(stderr,
                 "corun: context_init: bad arguments (ctx=%p entry=%p stack=[%p, %p)); "
                 "need non-null ctx and entry and a stack of at least %zu bytes with lo < hi\n",
                 static_cast<void*>(ctx), reinterpret_cast<void*>(entry), stack_lo, stack_hi,
                 kMinContextStack);
    std::abort();
  }
  *ctx = Context{};
  // Both ABIs want sp 16-byte aligned at a call instruction. The trampoline is entered with
  // this sp and calls entry, so entry sees the same state as after any normal call.
  const std::uintptr_t top = hi & ~std::uintptr_t{15};
  const auto tramp = reinterpret_cast<std::uintptr_t>(&corun_context_trampoline);
#if defined(__x86_64__)
  ctx->rsp = top;
  ctx->rip = tramp;
  ctx->r12 = reinterpret_cast<std::uintptr_t>(entry);
  ctx->r13 = reinterpret_cast<std::uintptr_t>(arg);
  ctx->rbp = 0;  // ends the frame-pointer chain
#else
  ctx->sp = top;
  ctx->x30 = tramp;
  ctx->x19 = reinterpret_cast<std::uintptr_t>(entry);
  ctx->x20 = reinterpret_cast<std::uintptr_t>(arg);
  ctx->x29 = 0;  // ends the frame-pointer chain
#endif
}

// The stack pointer saved in a switched-out context (for overflow checks and debuggers).
inline std::uint64_t context_sp(const Context& c) noexcept {
#if defined(__x86_64__)
  return c.rsp;
#elif defined(__aarch64__)
  return c.sp;
#else
  return 0;
#endif
}

}  // namespace corun::arch
