// smarm context switch for x86_64 System V (Linux). Intel syntax; included from
// src/context.rs with `global_asm!`, whose default syntax is Intel.
//
// A suspended context (actor or scheduler) is fully described by one stack pointer,
// the *saved sp*. At the saved sp the stack holds, from low to high addresses:
//
//     saved sp + 0   r15
//     saved sp + 8   r14
//     saved sp + 16  r13
//     saved sp + 24  r12
//     saved sp + 32  rbx
//     saved sp + 40  rbp
//     saved sp + 48  return address (where the context resumes)
//
// These are the general-purpose registers the SysV ABI makes callee-saved (rsp is the
// saved sp itself). Everything else is caller-saved, so the compiler has already spilled
// whatever it needs across the `call` that brought us here.
//
// The ABI also makes the MXCSR control bits and the x87 control word callee-saved. They
// are handled by the scheduler (src/runtime/worker.rs, helpers in src/context.rs), not
// here: on this machine (AMD Zen 4) `stmxcsr` alone costs ~20 rdtsc ticks, so saving it on
// every switch would cost more than the whole rest of a switch pair. The scheduler reads an
// actor's control state only when the actor leaves the thread's registers to someone else,
// and loads one only when it differs; see "Floating-point control state" in context.rs.
//
// Return-address predictor: both directions end with `pop rcx; jmp rcx`, not `ret`.
// A `ret` here would pop the return-stack-buffer entry pushed by the *other* side's `call`
// (a different stack, a different call site), so every switch would mispredict. Measured
// with benches/switch_cost.rs on this machine: raw switch pair 88 ticks with `ret`,
// 12 ticks with `pop; jmp` (outputs/history.md, finding 2). The indirect jump is predicted
// by the branch target buffer, which learns the resume sites; the `call` into a switch
// leaves one entry on the return stack buffer that no `ret` consumes, which the circular
// buffer simply overwrites.
//
// Unwind info (CFI). A sampling profiler (perf, or a SIGPROF handler calling backtrace(3))
// may interrupt any instruction below and unwind from it, so the CFI must give the right
// CFA (the stack pointer just before the `call` that entered the frame) at every
// instruction, stack switch included. Both switch routines keep one invariant:
//
//     while the return address is on the stack, CFA = rsp + 8 + 8 * (callee-saved
//     registers on the stack), and the return address and every register on the stack
//     are at the offsets of the saved-context layout above (return address at CFA - 8,
//     rbp at CFA - 16, ..., r15 at CFA - 56).
//
// - Pushes (the leaving context): each push adds 8 to the CFA offset and records where
//   the caller's register now lives. The frame described is the leaving context's.
// - The stack switch (`mov rsp, <saved sp>`): the target's saved context has exactly the
//   same layout, so the rules in force (CFA = rsp + 56, registers at CFA - 16 .. - 56)
//   describe the *target's* suspended frame from the next instruction on: an unwinder
//   stopping there walks into the context being resumed, which is where execution goes.
// - Pops (the target's registers): each pop subtracts 8 and restores the register's rule
//   (it holds the target's value again). After `pop rcx` the CFA is rsp itself and the
//   return address is in rcx (`.cfi_register`) until the `jmp`.
//
// So at no instruction does an unwinder read a return address or a register from a slot
// that does not hold one. The fresh-stack trampoline below ends every actor's chain.

    .text

// ---------------------------------------------------------------------------------------
// usize smarm_switch_to_actor(usize target_sp   /* rdi */,
//                              usize *save_sp_out /* rsi */,
//                              usize resume_value /* rdx */)
//
// Saves the running context on its own stack, publishes its saved sp through
// `save_sp_out`, and resumes the context saved at `target_sp` with `resume_value` in rax
// (the resumed context's pending switch call returns it).
//
// Two callers:
// - the scheduler resuming an actor: `save_sp_out` is the actor's `sched_sp` field (so the
//   actor knows where to return without touching a thread-local) and `resume_value` is the
//   scheduler thread's worker. The call returns (rax) the actor's new saved sp once the
//   actor switches back with smarm_switch_to_scheduler.
// - an actor handing the thread directly to another actor (a "hand-off", see
//   src/runtime/worker.rs): `save_sp_out` is the parking actor's own `sp` field and
//   `resume_value` is the same worker (which records the parked actor, whose post-switch
//   bookkeeping the resumed actor then performs). The call returns whatever the context
//   that later resumes this actor passes.
//
// The CFA comments give the CFA rule in force *after* the instruction (see "Unwind info").
// ---------------------------------------------------------------------------------------
    .globl smarm_switch_to_actor
    .hidden smarm_switch_to_actor
    .type smarm_switch_to_actor,@function
    .p2align 4
