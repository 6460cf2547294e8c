//! A counter that many threads add to at once without contending: one
//! cell per stripe, each on cache lines of its own, and each thread adds
//! to the stripe it was given. Reading sums the stripes.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const STRIPES: usize = 8;

/// A cell on 128 bytes of its own (two cache lines, the unit adjacent-line
/// prefetchers fetch).
#[derive(Default)]
#[repr(align(128))]
struct Cell(AtomicU64);

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Striped {
    cells: [Cell; STRIPES],
}

/// Hands each thread the next stripe, round the stripes.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static STRIPE: usize = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
}

impl Striped {
    pub(crate) fn add(&self, n: u64) {
        let stripe = STRIPE.with(|s| *s);
        self.cells[stripe].0.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn sum(&self) -> u64 {
        self.cells
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .fold(0, u64::wrapping_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn adds_from_every_thread_are_summed() {
        let counter = Arc::new(Striped::default());
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        counter.add(1);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(counter.sum(), 12_000);
    }
}
