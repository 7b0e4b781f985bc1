// smarm context switch for x86_64 System V (Linux). Intel syntax; included from
// src/context.rs with `global_asm!`, whose default syntax is Intel.
//
// A suspended context (actor or scheduler) is fully described by one stack pointer,
// the *saved sp*. At the saved sp the stack holds, from low to high addresses:
//
//     saved sp + 0   MXCSR (4 bytes) | x87 control word (2 bytes) | 2 bytes unused
//     saved sp + 8   r15
//     saved sp + 16  r14
//     saved sp + 24  r13
//     saved sp + 32  r12
//     saved sp + 40  rbx
//     saved sp + 48  rbp
//     saved sp + 56  return address (where the context resumes)
//
// These are exactly the registers and control state the SysV ABI makes callee-saved:
// rbx, rbp, r12-r15, rsp (implicitly: it *is* the saved sp), the MXCSR control bits and
// the x87 control word. Everything else is caller-saved, so the compiler has already
// spilled whatever it needs across the `call` that brought us here.
//
// Alignment: on entry to a switch function rsp = 8 (mod 16) (the caller's `call` pushed the
// return address onto a 16-aligned stack). Six pushes (48 bytes) and `sub rsp, 8` make the
// saved sp 16-aligned, which the fresh-stack layout in context.rs reproduces.
//
// Both directions share `smarm_restore_and_return`: it reloads the control state (only
// when it differs, see below), pops the six registers and `ret`s. Every switch is thus a
// `call` matched by a `ret`, which keeps the return-address predictor aligned.

    .text

// ---------------------------------------------------------------------------------------
// usize smarm_switch_to_actor(usize target_sp /* rdi */, usize *sched_sp_out /* rsi */)
//
// Scheduler side. Saves the scheduler's context on its own stack, publishes the saved sp
// through `sched_sp_out` (a field of the actor's control block, so the actor knows where to
// return without touching a thread-local), and resumes the context saved at `target_sp`.
// Returns (rax) the actor's new saved sp once the actor switches back.
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
    sub rsp, 8                      // slot for MXCSR + x87 control word
    .cfi_adjust_cfa_offset 8
    stmxcsr [rsp]                   // save MXCSR (control + status bits)
    fnstcw [rsp + 4]                // save x87 control word (no pending-exception check)
    mov [rsi], rsp                  // *sched_sp_out = scheduler's saved sp
    mov rsp, rdi                    // switch stacks: rsp = actor's saved sp
    // From here the CFI above no longer describes the stack we are on; the code below is a
    // shared tail that only pops and returns, so no unwinder ever needs to stop in it.
    jmp smarm_restore_and_return
    .cfi_endproc
    .size smarm_switch_to_actor, . - smarm_switch_to_actor

// ---------------------------------------------------------------------------------------
// void smarm_switch_to_scheduler(usize sched_sp /* rdi */)
//
// Actor side. Saves the actor's context on the actor stack and resumes the scheduler
// saved at `sched_sp`; the scheduler's pending `smarm_switch_to_actor` call then returns
// the actor's saved sp in rax. Returns to the actor when some scheduler thread (maybe
// another one) calls `smarm_switch_to_actor` with that saved sp.
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
    sub rsp, 8
    .cfi_adjust_cfa_offset 8
    stmxcsr [rsp]                   // the actor's floating-point mode travels with it
    fnstcw [rsp + 4]
    mov rax, rsp                    // rax = actor's saved sp: the scheduler's return value
    mov rsp, rdi                    // switch stacks: rsp = scheduler's saved sp
    jmp smarm_restore_and_return
    .cfi_endproc
    .size smarm_switch_to_scheduler, . - smarm_switch_to_scheduler

// ---------------------------------------------------------------------------------------
// Shared tail: rsp points at a saved context (layout above). Restores it and returns into
// it. Clobbers only ecx and edx (caller-saved, not the return register rax).
//
// ldmxcsr and fldcw are microcoded and cost far more than a compare, and the control
// state almost never differs between two contexts, so each is reloaded only when the
// *control* part differs. MXCSR bits 0-5 are sticky exception status flags, which the ABI
// leaves caller-saved; comparing them would reload on nearly every switch after any
// inexact float operation, so they are masked out of the compare (mask 0xFFC0 = DAZ,
// exception masks, rounding control, FZ).
// ---------------------------------------------------------------------------------------
    .p2align 4
    .type smarm_restore_and_return,@function
smarm_restore_and_return:
    stmxcsr [rsp - 8]               // current MXCSR, into the red zone (signal-safe: the
                                    // kernel skips 128 bytes below rsp)
    mov ecx, [rsp - 8]
    xor ecx, [rsp]                  // bits that differ from the saved MXCSR
    test ecx, 0xFFC0                // ... in the control part?
    jnz 2f
1:
    fnstcw [rsp - 8]                // current x87 control word
    movzx ecx, word ptr [rsp - 8]
    movzx edx, word ptr [rsp + 4]   // saved x87 control word
    cmp ecx, edx
    jne 4f
3:
    add rsp, 8                      // drop the control-state slot
    pop r15                         // callee-saved GPRs, reverse of the push order
    pop r14
    pop r13
    pop r12
    pop rbx
    pop rbp
    ret                             // resume at the saved return address
2:
    ldmxcsr [rsp]                   // rare: the two contexts use different FP modes
    jmp 1b
4:
    fldcw [rsp + 4]
    jmp 3b
    .size smarm_restore_and_return, . - smarm_restore_and_return

// ---------------------------------------------------------------------------------------
// First entry of a fresh actor stack. context.rs lays out a fake saved context whose return
// address is this trampoline, with rbx = the entry argument and r12 = the entry function.
// `smarm_restore_and_return` pops them and `ret`s here with rsp 16-aligned, so the `call`
// below enters the entry function with the ABI's alignment.
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
    call r12                        // entry function placed in r12; it never returns
    ud2                             // unreachable: the entry switches away for good
    .cfi_endproc
    .size smarm_actor_trampoline, . - smarm_actor_trampoline
