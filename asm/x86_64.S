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
// ---------------------------------------------------------------------------------------
    .globl smarm_switch_to_actor
    .hidden smarm_switch_to_actor
    .type smarm_switch_to_actor,@function
    .p2align 4
smarm_switch_to_actor:
    .cfi_startproc
    push rbp                        // callee-saved GPRs, in the fixed order drawn above
    .cfi_adjust_cfa_offset 8
    push rbx
    .cfi_adjust_cfa_offset 8
    push r12
    .cfi_adjust_cfa_offset 8
    push r13
    .cfi_adjust_cfa_offset 8
    push r14
    .cfi_adjust_cfa_offset 8
    push r15
    .cfi_adjust_cfa_offset 8
    mov [rsi], rsp                  // *save_sp_out = our saved sp
    mov rsp, rdi                    // switch stacks: rsp = target's saved sp
    mov rax, rdx                    // the target's pending switch call returns resume_value
    // From here the CFI above no longer describes the stack we are on; the tail only pops
    // and returns, so no unwinder ever needs to stop in it.
    pop r15                         // actor's callee-saved GPRs, reverse of the push order
    pop r14
    pop r13
    pop r12
    pop rbx
    pop rbp
    pop rcx                         // the actor's resume address (or the trampoline)
    jmp rcx                         // resume it (indirect jump; see "Return-address predictor")
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
// ---------------------------------------------------------------------------------------
    .globl smarm_switch_to_scheduler
    .hidden smarm_switch_to_scheduler
    .type smarm_switch_to_scheduler,@function
    .p2align 4
smarm_switch_to_scheduler:
    .cfi_startproc
    push rbp
    .cfi_adjust_cfa_offset 8
    push rbx
    .cfi_adjust_cfa_offset 8
    push r12
    .cfi_adjust_cfa_offset 8
    push r13
    .cfi_adjust_cfa_offset 8
    push r14
    .cfi_adjust_cfa_offset 8
    push r15
    .cfi_adjust_cfa_offset 8
    mov rax, rsp                    // rax = actor's saved sp: the scheduler's return value
    mov rsp, rdi                    // switch stacks: rsp = scheduler's saved sp
    pop r15                         // scheduler's callee-saved GPRs
    pop r14
    pop r13
    pop r12
    pop rbx
    pop rbp
    pop rcx                         // the scheduler's resume address
    jmp rcx                         // back into the scheduler's smarm_switch_to_actor call site
    .cfi_endproc
    .size smarm_switch_to_scheduler, . - smarm_switch_to_scheduler

// ---------------------------------------------------------------------------------------
// First entry of a fresh actor stack. context.rs lays out a fake saved context whose return
// address is this trampoline, with rbx = the entry argument and r12 = the entry function.
// The switch pops them and jumps here with rsp 16-aligned, so the `call` below enters the
// entry function with the ABI's alignment.
//
// CFI: `.cfi_undefined rip` declares that this frame has no caller. Unwinders
// (libgcc/libunwind, hence std::backtrace and panics) and debuggers stop here cleanly
// instead of walking into whatever bytes lie above the stack top. The return address the
// `call` pushes points inside this FDE's range (at the `ud2`), so the lookup finds it.
// ---------------------------------------------------------------------------------------
    .globl smarm_actor_trampoline
    .hidden smarm_actor_trampoline
    .type smarm_actor_trampoline,@function
    .p2align 4
smarm_actor_trampoline:
    .cfi_startproc
    .cfi_undefined rip              // end of the call chain: no return address above us
    mov rdi, rbx                    // first argument: the entry argument placed in rbx
    mov rsi, rax                    // second: the resume_value of the switch that got us here
    call r12                        // entry function placed in r12; it never returns
    ud2                             // unreachable: the entry switches away for good
    .cfi_endproc
    .size smarm_actor_trampoline, . - smarm_actor_trampoline
