//! Actor-local storage: values that belong to one actor and follow it from thread to thread
//! ([`actor_local!`](crate::actor_local!)), the sound replacement for `thread_local!` in code
//! that blocks (see "Soundness contract" in the crate docs).
//!
//! # Where the values live
//!
//! - An actor's values hang off its control block, in the scheduler's per-actor store
//!   (`runtime::locals`, whose invariants make the `&T` of [`LocalKey::with`] valid across
//!   blocking calls and reentrant access sound). Every access finds the running actor afresh
//!   through the runtime's out-of-line thread-local accessor; nothing of the thread is kept.
//! - Off an actor (a plain thread, or the thread that called `Runtime::run` before and
//!   after) the same kind of store lives in a real `thread_local!` of the OS thread,
//!   destroyed when the thread exits. That path is taken only when no actor runs on the
//!   thread, so no actor stack ever uses a thread-local address across a switch.
//! - A key's id is assigned once, from a global counter, at its first use. Only the key's
//!   own initialiser makes values under its id, so the value under an id is always a `T`.
//!
//! # Example
//!
//! A per-actor request counter: each actor sees its own value, across blocking calls and
//! thread migrations.
//!
//! ```
//! use std::cell::Cell;
//! smarm::actor_local! { static SEEN: Cell<u32> = Cell::new(0); }
//!
//! smarm::run(|| {
//!     let hs: Vec<_> = (0..4)
//!         .map(|_| smarm::spawn(|| {
//!             for _ in 0..10 {
//!                 SEEN.with(|c| c.set(c.get() + 1));
//!                 smarm::yield_now(); // may resume on another thread: the value follows
//!             }
//!             SEEN.with(Cell::get)
//!         }))
//!         .collect();
//!     for h in hs {
//!         assert_eq!(h.join(), Ok(10));
//!     }
//! });
//! ```

use std::any::Any;
use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use crate::runtime::locals::AccessError;
use crate::runtime::locals::{current_store, destroy, get_or_init, ActorLocals};

/// Declares actor-local keys: each actor that accesses one gets its own value, created by
/// the initialiser on its first access and dropped when the actor ends (on the actor's own
/// stack, before monitors, links and [`JoinHandle::join`](crate::JoinHandle::join) learn
/// that it ended). The value follows the actor to whichever scheduler thread runs it.
///
/// Syntax as for `std::thread_local!`; access is through [`LocalKey::with`].
///
/// ```
/// use std::cell::RefCell;
///
/// smarm::actor_local! {
///     static SEEN: RefCell<Vec<u32>> = RefCell::new(Vec::new());
/// }
///
/// smarm::run(|| {
///     let h = smarm::spawn(|| {
///         SEEN.with(|s| s.borrow_mut().push(1));
///         smarm::yield_now(); // may resume on another thread: the value comes along
///         SEEN.with(|s| s.borrow().clone())
///     });
///     assert_eq!(h.join().unwrap(), vec![1]);
///     SEEN.with(|s| assert!(s.borrow().is_empty(), "the root actor has its own value"));
/// });
/// ```
///
/// Off an actor (a plain thread) a key has one value per OS thread, like a `thread_local!`.
#[macro_export]
macro_rules! actor_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $crate::actor_local!($(#[$attr])* $vis static $name: $t = $init);
        $crate::actor_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $(#[$attr])* $vis static $name: $crate::actor_local::LocalKey<$t> = {
            fn __smarm_actor_local_init() -> $t {
                $init
            }
            $crate::actor_local::LocalKey::__new(__smarm_actor_local_init)
        };
    };
}

/// A key declared with [`actor_local!`](crate::actor_local!): one value per actor.
pub struct LocalKey<T: 'static> {
    /// The key's id in the storage lists; 0 until first use.
    id: AtomicUsize,
    init: fn() -> T,
    /// `T` is only created and borrowed through the key, never sent: the key is `Sync`
    /// whatever `T` is, like `std::thread::LocalKey`.
    _t: PhantomData<fn() -> T>,
}