smarm_switch_to_actor:
    .cfi_startproc                  // CIE rules at entry: CFA = rsp + 8, return address at CFA - 8
    push rbp                        // callee-saved GPRs, in the fixed order drawn above
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 16
    .cfi_offset rbp, -16            // the caller's rbp is at CFA - 16
    push rbx
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 24
    .cfi_offset rbx, -24            // the caller's rbx is at CFA - 24
    push r12
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 32
    .cfi_offset r12, -32            // the caller's r12 is at CFA - 32
    push r13
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 40
    .cfi_offset r13, -40            // the caller's r13 is at CFA - 40
    push r14
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 48
    .cfi_offset r14, -48            // the caller's r14 is at CFA - 48
    push r15
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 56: rsp is now our saved sp
    .cfi_offset r15, -56            // the caller's r15 is at CFA - 56
    mov [rsi], rsp                  // *save_sp_out = our saved sp
    mov rsp, rdi                    // switch stacks: rsp = target's saved sp. The rules in
                                    // force now describe the target's saved context (same
                                    // layout): CFA = rsp + 56, its resume address at CFA - 8
    .globl smarm_switch_to_actor_tail
    .hidden smarm_switch_to_actor_tail
smarm_switch_to_actor_tail:         // (for tests that sample the instruction pointer)
    mov rax, rdx                    // the target's pending switch call returns resume_value
    pop r15                         // target's callee-saved GPRs, reverse of the push order
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 48
    .cfi_restore r15                // r15 holds the target's value again
    pop r14
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 40
    .cfi_restore r14                // r14 holds the target's value again
    pop r13
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 32
    .cfi_restore r13                // r13 holds the target's value again
    pop r12
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 24
    .cfi_restore r12                // r12 holds the target's value again
    pop rbx
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 16
    .cfi_restore rbx                // rbx holds the target's value again
    pop rbp
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 8: only the resume address is left
    .cfi_restore rbp                // rbp holds the target's value again
    pop rcx                         // the target's resume address (or the trampoline's)
    .cfi_adjust_cfa_offset -8       // CFA = rsp: the target's stack as after a `ret`
    .cfi_register rip, rcx          // the return address is in rcx until the jump
    jmp rcx                         // resume it (indirect jump; see "Return-address predictor")
    .globl smarm_switch_to_actor_end
    .hidden smarm_switch_to_actor_end
smarm_switch_to_actor_end:
    .cfi_endproc
    .size smarm_switch_to_actor, . - smarm_switch_to_actor

// ---------------------------------------------------------------------------------------
// usize smarm_switch_to_scheduler(usize sched_sp /* rdi */)
//
// Actor side. Saves the actor's context on the actor stack and resumes the scheduler
// saved at `sched_sp`; the scheduler's pending `smarm_switch_to_actor` call then returns
// the actor's saved sp in rax. Returns to the actor when some context (a scheduler thread,
// maybe another one, or a handing-off actor) calls `smarm_switch_to_actor` with that saved
// sp; the return value is that call's `resume_value`.
//
// CFI exactly as in smarm_switch_to_actor (see there and "Unwind info").
// ---------------------------------------------------------------------------------------
    .globl smarm_switch_to_scheduler
    .hidden smarm_switch_to_scheduler
    .type smarm_switch_to_scheduler,@function
    .p2align 4
