//! A per-scheduler-thread cache of small blocks (64, 128 and 256 bytes) for the short-lived
//! cells of a request and its reply, freed from any thread.

use std::cell::Cell;

use super::worker::current_worker;

/// Size classes of the per-thread block cache (bytes; every block is 16-byte aligned).
const BLOCK_CLASSES: [usize; 3] = [64, 128, 256];
/// Blocks kept per class and thread; more are returned to the global allocator.
const BLOCK_CACHE_MAX: u32 = 64;

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
        let head = w.blocks.heads[c].get();
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
        if w.blocks.counts[c].get() < BLOCK_CACHE_MAX {
            // SAFETY: the block is ours now and at least 64 bytes, 16-aligned.
            unsafe { *(ptr as *mut *mut u8) = w.blocks.heads[c].get() };
            w.blocks.heads[c].set(ptr);
            w.blocks.counts[c].set(w.blocks.counts[c].get() + 1);
            return;
        }
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

impl Drop for BlockCache {
    fn drop(&mut self) {
        for (c, head) in self.heads.iter().enumerate() {
            let class = class_layout(c);
            let mut p = head.get();
            while !p.is_null() {
                // SAFETY: a cached free block of this class; read its link before freeing.
                unsafe {
                    let next = *(p as *mut *mut u8);
                    std::alloc::dealloc(p, class);
                    p = next;
                }
            }
        }
    }
}