impl<T: 'static> LocalKey<T> {
    /// Used by [`actor_local!`](crate::actor_local!); not a stable API.
    #[doc(hidden)]
    pub const fn __new(init: fn() -> T) -> LocalKey<T> {
        LocalKey { id: AtomicUsize::new(0), init, _t: PhantomData }
    }

    /// Calls `f` with the calling actor's value (created by the initialiser first if this
    /// actor has none yet). Off an actor the value is the calling OS thread's.
    ///
    /// `f` may block: the reference stays valid and stays this actor's, whichever thread
    /// the actor resumes on. A `with` of the same key inside `f` sees the same value (both
    /// are shared references: use a `Cell` or `RefCell` to mutate).
    ///
    /// # Panics
    /// When [`LocalKey::try_with`] fails: from a destructor of an actor-local value while its
    /// actor ends, or from a `thread_local!` destructor off an actor.
    ///
    /// ```
    /// use std::cell::Cell;
    /// smarm::actor_local! { static HITS: Cell<u32> = Cell::new(0); }
    ///
    /// smarm::run(|| {
    ///     HITS.with(|h| h.set(h.get() + 1));
    ///     assert_eq!(HITS.with(Cell::get), 1);
    /// });
    /// ```
    pub fn with<F, R>(&'static self, f: F) -> R
    where
        F: FnOnce(&T) -> R,
    {
        match self.try_with(f) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`LocalKey::with`], or an error (without calling `f`) if the storage is gone: while
    /// the calling actor's values are dropped at its end, and afterwards; off an actor,
    /// while the OS thread's thread-locals are destroyed.
    ///
    /// ```
    /// use std::cell::Cell;
    /// smarm::actor_local! { static N: Cell<u8> = Cell::new(7); }
    ///
    /// smarm::run(|| assert_eq!(N.try_with(Cell::get), Ok(7)));
    /// ```
    pub fn try_with<F, R>(&'static self, f: F) -> Result<R, AccessError>
    where
        F: FnOnce(&T) -> R,
    {
        let value = self.value()?;
        // SAFETY: boxed in the running actor's (or this thread's) store, dropped only at its
        // end, after every `with` returned (`runtime::locals`, invariants 2, 4); only shared.
        Ok(f(unsafe { &*value }))
    }

    /// The caller's value, created if needed.
    fn value(&'static self) -> Result<*const T, AccessError> {
        let id = self.id();
        let init = || Box::new((self.init)()) as Box<dyn Any>;
        let value = match current_store() {
            // SAFETY: the running actor's store (it is us), valid until the actor ends.
            Some(store) => unsafe { get_or_init(store, id, &init) },
            None => thread_value(id, &init),
        }?;
        // SAFETY: as in `try_with`.
        debug_assert!(unsafe { &*value }.is::<T>(), "smarm: actor-local id {id} holds another type");
        // Only this key's initialiser makes values under its id, so the value is a `T`.
        Ok(value as *const T)
    }

    /// The key's id, assigned on first use.
    #[inline]
    fn id(&self) -> usize {
        // Relaxed: the id is the only data; it is written once (the CAS below), so every
        // read returns 0 or the final id, and a reader of 0 learns the final id from its CAS.
        match self.id.load(Ordering::Relaxed) {
            0 => self.assign_id(),
            id => id,
        }
    }

    #[cold]
    fn assign_id(&self) -> usize {
        /// The next key id; 0 means "unassigned".
        static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
        // Relaxed: only uniqueness matters, which the RMW gives.
        let fresh = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // Relaxed: as in `id`.
        match self.id.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => fresh,
            Err(winner) => winner,
        }
    }
}

impl<T: 'static> fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

/// An OS thread's store (off an actor), destroyed with the thread's thread-locals.
struct ThreadStore(UnsafeCell<ActorLocals>);

impl Drop for ThreadStore {
    fn drop(&mut self) {
        // SAFETY: the store is being dropped: no `with` can reach it any more (std refuses
        // access to a thread-local during its destruction).
        unsafe { destroy(self.0.get()) };
    }
}

thread_local! {
    static THREAD_STORE: ThreadStore = const { ThreadStore(UnsafeCell::new(ActorLocals::NONE)) };
}

/// The calling OS thread's value of `id` (off an actor; see the module doc).
#[cold]
#[inline(never)]
fn thread_value(id: usize, init: &dyn Fn() -> Box<dyn Any>) -> Result<*const dyn Any, AccessError> {
    THREAD_STORE
        // SAFETY: this thread's store, alive until the thread's end; only this thread
        // accesses it, through this module.
        .try_with(|s| unsafe { get_or_init(s.0.get(), id, init) })
        .map_err(|_| AccessError)?
}
