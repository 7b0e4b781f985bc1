//! The reply of a `call` made by an actor: written straight into the caller's stack frame.
//!
//! A call made by an actor needs no reply channel. The caller keeps a [`ReplyWait`] (an
//! empty value cell) in its own frame and parks; the request carries a [`ReplySender`]
//! naming that cell, the caller's pid and a per-call number. Replying is one CAS on the
//! caller slot's `reply` word, a move of the value into the cell, a wake by pid and one
//! store: no allocation, no lock, no waiter registration (a wake by pid needs none: a
//! wake that comes before the park makes the park return at once).
//!
//! # The reply word
//!
//! Each slab slot has `reply: AtomicU64 = seq << 3 | state`. `seq` numbers the calls made
//! from the slot and only grows over the slot's life (a new occupant continues from the
//! last value), so a sender of an earlier call, of this actor or of a previous occupant,
//! never matches again. States of the current call:
//!
//! - `WAITING`: the caller waits; the cell is empty.
//! - `WRITING`: a sender won the cell (CAS from `WAITING`) and is moving the value in and
//!   waking the caller. The caller may not leave the call (its cell is being written).
//! - `DONE`: the value is in the cell; the sender is finished with the cell and the word.
//! - `DROPPED`: the sender was dropped without replying (the server died, or dropped a
//!   deferred reply).
//! - `CLOSED`: the caller gave up (timeout, or it unwound); a late reply is discarded.
//!
//! Only the caller starts a call (storing `seq | WAITING` over a finished one) and only
//! the sender's CAS can leave `WAITING` for `WRITING`/`DROPPED`, the caller's CAS for
//! `CLOSED`. Exactly one of them wins the `WAITING` word, so the cell is written at most
//! once and never after the caller left.
//!
//! # Why the wake comes before `DONE`
//!
//! While the word says `WRITING` the caller cannot leave the call, so its actor, its
//! runtime and the slab holding the word are all alive. The sender wakes the caller in
//! that window and publishes `DONE` last; after that store it touches nothing. (Waking
//! after `DONE` could reach into a runtime that the caller's return let finish — a
//! `ReplyTo` may be held by a plain thread.) A caller woken early sees `WRITING` and
//! spins the few instructions until `DONE`.
//!
//! # Lifetime of the word
//!
//! The word lives in the caller runtime's slab, so a sender must not outlive that runtime.
//! A sender used only inside the server actor is safe as long as the server runs in the
//! caller's runtime: a runtime outlives its actors, and a server drops its queued requests
//! (its mailbox) before it ends. So senders are only made for servers of the caller's own
//! runtime, and a sender that leaves the server's control (a deferred reply, which may go to
//! a plain thread) takes a reference to the runtime along ([`ReplySender::runtime`]).
//!
//! Plain OS threads have no slot, and servers of another runtime could outlive the caller's;
//! those calls use a oneshot (see `gen_server::call_with`).

use crate::slot_state::WaitKind;
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;

use crate::runtime::{Shared, WaitLimit};
use crate::slot_state::{Pid, Slot};

const WAITING: u64 = 0;
const WRITING: u64 = 1;
const DONE: u64 = 2;
const DROPPED: u64 = 3;
const CLOSED: u64 = 4;
const STATE_BITS: u32 = 3;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;

fn word(seq: u64, state: u64) -> u64 {
    seq << STATE_BITS | state
}

/// Why a wait for a reply ended without one.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum NoReply {
    /// The limit passed.
    Timeout,
    /// The sender was dropped without replying.
    Dropped,
}

/// The caller's side of one call: the value cell, in the caller's frame. It must not move
/// while its [`ReplySender`] exists (the sender holds its address): keep it in a local and
/// only borrow it.
pub(crate) struct ReplyWait<R> {
    slot: &'static Slot,
    seq: u64,
    value: UnsafeCell<MaybeUninit<R>>,
    /// The value was moved out (or there never was one to take).
    finished: Cell<bool>,
}

impl<R> ReplyWait<R> {
    /// Starts a call of the running actor `slot` (which must be the caller's own slot).
    pub(crate) fn new(slot: &'static Slot) -> ReplyWait<R> {
        // Relaxed: only this actor starts calls on its slot, and its last call is finished
        // (no sender can change the word any more, see the module doc).
        let seq = (slot.reply.load(Ordering::Relaxed) >> STATE_BITS) + 1;
        // Relaxed: the sender learns the call through the request, whose transfer to it (a
        // mailbox push and pop, under a lock) orders this store before its CAS.
        slot.reply.store(word(seq, WAITING), Ordering::Relaxed);
        ReplyWait { slot, seq, value: UnsafeCell::new(MaybeUninit::uninit()), finished: Cell::new(false) }
    }