smarm_switch_to_scheduler:
    .cfi_startproc                  // CIE rules at entry: CFA = rsp + 8, return address at CFA - 8
    push rbp
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 16
    .cfi_offset rbp, -16            // the actor's rbp is at CFA - 16
    push rbx
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 24
    .cfi_offset rbx, -24            // the actor's rbx is at CFA - 24
    push r12
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 32
    .cfi_offset r12, -32            // the actor's r12 is at CFA - 32
    push r13
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 40
    .cfi_offset r13, -40            // the actor's r13 is at CFA - 40
    push r14
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 48
    .cfi_offset r14, -48            // the actor's r14 is at CFA - 48
    push r15
    .cfi_adjust_cfa_offset 8        // CFA = rsp + 56: rsp is now the actor's saved sp
    .cfi_offset r15, -56            // the actor's r15 is at CFA - 56
    mov rax, rsp                    // rax = actor's saved sp: the scheduler's return value
    mov rsp, rdi                    // switch stacks: rsp = scheduler's saved sp; the rules
                                    // in force now describe the scheduler's saved context
    .globl smarm_switch_to_scheduler_tail
    .hidden smarm_switch_to_scheduler_tail
smarm_switch_to_scheduler_tail:     // (for tests that sample the instruction pointer)
    pop r15                         // scheduler's callee-saved GPRs
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 48
    .cfi_restore r15                // r15 holds the scheduler's value again
    pop r14
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 40
    .cfi_restore r14                // r14 holds the scheduler's value again
    pop r13
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 32
    .cfi_restore r13                // r13 holds the scheduler's value again
    pop r12
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 24
    .cfi_restore r12                // r12 holds the scheduler's value again
    pop rbx
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 16
    .cfi_restore rbx                // rbx holds the scheduler's value again
    pop rbp
    .cfi_adjust_cfa_offset -8       // CFA = rsp + 8: only the resume address is left
    .cfi_restore rbp                // rbp holds the scheduler's value again
    pop rcx                         // the scheduler's resume address
    .cfi_adjust_cfa_offset -8       // CFA = rsp: the scheduler's stack as after a `ret`
    .cfi_register rip, rcx          // the return address is in rcx until the jump
    jmp rcx                         // back into the scheduler's smarm_switch_to_actor call site
    .globl smarm_switch_to_scheduler_end
    .hidden smarm_switch_to_scheduler_end
smarm_switch_to_scheduler_end:
    .cfi_endproc
    .size smarm_switch_to_scheduler, . - smarm_switch_to_scheduler

// ---------------------------------------------------------------------------------------
// First entry of a fresh actor stack. context.rs lays out a fake saved context whose return
// address is `smarm_actor_trampoline_entry`, with rbx = the entry argument and r12 = the
// entry function. The switch pops them and jumps there with rsp 16-aligned, so the `call`
// below enters the entry function with the ABI's alignment.
//
// CFI: `.cfi_undefined rip` declares that this frame has no caller. Unwinders
// (libgcc/libunwind, hence std::backtrace and panics) and debuggers stop here cleanly
// instead of walking into whatever bytes lie above the stack top. An unwinder looks up the
// FDE of a return address at `return address - 1` (the call instruction), so both return
// addresses that point here must have their previous byte inside this FDE: the `call`'s
// (at the `ud2`), and the fake one of a fresh stack, which an unwinder sees when it stops
// in a switch tail that is about to start a fresh actor (hence the `nop` before it).
// ---------------------------------------------------------------------------------------
    .globl smarm_actor_trampoline
    .hidden smarm_actor_trampoline
    .type smarm_actor_trampoline,@function
    .p2align 4
smarm_actor_trampoline:
    .cfi_startproc
    .cfi_undefined rip              // end of the call chain: no return address above us
    nop                             // never executed: the byte before the fake return address
    .globl smarm_actor_trampoline_entry
    .hidden smarm_actor_trampoline_entry
smarm_actor_trampoline_entry:       // the fake return address of a fresh stack
    mov rdi, rbx                    // first argument: the entry argument placed in rbx
    mov rsi, rax                    // second: the resume_value of the switch that got us here
    call r12                        // entry function placed in r12; it never returns
    ud2                             // unreachable: the entry switches away for good
    .globl smarm_actor_trampoline_end
    .hidden smarm_actor_trampoline_end
smarm_actor_trampoline_end:
    .cfi_endproc
    .size smarm_actor_trampoline, . - smarm_actor_trampoline
