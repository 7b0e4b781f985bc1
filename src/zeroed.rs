//! `Zeroed<T>`: a fixed-size array of `T` on fresh anonymous pages, for the big per-runtime
//! tables (the actor slab) whose all-zero bytes are their initial state.
//!
//! Why not `alloc_zeroed`: glibc serves a large `calloc` from `mmap` only until the first
//! such block is freed; then its dynamic mmap threshold rises and later ones come from the
//! heap, zeroed with `memset`, so every runtime built after another one would pay a full
//! memset of its slab (2.8 MB for 16,384 slots, more than doubling the cost of an empty
//! `run(|| ())`: outputs/history.md, finding 13). Fresh anonymous pages are zero by
//! definition and committed only when touched.

use std::ptr::NonNull;

/// Types whose all-zero bytes are a valid value: the initial state of a [`Zeroed`] table.
///
/// # Safety
/// An implementor guarantees that the all-zero bit pattern is a valid, initialised value of
/// the type (every field: integers and atomics, `bool`, `Option` of a reference, `Box` or
/// `NonNull` (null is `None`), `UnsafeCell`s of such, and fieldless enums whose zero
/// discriminant exists), and that dropping such a value is a no-op, so a table can skip
/// dropping the elements it never handed out.
pub(crate) unsafe trait ZeroValid {}

pub(crate) struct Zeroed<T> {
    ptr: NonNull<T>,
    len: usize,
    bytes: usize,
}

// SAFETY: `Zeroed<T>` owns its elements like a `Box<[T]>`.
unsafe impl<T: Send> Send for Zeroed<T> {}
// SAFETY: as above; shared access hands out `&T` only.
unsafe impl<T: Sync> Sync for Zeroed<T> {}

impl<T> Zeroed<T> {
    /// `len` elements, all zero bytes.
    pub(crate) fn new(len: usize) -> Zeroed<T>
    where
        T: ZeroValid,
    {
        let layout = std::alloc::Layout::array::<T>(len.max(1)).expect("table size overflows");
        assert!(layout.align() <= 4096, "over-aligned element");
        let bytes = layout.size().div_ceil(4096) * 4096;
        // SAFETY: a fresh private anonymous mapping; nothing else is affected.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: mmap succeeded, so `p` is non-null.
        Zeroed { ptr: unsafe { NonNull::new_unchecked(p as *mut T) }, len, bytes }
    }

    /// Drops the first `n` elements in place (the rest are assumed untouched zeroes whose
    /// drop is a no-op). Called once, before the table is unmapped.
    ///
    /// # Safety
    /// Elements at `n..` must need no drop (all-zero or otherwise trivially droppable), and
    /// no element may be used afterwards.
    pub(crate) unsafe fn drop_prefix(&mut self, n: usize) {
        let n = n.min(self.len);
        // SAFETY: the first `n` elements are initialised (valid `T`s) and owned by us.
        unsafe { core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), n)) };
    }
}

impl<T> core::ops::Deref for Zeroed<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `len` valid elements live at `ptr` for as long as we do.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T> Drop for Zeroed<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping; element drops (if any) were done by `drop_prefix`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.bytes) };
    }
}