    /// The sender for this call. Call once, and keep `self` in place until it is gone.
    pub(crate) fn sender(&self, shared: *const Shared, caller: Pid) -> ReplySender<R> {
        ReplySender { slot: self.slot, seq: self.seq, cell: self.value.get(), shared, caller }
    }

    /// Waits for the reply within `limit`, which is left as what remains of it (the caller
    /// may go on to wait for the server's exit within the same limit).
    #[inline(always)]
    #[track_caller]
    pub(crate) fn wait(&self, limit: &mut WaitLimit) -> Result<R, NoReply> {
        loop {
            // Acquire: pairs with the sender's Release store of DONE (the value is in).
            let w = self.slot.reply.load(Ordering::Acquire);
            debug_assert_eq!(w >> STATE_BITS, self.seq, "smarm: reply word of another call");
            match w & STATE_MASK {
                DONE => return Ok(self.take()),
                DROPPED => return Err(NoReply::Dropped),
                // Woken by a sender that has not stored DONE yet (see the module doc).
                WRITING => wait_out_writer(),
                _ => {
                    if limit.park(WaitKind::Call) {
                        return self.close();
                    }
                }
            }
        }
    }

    /// Gives up: the word goes to CLOSED unless a sender got there first.
    fn close(&self) -> Result<R, NoReply> {
        let mut cur = word(self.seq, WAITING);
        loop {
            // Acquire on failure: a DONE we see makes the value readable.
            match self.slot.reply.compare_exchange(cur, word(self.seq, CLOSED), Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return Err(NoReply::Timeout),
                Err(actual) => match actual & STATE_MASK {
                    DONE => return Ok(self.take()),
                    DROPPED => return Err(NoReply::Dropped),
                    // WRITING: the sender is between its CAS and its DONE store; it
                    // cannot block there (no user code, no runtime call).
                    _ => {
                        wait_out_writer();
                        cur = actual;
                    }
                },
            }
        }
    }

    fn take(&self) -> R {
        debug_assert!(!self.finished.get());
        self.finished.set(true);
        // SAFETY: DONE was observed with Acquire: the sender moved a value in and released
        // the cell; it is taken once (`finished`).
        unsafe { (*self.value.get()).assume_init_read() }
    }
}

impl<R> Drop for ReplyWait<R> {
    fn drop(&mut self) {
        if self.finished.get() {
            return;
        }
        // Leaving without a reply (unwinding out of the wait, an error path): the cell must
        // be out of any sender's reach before the frame goes. A word with another seq
        // belongs to a later call made meanwhile (a request's Drop code may call), which
        // finished its own.
        // Relaxed: a DONE seen here is re-read with Acquire by `close`.
        let w = self.slot.reply.load(Ordering::Relaxed);
        if w >> STATE_BITS != self.seq || matches!(w & STATE_MASK, DROPPED | CLOSED) {
            return;
        }
        if let Ok(v) = self.close() {
            drop(v);
        }
    }
}

/// A sender between its CAS and its DONE store is on another thread (the caller runs
/// here); on an overloaded machine its thread may be descheduled, so back off to the OS.
#[cold]
fn wait_out_writer() {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
    std::thread::yield_now();
}

/// The server's side of one call made by an actor: replies into the caller's frame.
pub(crate) struct ReplySender<R> {
    slot: &'static Slot,
    seq: u64,
    cell: *mut MaybeUninit<R>,
    shared: *const Shared,
    caller: Pid,
}

// SAFETY: the cell and the runtime are only reached after winning the WAITING word, which
// proves the caller is still in the call (module doc); a `R: Send` value moves through it.
unsafe impl<R: Send> Send for ReplySender<R> {}

impl<R> ReplySender<R> {
    /// A counted reference to the caller's runtime, to keep its slab alive while this sender
    /// is out of the server's hands (see "Lifetime of the word").
    ///
    /// # Safety
    /// Call from an actor of the caller's runtime (which is therefore alive).
    pub(crate) unsafe fn runtime(&self) -> std::sync::Arc<Shared> {
        // SAFETY: `shared` is the data pointer of the runtime's `Arc` (`Arc::as_ptr` in the
        // worker), alive per the caller's contract; the count taken here is owned by the
        // returned `Arc`.
        unsafe {
            std::sync::Arc::increment_strong_count(self.shared);
            std::sync::Arc::from_raw(self.shared)
        }
    }

