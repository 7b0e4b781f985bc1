//! `select!`: wait on several receivers (and an optional timeout) in one blocking call.
//!
//! Protocol: check every arm for readiness, starting at a rotating offset so a busy arm
//! cannot starve the others; if none is ready, register the caller's waiter with every arm
//! (an arm that turns out ready during registration ends the round), park, unregister
//! from all, and check again. Registration and readiness are decided under each arm's own
//! lock, so a message that arrives between the check and the park finds the waiter and
//! wakes it (or the park returns at once through the actor's NOTIFIED bit).
//!
//! ```
//! use std::time::Duration;
//! smarm::run(|| {
//!     let (tx, rx) = smarm::channel::channel::<u32>();
//!     let (_stop_tx, stop_rx) = smarm::channel::oneshot::<()>();
//!     smarm::spawn(move || tx.send(1).unwrap());
//!     let got = smarm::select! {
//!         recv(rx) -> v => v.ok(),
//!         recv(stop_rx) -> _ => None,
//!         timeout(Duration::from_secs(10)) => None,
//!     };
//!     assert_eq!(got, Some(1));
//! });
//! ```

use crate::slot_state::WaitKind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crate::runtime::{park_until, Waiter};

/// An opaque handle to a blocked actor or thread, passed to [`Selectable::register`].
#[doc(hidden)]
pub struct SelectWaiter(pub(crate) Waiter);

/// Something `select!` can wait on. Implemented by smarm's receivers; not meant to be
/// implemented outside the crate.
pub trait Selectable {
    /// True if a receive would complete now (a message, or closure).
    fn is_ready(&self) -> bool;
    #[doc(hidden)]
    /// Registers `waiter` to be woken when ready, unless already ready (then returns true
    /// and registers nothing).
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool;
    #[doc(hidden)]
    /// Removes a registration made by `register_waiter`, if still present.
    fn unregister_waiter(&self);
}

/// Rotates the starting arm between calls (fairness). Relaxed: any spread of values will do.
/// The count is hashed before use: actors that select in lock-step draw alternate counts,
/// and a plain `count % n` would hand each of them the same parity forever.
static ROTATE: AtomicUsize = AtomicUsize::new(0);

fn start_arm(n: usize) -> usize {
    let c = ROTATE.fetch_add(1, Ordering::Relaxed) as u64;
    // Fibonacci hashing: the high bits of c * 2^64/phi are well spread for consecutive c.
    ((c.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize) % n
}

/// Waits until one of `arms` is ready or `deadline` passes. Returns the index of a ready arm,
/// or `None` on timeout. Used by [`select!`](crate::select); it takes nothing from the arm,
/// so the caller receives from the one it returns.
///
/// ```
/// use smarm::channel::{channel, select_ready, Selectable};
/// smarm::run(|| {
///     let (_tx1, rx1) = channel::<u32>();
///     let (tx2, rx2) = channel::<u32>();
///     tx2.send(7).unwrap();
///     let arms: [&dyn Selectable; 2] = [&rx1, &rx2];
///     assert_eq!(select_ready(&arms, None), Some(1));
///     assert_eq!(rx2.try_recv(), Ok(7));
///     // Nothing ready and a deadline already passed: a timeout.
///     assert_eq!(select_ready(&arms, Some(std::time::Instant::now())), None);
/// });
/// ```
#[track_caller]
pub fn select_ready(arms: &[&dyn Selectable], deadline: Option<Instant>) -> Option<usize> {
    let n = arms.len();
    if n == 0 {
        while park_until(deadline, WaitKind::Select) {}
        return None;
    }
    let start = start_arm(n);
    let mut timed_out = false;
    loop {
        for k in 0..n {
            let i = (start + k) % n;
            if arms[i].is_ready() {
                return Some(i);
            }
        }
        if timed_out {
            return None;
        }
        let me = SelectWaiter(Waiter::current());
        let mut ready = None;
        let mut registered = 0;
        for k in 0..n {
            let i = (start + k) % n;
            if arms[i].register_waiter(&me) {
                ready = Some(i);
                break;
            }
            registered += 1;
        }
        let unregister = Unregister { arms, start, count: registered };
        if let Some(i) = ready {
            drop(unregister);
            return Some(i);
        }
        // One clock read per park: `park_until` declines once the deadline has passed, and
        // the arms get one last look above.
        timed_out = !park_until(deadline, WaitKind::Select);
        drop(unregister);
    }
}

/// Removes the registrations on return or unwind.
struct Unregister<'a, 'b> {
    arms: &'a [&'b dyn Selectable],
    start: usize,
    count: usize,
}

impl Drop for Unregister<'_, '_> {
    fn drop(&mut self) {
        let n = self.arms.len();
        for k in 0..self.count {
            self.arms[(self.start + k) % n].unregister_waiter();
        }
    }
}

