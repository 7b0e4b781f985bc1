//! A per-scheduler-thread cache of small blocks (64, 128 and 256 bytes) for the short-lived
//! cells of a request and its reply and for spawned tasks, freed from any thread.
//!
//! Blocks often die on another thread than the one that made them (a task is allocated by
//! its spawner and freed where the actor ended; a call's reply cell by the caller and the
//! server), so each thread's cache would fill on one side and run dry on the other, as
//! glibc's tcache does. As in Bonwick's magazine allocator (and Go's `mcache`/`mcentral`),
//! a cache that fills gives its colder half to a process-wide depot as one chain, and a
//! cache that runs dry takes a whole chain from it: one lock per [`CHAIN`] blocks instead of
//! a malloc or free of memory another thread's arena owns (glibc then takes that arena's
//! lock, and with the spawner on one thread and its actors on another those locks were
//! about a fifth of a spawn: history 60).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::worker::current_worker;

/// Size classes of the per-thread block cache (bytes; every block is 16-byte aligned).
const BLOCK_CLASSES: [usize; 3] = [64, 128, 256];
/// Blocks kept per class and thread; at this many, a free first moves the colder half
/// ([`CHAIN`] blocks) to the depot.
const BLOCK_CACHE_MAX: u32 = 2 * CHAIN;
/// Blocks per chain in the depot.
const CHAIN: u32 = 32;
/// Chains the depot keeps per class (2,048 blocks: at most 0.9 MiB over the three
/// classes); a chain beyond goes back to the global allocator.
const DEPOT_MAX: usize = 64;

/// Up to [`DEPOT_MAX`] chains of free blocks of one class, each linked through its blocks'
/// first words. A fixed array: handing blocks back never allocates.
struct Chains {
    heads: [*mut u8; DEPOT_MAX],
    len: usize,
}

// SAFETY: the chains' blocks are free memory that nothing else references; whoever holds
// the `Chains` (under the depot's lock) owns them.
unsafe impl Send for Chains {}

impl Chains {
    fn pop(&mut self) -> Option<*mut u8> {
        self.len = self.len.checked_sub(1)?;
        Some(self.heads[self.len])
    }

    /// Keeps `head` if there is room; gives it back otherwise.
    fn push(&mut self, head: *mut u8) -> Result<(), *mut u8> {
        let slot = self.heads.get_mut(self.len).ok_or(head)?;
        *slot = head;
        self.len += 1;
        Ok(())
    }
}

/// Full chains per class.
struct Depot {
    chains: [Mutex<Chains>; BLOCK_CLASSES.len()],
    /// How many chains each class holds, written under its lock: a thread whose list is
    /// empty reads it first, so one that finds the depot empty too goes straight to the
    /// global allocator without taking the lock.
    counts: [AtomicUsize; BLOCK_CLASSES.len()],
}

impl Depot {
    const fn new() -> Depot {
        Depot {
            chains: [const { Mutex::new(Chains { heads: [core::ptr::null_mut(); DEPOT_MAX], len: 0 }) };
                BLOCK_CLASSES.len()],
            counts: [const { AtomicUsize::new(0) }; BLOCK_CLASSES.len()],
        }
    }
}

/// The depot every scheduler thread of the process shares.
static DEPOT: Depot = Depot::new();

/// The class layout for `layout`, if the cache serves it (folds to a constant for a
/// constant layout).
#[inline(always)]
fn block_class(layout: std::alloc::Layout) -> Option<(usize, std::alloc::Layout)> {
    if layout.align() > 16 || layout.size() == 0 {
        return None;
    }
    let c = BLOCK_CLASSES.iter().position(|&size| layout.size() <= size)?;
    Some((c, class_layout(c)))
}

/// The layout every block of class `c` is allocated with.
#[inline(always)]
fn class_layout(c: usize) -> std::alloc::Layout {
    // A power of two >= 64 with alignment 16: always a valid layout.
    std::alloc::Layout::from_size_align(BLOCK_CLASSES[c], 16).expect("block class layout")
}

