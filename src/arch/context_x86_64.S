/* corun arch: x86-64 (System V) context switch and fresh-context trampoline.
 *
 * What it is: corun_context_switch(from=%rdi, to=%rsi) stores rbx rbp r12-r15, the caller's
 * rsp and return address, MXCSR and the x87 control word into *from, loads the same from *to,
 * and resumes at to->rip. corun_context_trampoline is the first code of a fresh context (see
 * context_init in context.hpp): it calls entry=%r12 with arg=%r13 and traps if entry returns.
 *
 * Invariants: offsets come from context_offsets.h (static_asserted in context.hpp). The switch
 * touches only caller-saved scratch (%rax, %rcx) besides what it restores. A saved rsp is the
 * value the caller has after `call` returns, so resuming is "return to the saved address with
 * that rsp".
 *
 * How it resumes, for the branch predictor: a saved context by `push rip; ret`, a fresh one
 * (rip is the trampoline) by `jmp`. The `call` into this function pushed the leaving task's
 * return address on the return stack buffer; `ret` pops it as its prediction, and every
 * `ret` of the resumed task after it pops the leaving task's next one. Two tasks parked
 * through the same code (a channel hand-off: both in recv/send -> park -> switch) have the
 * same return addresses, so each is predicted. A `jmp` leaves that entry on the buffer and
 * every later `ret` of the resumed task is checked against the frame one deeper than its
 * own: all mispredicted (~6.7 ns each here). Measured at 1 P, old jmp / new, n=5, 100 ms:
 * ChanProdCons0 -19.8%, Chain -22%, ChainBuf -22%, Sieve -15%, PingPongHog -13.6%
 * (p <= 0.016); ChanSync -23% (p=0.095; -14% and -16%, p <= 0.008, in two runs with `ret`
 * for fresh contexts too); Yield ~ (its two loops differ, one miss either way).
 * A fresh context has no frame to return to: `ret` there missed once per task
 * (CreateTasks +38%), while the `jmp`'s single target is learnt; hence the test.
 *
 * Rejected: `jmp` for every resume (the above); saving all of MXCSR's status flags
 * separately -- stmxcsr stores control and flags together and flags are caller-saved, so
 * carrying them is harmless. Unconditional ldmxcsr/fldcw: they serialise the FP pipeline,
 * ~8 ns per switch; the loads are skipped when the control state is unchanged (see below).
 * A CET shadow stack (not enabled for corun: this file carries no SHSTK property note) would
 * need its own switch (rstorssp) whichever way the resume branches.
 *
 * Compiles to nothing on other architectures so the build can list both .S files.
 */
#if defined(__x86_64__)

#include "context_offsets.h"

        .text

/* void corun_context_switch(Context* from, const Context* to) */
        .globl  corun_context_switch
        .type   corun_context_switch, %function
        .p2align 4
corun_context_switch:
        .cfi_startproc
        /* save into *from (%rdi) */
        movq    %rbx, CORUN_CTX_X64_RBX(%rdi)
        movq    %rbp, CORUN_CTX_X64_RBP(%rdi)
        movq    %r12, CORUN_CTX_X64_R12(%rdi)
        movq    %r13, CORUN_CTX_X64_R13(%rdi)
        movq    %r14, CORUN_CTX_X64_R14(%rdi)
        movq    %r15, CORUN_CTX_X64_R15(%rdi)
        movq    (%rsp), %rax                    /* return address */
        movq    %rax, CORUN_CTX_X64_RIP(%rdi)
        leaq    8(%rsp), %rax                   /* rsp after our return */
        movq    %rax, CORUN_CTX_X64_RSP(%rdi)
        stmxcsr CORUN_CTX_X64_MXCSR(%rdi)
        fnstcw  CORUN_CTX_X64_FPUCW(%rdi)

        /* load from *to (%rsi) */
        movq    CORUN_CTX_X64_RBX(%rsi), %rbx
        movq    CORUN_CTX_X64_RBP(%rsi), %rbp
        movq    CORUN_CTX_X64_R12(%rsi), %r12
        movq    CORUN_CTX_X64_R13(%rsi), %r13
        movq    CORUN_CTX_X64_R14(%rsi), %r14
        movq    CORUN_CTX_X64_R15(%rsi), %r15
        /* Reload the FP control state only if its control bits differ (they almost never
         * do: a task that changed its rounding mode). ldmxcsr/fldcw serialise the FP
         * pipeline, a cost on every channel hand-off. MXCSR bits 0-5 are the sticky status
         * flags, which the ABI does not preserve: set by any inexact operation, they must
         * not force a load. */
        movl    CORUN_CTX_X64_MXCSR(%rsi), %eax
        xorl    CORUN_CTX_X64_MXCSR(%rdi), %eax
        testl   $0xffc0, %eax
        jz      1f
        ldmxcsr CORUN_CTX_X64_MXCSR(%rsi)
1:
        movzwl  CORUN_CTX_X64_FPUCW(%rsi), %eax
        cmpw    CORUN_CTX_X64_FPUCW(%rdi), %ax
        je      2f
        fldcw   CORUN_CTX_X64_FPUCW(%rsi)
2:
        movq    CORUN_CTX_X64_RSP(%rsi), %rsp
        movq    CORUN_CTX_X64_RIP(%rsi), %rax
        leaq    .Lfresh_context(%rip), %rcx     /* local label: no GOT in a shared build */
        cmpq    %rcx, %rax
        je      3f
        pushq   %rax                            /* a saved context: return to it, so the */
        ret                                     /* return stack buffer stays in step */
3:      jmpq    *%rax                           /* a fresh one: the trampoline */
        .cfi_endproc
        .size   corun_context_switch, .-corun_context_switch

/* First code of a fresh context. Entered by the jmp above with rsp 16-byte aligned,
 * %r12 = entry, %r13 = arg, %rbp = 0. The CFI says "no caller": unwinders stop here. */
        .globl  corun_context_trampoline
        .type   corun_context_trampoline, %function
        .p2align 4
corun_context_trampoline:
.Lfresh_context:
        .cfi_startproc
        .cfi_undefined rip
        xorl    %ebp, %ebp                      /* end of the frame-pointer chain */
        movq    %r13, %rdi
        callq   *%r12                           /* rsp % 16 == 0 here, as the ABI wants */
        ud2                                     /* entry returned: a bug; trap loudly */
        .cfi_endproc
        .size   corun_context_trampoline, .-corun_context_trampoline

#endif /* __x86_64__ */

        .section .note.GNU-stack,"",%progbits
