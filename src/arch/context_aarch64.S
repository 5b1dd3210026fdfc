/* corun arch: aarch64 (AAPCS64) context switch and fresh-context trampoline.
 *
 * What it is: corun_context_switch(from=x0, to=x1) stores x19-x28, x29 (fp), x30 (lr), sp,
 * d8-d15 and FPCR into *from, loads the same from *to and returns through the loaded x30.
 * corun_context_trampoline is the first code of a fresh context (see context_init in
 * context.hpp): it calls entry=x19 with arg=x20 and traps if entry returns.
 *
 * Invariants: offsets come from context_offsets.h (static_asserted in context.hpp). Only x9
 * and x10 (caller-saved scratch) are used besides the restored registers. sp stays 16-byte
 * aligned at every instruction (the hardware checks it). Resuming is `ret` to the saved x30:
 * on aarch64 `ret` is an ordinary indirect branch (no shadow stack), and it is not subject to
 * BTI landing-pad checks.
 *
 * FPCR: AAPCS64 makes its rounding-mode and similar control bits callee-saved, so a task that
 * changes the rounding mode must not leak it to other tasks on the thread (x86-64 saves MXCSR
 * for the same reason). A write to FPCR can be self-synchronising on some cores, so it is
 * written only when the incoming value differs from the current one; the read is cheap.
 * Rejected: not saving FPCR at all (what Boost.Context and marl do) -- faster by a compare,
 * but fesetround() in one task would then change its neighbours' arithmetic.
 *
 * Compiles to nothing on other architectures so the build can list both .S files.
 */
#if defined(__aarch64__)

#include "context_offsets.h"

        .text

/* void corun_context_switch(Context* from, const Context* to) */
        .globl  corun_context_switch
        .type   corun_context_switch, %function
        .p2align 4
corun_context_switch:
        .cfi_startproc
        /* save into *from (x0) */
        stp     x19, x20, [x0, #CORUN_CTX_A64_X19]
        stp     x21, x22, [x0, #CORUN_CTX_A64_X21]
        stp     x23, x24, [x0, #CORUN_CTX_A64_X23]
        stp     x25, x26, [x0, #CORUN_CTX_A64_X25]
        stp     x27, x28, [x0, #CORUN_CTX_A64_X27]
        stp     x29, x30, [x0, #CORUN_CTX_A64_X29]
        mov     x9, sp
        str     x9, [x0, #CORUN_CTX_A64_SP]
        stp     d8, d9, [x0, #CORUN_CTX_A64_D8]
        stp     d10, d11, [x0, #CORUN_CTX_A64_D10]
        stp     d12, d13, [x0, #CORUN_CTX_A64_D12]
        stp     d14, d15, [x0, #CORUN_CTX_A64_D14]
        mrs     x9, fpcr
        str     x9, [x0, #CORUN_CTX_A64_FPCR]

        /* load from *to (x1) */
        ldp     x19, x20, [x1, #CORUN_CTX_A64_X19]
        ldp     x21, x22, [x1, #CORUN_CTX_A64_X21]
        ldp     x23, x24, [x1, #CORUN_CTX_A64_X23]
        ldp     x25, x26, [x1, #CORUN_CTX_A64_X25]
        ldp     x27, x28, [x1, #CORUN_CTX_A64_X27]
        ldp     x29, x30, [x1, #CORUN_CTX_A64_X29]
        ldp     d8, d9, [x1, #CORUN_CTX_A64_D8]
        ldp     d10, d11, [x1, #CORUN_CTX_A64_D10]
        ldp     d12, d13, [x1, #CORUN_CTX_A64_D12]
        ldp     d14, d15, [x1, #CORUN_CTX_A64_D14]
        ldr     x10, [x1, #CORUN_CTX_A64_FPCR]
        cmp     x9, x10                         /* x9 = current FPCR */
        b.eq    1f
        msr     fpcr, x10
1:
        ldr     x9, [x1, #CORUN_CTX_A64_SP]
        mov     sp, x9
        ret                                     /* to the loaded x30 */
        .cfi_endproc
        .size   corun_context_switch, .-corun_context_switch

/* First code of a fresh context. Entered by the ret above with sp 16-byte aligned,
 * x19 = entry, x20 = arg, x29 = 0. The CFI says "no caller": unwinders stop here. */
        .globl  corun_context_trampoline
        .type   corun_context_trampoline, %function
        .p2align 4
corun_context_trampoline:
        .cfi_startproc
        .cfi_undefined x30
        mov     x29, #0                         /* end of the frame-pointer chain */
        mov     x30, #0
        mov     x0, x20
        blr     x19
        brk     #0x3c                           /* entry returned: a bug; trap loudly */
        .cfi_endproc
        .size   corun_context_trampoline, .-corun_context_trampoline

#endif /* __aarch64__ */

        .section .note.GNU-stack,"",%progbits