/// Allocates a block for `layout` (non-zero size), from this scheduler thread's cache when
/// it has one of the right class. For the short-lived cells of a request/reply (a call's
/// oneshot), where a malloc + free costs ~10 % of a gen_server call (outputs/history.md,
/// findings 16 and 22). Free it with [`free_block`] and the same layout, from any thread.
#[inline]
pub(crate) fn alloc_block(layout: std::alloc::Layout) -> *mut u8 {
    let Some((c, class)) = block_class(layout) else {
        // SAFETY: the callers never pass a zero-size layout.
        return unsafe { std::alloc::alloc(layout) };
    };
    let w = current_worker();
    if !w.is_null() {
        // SAFETY: this thread's live worker; its cells are only touched by this thread.
        let w = unsafe { &*w };
        let mut head = w.blocks.heads[c].get();
        if head.is_null() {
            head = w.blocks.refill(&DEPOT, c);
        }
        if !head.is_null() {
            // SAFETY: a cached free block; its first word holds the next free block.
            w.blocks.heads[c].set(unsafe { *(head as *mut *mut u8) });
            w.blocks.counts[c].set(w.blocks.counts[c].get() - 1);
            return head;
        }
    }
    // SAFETY: the class layout has a non-zero size.
    unsafe { std::alloc::alloc(class) }
}

/// Frees a block from [`alloc_block`].
///
/// # Safety
/// `ptr` came from `alloc_block(layout)` with this `layout` and is not used afterwards.
#[inline]
pub(crate) unsafe fn free_block(ptr: *mut u8, layout: std::alloc::Layout) {
    let Some((c, class)) = block_class(layout) else {
        // SAFETY: forwarded: allocated by the global allocator with `layout`.
        return unsafe { std::alloc::dealloc(ptr, layout) };
    };
    let w = current_worker();
    if !w.is_null() {
        // SAFETY: this thread's live worker.
        let w = unsafe { &*w };
        if w.blocks.counts[c].get() >= BLOCK_CACHE_MAX {
            w.blocks.spill(&DEPOT, c);
        }
        // SAFETY: the block is ours now and at least 64 bytes, 16-aligned.
        unsafe { *(ptr as *mut *mut u8) = w.blocks.heads[c].get() };
        w.blocks.heads[c].set(ptr);
        w.blocks.counts[c].set(w.blocks.counts[c].get() + 1);
        return;
    }
    // SAFETY: every block of this class was allocated with the class layout.
    unsafe { std::alloc::dealloc(ptr, class) }
}

/// Free blocks per size class: intrusive lists through each block's first word, and their
/// lengths. Touched only by its own scheduler thread (scheduler code and the actor it runs).
#[derive(Default)]
pub(super) struct BlockCache {
    heads: [Cell<*mut u8>; BLOCK_CLASSES.len()],
    counts: [Cell<u32>; BLOCK_CLASSES.len()],
}

impl BlockCache {
    /// Takes a chain of class `c` from the depot into this (empty) list; returns its head,
    /// or null if the depot has none.
    #[cold]
    #[inline(never)]
    fn refill(&self, depot: &Depot, c: usize) -> *mut u8 {
        // Relaxed: a hint; the chain itself is taken under the lock. A stale zero only
        // sends this allocation to the global allocator.
        if depot.counts[c].load(Ordering::Relaxed) == 0 {
            return core::ptr::null_mut();
        }
        let mut chains = depot.chains[c].lock();
        let Some(head) = chains.pop() else {
            return core::ptr::null_mut();
        };
        // Relaxed: the count is only a hint (see `Depot::counts`); the lock orders the chain.
        depot.counts[c].store(chains.len, Ordering::Relaxed);
        drop(chains);
        self.heads[c].set(head);
        self.counts[c].set(CHAIN);
        head
    }

    /// Moves the colder half of the (full) list of class `c` to the depot: the list keeps
    /// its first `BLOCK_CACHE_MAX - CHAIN` blocks, the most recently freed.
    #[cold]
    #[inline(never)]
    fn spill(&self, depot: &Depot, c: usize) {
        let keep = BLOCK_CACHE_MAX - CHAIN;
        let mut last = self.heads[c].get();
        // SAFETY: the list holds BLOCK_CACHE_MAX blocks, each a free block of this class
        // whose first word links the next: the first `keep` links are non-null.
        let rest = unsafe {
            for _ in 1..keep {
                last = *(last as *mut *mut u8);
            }
            core::mem::replace(&mut *(last as *mut *mut u8), core::ptr::null_mut())
        };
        self.counts[c].set(keep);
        let mut chains = depot.chains[c].lock();
        let full = chains.push(rest);
        // Relaxed: as in `refill`.
        depot.counts[c].store(chains.len, Ordering::Relaxed);
        drop(chains);
        if let Err(rest) = full {
            // SAFETY: `rest` is a chain of CHAIN free blocks of this class, now ours alone.
            unsafe { free_chain(rest, class_layout(c)) };
        }
    }
}