    /// Replies; a reply to a caller that gave up is dropped (as OTP discards late replies).
    pub(crate) fn send(self, value: R) {
        let this = std::mem::ManuallyDrop::new(self);
        // Acquire/Release are not needed for the claim itself (the transfer of the request
        // ordered the caller's frame before us); AcqRel keeps the argument local.
        if this
            .slot
            .reply
            .compare_exchange(word(this.seq, WAITING), word(this.seq, WRITING), Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return; // dropped here, outside any lock
        }
        // SAFETY: we won the WAITING word: the caller is in the call, its cell is empty and
        // stays in place until we store DONE; its runtime is alive (module doc).
        unsafe {
            let cell = this.cell;
            (*cell).write(value);
            (*this.shared).wake(this.caller);
        }
        // Release: the value (and everything before the reply) is visible to the caller's
        // Acquire load of DONE. After this store the cell and the runtime may be gone.
        this.slot.reply.store(word(this.seq, DONE), Ordering::Release);
    }
}

impl<R> ReplySender<R> {
    /// A handle on this call that can end it without a reply (see [`CallCancel`]).
    pub(crate) fn call_cancel(&self) -> CallCancel {
        CallCancel { slot: self.slot, seq: self.seq, shared: self.shared, caller: self.caller }
    }
}

impl<R> Drop for ReplySender<R> {
    fn drop(&mut self) {
        // SAFETY: the sender exists, so its caller's runtime is alive (module doc, "Lifetime
        // of the word").
        unsafe { drop_call(self.slot, self.seq, self.shared, self.caller) };
    }
}

/// Tells a waiting caller that no reply will come (the server died or dropped a deferred
/// reply): the word goes from `WAITING` to `DROPPED` and the caller is woken, unless a sender
/// or the caller got the word first (then nothing happens).
///
/// # Safety
/// The caller's runtime (`shared`, and the slab holding `slot`) is alive.
unsafe fn drop_call(slot: &Slot, seq: u64, shared: *const Shared, caller: Pid) {
    // AcqRel: as in `send`; nothing is written but the word.
    if slot.reply.compare_exchange(word(seq, WAITING), word(seq, WRITING), Ordering::AcqRel, Ordering::Relaxed).is_ok()
    {
        // SAFETY: as in `send`: the caller cannot leave before the word leaves WRITING; its
        // runtime is alive per our contract.
        unsafe { (*shared).wake(caller) };
        // Release: the caller's Acquire load sees the final state.
        slot.reply.store(word(seq, DROPPED), Ordering::Release);
    }
}

/// A second way to end one call, held by the server while a deferred reply's
/// [`ReplySender`] is elsewhere: when the server ends, it ends the call (`DROPPED`, as a
/// dropped sender does), so the caller fails at once instead of waiting for the holder of the
/// reply (SEMANTICS.md, gen_server: the call monitors the server). The word decides between
/// it and the sender, as between any two parties: the first to leave `WAITING` wins, the
/// other does nothing.
///
/// It names no value cell, only the word, so it is not generic; it is not `Send`: it stays
/// in the server actor, which keeps the caller's runtime alive (see [`CallCancel::cancel`]).
pub(crate) struct CallCancel {
    slot: &'static Slot,
    seq: u64,
    shared: *const Shared,
    caller: Pid,
}

impl CallCancel {
    /// True while the call waits for its reply (no reply, drop or give-up yet).
    pub(crate) fn is_pending(&self) -> bool {
        // Relaxed: a hint for pruning; a stale `WAITING` only keeps the entry a while longer.
        self.slot.reply.load(Ordering::Relaxed) == word(self.seq, WAITING)
    }

    /// Ends the call without a reply if it still waits.
    ///
    /// # Safety
    /// Call from an actor of the caller's runtime (the server that made this handle: the
    /// runtime outlives its actors), so `shared` and the slab are alive.
    pub(crate) unsafe fn cancel(&self) {
        // SAFETY: the runtime is alive per our contract.
        unsafe { drop_call(self.slot, self.seq, self.shared, self.caller) };
    }
}
