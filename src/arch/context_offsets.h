/* corun arch: byte offsets of the fields of corun::arch::Context.
 *
 * What it is: the one place that says where each saved register lives inside a Context. Both
 * the assembly (context_x86_64.S, context_aarch64.S) and C++ (context.hpp) include this file;
 * context.hpp static_asserts offsetof(Context, field) == CORUN_CTX_* for every field, so the
 * struct and the assembly cannot drift apart (the marl osfiber_asm.h pattern).
 *
 * Invariants: plain C preprocessor only (no C++, no includes) so the assembler can read it;
 * every offset is a multiple of the field's size; aarch64 register pairs sit at adjacent
 * 8-byte slots so one stp/ldp moves two of them; the struct size is a multiple of 16.
 *
 * Rejected: generating offsets from the C++ struct at build time (asm-offsets style) -- an
 * extra build step for ~20 constants that a static_assert checks just as well.
 */
#ifndef CORUN_ARCH_CONTEXT_OFFSETS_H
#define CORUN_ARCH_CONTEXT_OFFSETS_H

/* x86-64 (System V): callee-saved rbx rbp r12-r15, plus rsp and the resume address, plus the
 * control parts of MXCSR and the x87 control word (the ABI makes both callee-saved). */
#define CORUN_CTX_X64_RBX 0
#define CORUN_CTX_X64_RBP 8
#define CORUN_CTX_X64_R12 16
#define CORUN_CTX_X64_R13 24
#define CORUN_CTX_X64_R14 32
#define CORUN_CTX_X64_R15 40
#define CORUN_CTX_X64_RSP 48
#define CORUN_CTX_X64_RIP 56
#define CORUN_CTX_X64_MXCSR 64 /* 4 bytes */
#define CORUN_CTX_X64_FPUCW 68 /* 2 bytes, then 2 bytes padding */
#define CORUN_CTX_X64_SIZE 80  /* rounded up to 16 */

/* aarch64 (AAPCS64): callee-saved x19-x28, x29 (fp), x30 (lr = resume address), sp, the low
 * 64 bits of v8-v15 (d8-d15), and FPCR (rounding mode etc.; see context_aarch64.S). */
#define CORUN_CTX_A64_X19 0
#define CORUN_CTX_A64_X21 16
#define CORUN_CTX_A64_X23 32
#define CORUN_CTX_A64_X25 48
#define CORUN_CTX_A64_X27 64
#define CORUN_CTX_A64_X29 80 /* x29 at 80, x30 at 88: one stp */
#define CORUN_CTX_A64_X30 88
#define CORUN_CTX_A64_SP 96
#define CORUN_CTX_A64_D8 104
#define CORUN_CTX_A64_D10 120
#define CORUN_CTX_A64_D12 136
#define CORUN_CTX_A64_D14 152
#define CORUN_CTX_A64_FPCR 168
#define CORUN_CTX_A64_SIZE 176

#endif /* CORUN_ARCH_CONTEXT_OFFSETS_H */