/// Frees every block of a chain to the global allocator.
///
/// # Safety
/// `p` heads a null-terminated chain of free blocks allocated with `class`, owned by the
/// caller.
unsafe fn free_chain(mut p: *mut u8, class: std::alloc::Layout) {
    while !p.is_null() {
        // SAFETY: a free block of this chain; its link is read before it is freed.
        unsafe {
            let next = *(p as *mut *mut u8);
            std::alloc::dealloc(p, class);
            p = next;
        }
    }
}

impl Drop for BlockCache {
    fn drop(&mut self) {
        for (c, head) in self.heads.iter().enumerate() {
            // SAFETY: the list is a chain of this class's free blocks, ours alone.
            unsafe { free_chain(head.get(), class_layout(c)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pushes `ptr` onto list `c` of `cache` as `free_block` does, spilling into `depot`.
    fn put(cache: &BlockCache, depot: &Depot, c: usize, ptr: *mut u8) {
        if cache.counts[c].get() >= BLOCK_CACHE_MAX {
            cache.spill(depot, c);
        }
        // SAFETY: a free block of class `c`, ours.
        unsafe { *(ptr as *mut *mut u8) = cache.heads[c].get() };
        cache.heads[c].set(ptr);
        cache.counts[c].set(cache.counts[c].get() + 1);
    }

    /// Pops from list `c` as `alloc_block` does, refilling from `depot`.
    fn take(cache: &BlockCache, depot: &Depot, c: usize) -> *mut u8 {
        let mut head = cache.heads[c].get();
        if head.is_null() {
            head = cache.refill(depot, c);
        }
        if !head.is_null() {
            // SAFETY: a cached free block.
            cache.heads[c].set(unsafe { *(head as *mut *mut u8) });
            cache.counts[c].set(cache.counts[c].get() - 1);
        }
        head
    }

    /// A thread that only frees hands its colder half to the depot a chain at a time and
    /// keeps the most recently freed; a thread that only allocates takes those chains
    /// whole; a full depot sends chains back to the global allocator.
    #[test]
    fn blocks_flow_from_a_freeing_thread_to_an_allocating_one_in_chains() {
        let depot = Depot::new();
        let c = 1;
        let (freer, taker) = (BlockCache::default(), BlockCache::default());
        // SAFETY: class layouts have non-zero size.
        let blocks: Vec<*mut u8> =
            (0..BLOCK_CACHE_MAX + 1).map(|_| unsafe { std::alloc::alloc(class_layout(c)) }).collect();
        for &b in &blocks {
            put(&freer, &depot, c, b);
        }
        // The 65th free spilled the 32 oldest; the freer keeps the 33 newest.
        assert_eq!(freer.counts[c].get(), BLOCK_CACHE_MAX - CHAIN + 1);
        assert_eq!(depot.chains[c].lock().len, 1);
        assert_eq!(depot.counts[c].load(Ordering::Relaxed), 1);
        assert_eq!(freer.heads[c].get(), blocks[BLOCK_CACHE_MAX as usize], "the newest stays on top");
        let mut got: Vec<*mut u8> = (0..CHAIN).map(|_| take(&taker, &depot, c)).collect();
        assert_eq!(taker.counts[c].get(), 0);
        assert_eq!(depot.counts[c].load(Ordering::Relaxed), 0);
        got.sort();
        let mut oldest = blocks[..CHAIN as usize].to_vec();
        oldest.sort();
        assert_eq!(got, oldest, "the taker got exactly the spilled chain");
        assert!(take(&taker, &depot, c).is_null(), "an empty depot sends the taker to malloc");
        for b in got {
            put(&freer, &depot, c, b);
        }
        // Fill the depot to its bound and once more: the extra chain is freed, not kept.
        for _ in 0..DEPOT_MAX * CHAIN as usize {
            // SAFETY: as above.
            put(&freer, &depot, c, unsafe { std::alloc::alloc(class_layout(c)) });
        }
        let mut chains = depot.chains[c].lock();
        assert_eq!(chains.len, DEPOT_MAX);
        while let Some(head) = chains.pop() {
            // SAFETY: chains of free blocks of class c, ours now.
            unsafe { free_chain(head, class_layout(c)) };
        }
        // `freer` and `taker` free their lists when dropped.
    }
}
