//! [`receive!`](macro@crate::receive): Erlang's selective `receive ... after ... end` over a
//! [`Mailbox`](crate::Mailbox), with patterns, guards and a timeout.
//!
//! # How it works
//!
//! The macro is built on the mailbox's selective receive (the park loop of
//! [`Mailbox::recv_match`](crate::Mailbox::recv_match), with a search by value). It looks at the queued envelopes
//! oldest first; for each it tries the arms in order, pattern and guard, *by value* (so a
//! guard sees its bindings as in a `match` on an owned value: `Msg::A(x) if x > 3`), without
//! taking the envelope: a binding is never moved out while the search runs. The first
//! envelope that some arm accepts is taken out of the queue and matched again, by value, by
//! the same arms, whose body then runs (outside the mailbox's lock, in the caller's frame,
//! so `return`, `break` and `?` in a body act on the enclosing function). Envelopes no arm
//! accepts stay queued, in order. If none is queued the caller parks until one arrives,
//! or until the `after` timeout passes (no `after`: it waits for ever).
//!
//! # Invariants and choices
//!
//! - Guards are evaluated while the mailbox is searched (with its lock held) and once more
//!   on the envelope taken: keep them pure and quick, as Erlang requires of guards (which
//!   may not have side effects at all). A guard must not send to the mailbox it guards.
//! - A guard that panics: the panic goes on to the receiving actor, and the envelope being
//!   tested is lost.
//! - Message arms match the message (`Msg::A(x)`); `down(pat)` and `exit(pat)` arms match
//!   the [`Down`](crate::Down) and [`Exit`](crate::Exit) signals of the same mailbox. A `_`
//!   arm matches any *message*, not signals (an Erlang `_` would match both; signals are a
//!   separate kind here).
//! - `after d` with `d` zero polls: it looks at what is queued and runs the `after` body if
//!   nothing matches (Erlang's `after 0`). The timeout counts from the call, not from the
//!   last arrival: messages that arrive and match no arm do not restart it.
//!

/// Selective receive from a [`Mailbox`](crate::Mailbox), as Erlang's `receive`: takes the
/// oldest queued envelope that an arm accepts (pattern and guard), leaves the others
/// queued in order, and evaluates to that arm's body; waits for one if none is queued, at
/// most the `after` timeout if there is one.
///
/// Arms, in order of preference for one envelope (the oldest acceptable envelope wins,
/// whichever arm accepts it):
/// - `pattern if guard => body`: a message; the pattern is over the mailbox's message type.
/// - `down(pattern) if guard => body`: a [`Down`](crate::Down) signal.
/// - `exit(pattern) if guard => body`: an [`Exit`](crate::Exit) signal (trapping actors).
/// - `after duration => body`: last, at most one: runs if nothing acceptable arrived within
///   `duration` (a [`Duration`](std::time::Duration); zero polls).
///
/// Guards are optional, and evaluated more than once (while the mailbox is searched, with
/// its lock held, and again on the envelope taken): keep them quick and free of side
/// effects, as Erlang requires of guards, and never send from one to the same mailbox. A
/// guard that panics loses the envelope it was testing. A `_` arm matches any message, not
/// signals. Bodies run in the caller's frame, outside the lock: `return`, `break`, `?` act
/// on the enclosing function or loop. The `after` timeout counts from the call; envelopes
/// that arrive and match no arm do not restart it.
///
/// ```
/// use std::time::Duration;
/// use smarm::{receive, Mailbox};
///
/// #[derive(Debug)]
/// enum Msg { Job(u32), Stop }
///
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let worker = smarm::spawn_actor(move |mb: Mailbox<Msg>| {
///         let mut done = Vec::new();
///         loop {
///             receive!(mb, {
///                 Msg::Job(n) if n > 3 => done.push(n),
///                 Msg::Stop => break,
///                 after Duration::from_secs(5) => panic!("idle"),
///             });
///         }
///         // Job(1) matched no arm: still queued.
///         let left = receive!(mb, { Msg::Job(n) => n, after Duration::ZERO => 0 });
///         tx.send((done, left)).unwrap();
///     });
///     worker.send(Msg::Job(1));
///     worker.send(Msg::Job(7));
///     worker.send(Msg::Stop);
///     assert_eq!(rx.recv(), Ok((vec![7], 1)));
/// });
/// ```
///
/// Signals and a timeout:
///
/// ```
/// use std::time::Duration;
/// use smarm::{receive, DownReason, Mailbox};
///
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let a = smarm::spawn_actor(move |mb: Mailbox<(u32, &'static str)>| {
///         let child = smarm::spawn(|| ());
///         let m = smarm::monitor(child.pid());
///         // Waits for the Down of that monitor, leaving the messages queued.
///         let why = receive!(mb, { down(d) if d.monitor == m => d.reason });
///         let first = receive!(mb, { (n, s) if n % 2 == 0 => s });
///         let timed_out = receive!(mb, { (9, _) => false, after Duration::from_millis(1) => true });
///         tx.send((why, first, timed_out, mb.len())).unwrap();
///     });
///     a.send((1, "odd"));
///     a.send((2, "even"));
///     assert_eq!(rx.recv(), Ok((DownReason::Normal, "even", true, 1)));
/// });
/// ```
#[macro_export]
macro_rules! receive {
    ($mb:expr, { $($arms:tt)* }) => {
        $crate::__receive_arms!(@mb($mb) @arms[] $($arms)*)
    };
}

/// Parses the arms of [`receive!`] into `{ (pattern) (guard) (body) }` groups.
#[doc(hidden)]
#[macro_export]
macro_rules! __receive_arms {
    (@mb($mb:expr) @arms[$($arms:tt)*] after $d:expr => $tbody:expr $(,)?) => {
        $crate::__receive_impl!($mb; [$($arms)*]; ::core::option::Option::Some($d); $tbody)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*]) => {
        $crate::__receive_impl!($mb; [$($arms)*]; ::core::option::Option::None;
            ::core::unreachable!("smarm::receive!: a receive without `after` returned nothing"))
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] down($p:pat) $(if $g:expr)? => $($rest:tt)*) => {
        $crate::__receive_body!(@mb($mb) @arms[$($arms)*] @pat($crate::Envelope::Down($p)) @guard($($g)?) $($rest)*)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] exit($p:pat) $(if $g:expr)? => $($rest:tt)*) => {
        $crate::__receive_body!(@mb($mb) @arms[$($arms)*] @pat($crate::Envelope::Exit($p)) @guard($($g)?) $($rest)*)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] $p:pat $(if $g:expr)? => $($rest:tt)*) => {
        $crate::__receive_body!(@mb($mb) @arms[$($arms)*] @pat($crate::Envelope::Msg($p)) @guard($($g)?) $($rest)*)
    };
}

