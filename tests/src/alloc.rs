//! A global allocator that counts allocations, for tests that promise a
//! path allocates nothing (or a known number of times). A test binary
//! installs it with
//! `#[global_allocator] static GLOBAL: CountingAllocator = CountingAllocator;`
//! and reads [`allocations_here`] before and after the path: the
//! allocations of the thread that runs it, so that what the test harness's
//! other threads do meanwhile (on a busy machine they may well allocate)
//! is not counted against it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting allocations.
pub struct CountingAllocator;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: reading it never
    // allocates, so the allocator may touch it.
    static HERE: Cell<usize> = const { Cell::new(0) };
}

/// Allocations so far in this process, on every thread.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Allocations so far on the calling thread.
pub fn allocations_here() -> usize {
    HERE.try_with(Cell::get).unwrap_or(0)
}

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // A thread being torn down has no counter left: not counted there.
        let _ = HERE.try_with(|here| here.set(here.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}