/// Waits on several receivers, and optionally a timeout, in one blocking call.
///
/// Arms:
/// - `recv(rx) -> pattern => body`: `rx` is a channel [`Receiver`](crate::channel::Receiver)
///   (the outcome is `Ok(message)`, or `Err(RecvError)` once that channel is closed and
///   drained), a [`OneshotReceiver`](crate::channel::OneshotReceiver), or a
///   [`Mailbox`](crate::Mailbox) (the outcome is its next [`Envelope`](crate::Envelope):
///   message or signal, oldest first).
/// - `recv_signal() -> pattern => body`: the next [`Signal`](crate::Signal) of the calling
///   plain `spawn` actor, as [`recv_signal`](crate::recv_signal) (an actor with a typed
///   mailbox selects on the mailbox instead: the arm panics there).
/// - `timeout(duration) => body`, last: runs if nothing was ready in time.
///
/// Arms are checked from a rotating start, so one busy receiver cannot starve another.
/// `rx` is evaluated more than once: pass a variable.
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx1, rx1) = smarm::channel::channel::<u32>();
///     let (_tx2, rx2) = smarm::channel::channel::<&str>();
///     tx1.send(7).unwrap();
///     let got = smarm::select! {
///         recv(rx1) -> m => m.unwrap(),
///         recv(rx2) -> _m => 0,
///         timeout(Duration::from_millis(10)) => 99,
///     };
///     assert_eq!(got, 7);
/// });
/// ```
///
/// A channel, a mailbox and the signals of plain actors:
///
/// ```
/// use smarm::{DownReason, Mailbox, Signal};
/// smarm::run(|| {
///     // A plain actor waits for a value or the Down of what it monitors.
///     let (tx, rx) = smarm::channel::channel::<u32>();
///     let watcher = smarm::spawn(move || {
///         smarm::monitor(smarm::spawn(|| ()).pid());
///         smarm::select! {
///             recv(rx) -> v => Err(v),
///             recv_signal() -> s => Ok(s),
///         }
///     });
///     match watcher.join().unwrap() {
///         Ok(Signal::Down(d)) => assert_eq!(d.reason, DownReason::Normal),
///         other => panic!("{other:?}"),
///     }
///     drop(tx);
///
///     // A mailbox actor waits on its mailbox and a channel.
///     let (tx, rx) = smarm::channel::channel::<&str>();
///     let (done_tx, done_rx) = smarm::channel::oneshot();
///     let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
///         let got = smarm::select! {
///             recv(mb) -> e => e.into_msg(),
///             recv(rx) -> _s => None,
///         };
///         done_tx.send(got).unwrap();
///     });
///     a.send(5);
///     assert_eq!(done_rx.recv(), Ok(Some(5)));
///     drop(tx);
/// });
/// ```
#[macro_export]
macro_rules! select {
    ($($arms:tt)+) => {
        $crate::__select_parse!([] $($arms)+)
    };
}

/// Normalises the arms of [`select!`] into `(receiver, pattern, body)` groups.
#[doc(hidden)]
#[macro_export]
macro_rules! __select_parse {
    ([$($arms:tt)*] recv($rx:expr) -> $res:pat => $body:expr , $($rest:tt)*) => {
        $crate::__select_parse!([$($arms)* ($rx, $res, $body)] $($rest)*)
    };
    ([$($arms:tt)*] recv($rx:expr) -> $res:pat => $body:expr) => {
        $crate::__select_parse!([$($arms)* ($rx, $res, $body)])
    };
    ([$($arms:tt)*] recv_signal() -> $res:pat => $body:expr , $($rest:tt)*) => {
        $crate::__select_parse!([$($arms)* ($crate::__signal_box(), $res, $body)] $($rest)*)
    };
    ([$($arms:tt)*] recv_signal() -> $res:pat => $body:expr) => {
        $crate::__select_parse!([$($arms)* ($crate::__signal_box(), $res, $body)])
    };
    ([$($arms:tt)+] timeout($d:expr) => $tbody:expr $(,)?) => {
        $crate::__select_impl!(::core::option::Option::Some($crate::channel::__deadline_after($d)); $($arms)+ ; $tbody)
    };
    ([$($arms:tt)+]) => {
        $crate::__select_impl!(::core::option::Option::None; $($arms)+ ; ::core::unreachable!("select without timeout returned none"))
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __select_impl {
    ($deadline:expr; $( ($rx:expr, $res:pat, $body:expr) )+ ; $tbody:expr) => {{
        let __arms: &[&dyn $crate::channel::Selectable] = &[ $( &$rx ),+ ];
        let __idx = $crate::channel::select_ready(__arms, $deadline);
        #[allow(unused_assignments)]
        'smarm_select: {
            let mut __k = 0usize;
            $(
                if __idx == ::core::option::Option::Some(__k) {
                    let $res = $crate::channel::SelectRecv::select_recv(&$rx);
                    break 'smarm_select $body;
                }
                __k += 1;
            )+
            $tbody
        }
    }};
}

/// `select!`'s timeout as a deadline (a delay too long for `Instant` counts as 100 years).
#[doc(hidden)]
pub fn __deadline_after(d: std::time::Duration) -> Instant {
    crate::timer::deadline_after(Instant::now(), d)
}

/// Completes the receive of a ready `select!` arm.
#[doc(hidden)]
pub trait SelectRecv {
    type Output;
    fn select_recv(&self) -> Self::Output;
}