/// Parses one arm's body (a block, with or without a comma, or an expression and a comma
/// or the end) and goes on with the next arm.
#[doc(hidden)]
#[macro_export]
macro_rules! __receive_body {
    (@mb($mb:expr) @arms[$($arms:tt)*] @pat($ep:pat) @guard($($g:expr)?) $body:block , $($rest:tt)*) => {
        $crate::__receive_arms!(@mb($mb) @arms[$($arms)* { ($ep) ($($g)?) ($body) }] $($rest)*)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] @pat($ep:pat) @guard($($g:expr)?) $body:block $($rest:tt)*) => {
        $crate::__receive_arms!(@mb($mb) @arms[$($arms)* { ($ep) ($($g)?) ($body) }] $($rest)*)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] @pat($ep:pat) @guard($($g:expr)?) $body:expr , $($rest:tt)*) => {
        $crate::__receive_arms!(@mb($mb) @arms[$($arms)* { ($ep) ($($g)?) ($body) }] $($rest)*)
    };
    (@mb($mb:expr) @arms[$($arms:tt)*] @pat($ep:pat) @guard($($g:expr)?) $body:expr) => {
        $crate::__receive_arms!(@mb($mb) @arms[$($arms)* { ($ep) ($($g)?) ($body) }])
    };
}

/// The expansion of [`receive!`]: the search (each arm's pattern and guard tried on an
/// envelope by value, in arms that are never entered, so nothing is moved out), then the
/// match of the envelope taken.
#[doc(hidden)]
#[macro_export]
macro_rules! __receive_impl {
    ($mb:expr; [ $( { ($ep:pat) ($($g:expr)?) ($body:expr) } )* ]; $timeout:expr; $tbody:expr) => {{
        let __timeout: ::core::option::Option<::core::time::Duration> = $timeout;
        #[allow(unused_variables, unreachable_code, clippy::all)]
        let __taken = ($mb).__receive(__timeout, |__e| {
            let mut __hit = false;
            match __e {
                $( $ep if !__hit && { __hit = true $(&& $g)?; false } => ::core::unreachable!(), )*
                _ => {}
            }
            (__hit, __e)
        });
        match __taken {
            ::core::option::Option::Some(__e) => match __e {
                $( $ep $(if $g)? => $body, )*
                #[allow(unreachable_patterns)]
                _ => ::core::unreachable!("smarm::receive!: a guard changed its verdict between the search and the match"),
            },
            ::core::option::Option::None => $tbody,
        }
    }};
}
