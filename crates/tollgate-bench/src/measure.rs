//! How sides are timed: alternating rounds, one batch per side per round.

use crate::report::median;
use std::time::Instant;

/// How long the run is: `--quick` or full.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Fewer rounds and smaller batches: under two minutes in all.
    pub quick: bool,
}

impl Settings {
    /// Rounds of the in-process scenarios (batches of milliseconds each).
    /// Odd, so that the median is one measured round.
    pub fn rounds(&self) -> usize {
        self.pick(9, 5)
    }

    /// `full` normally, `quick` under `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick { quick } else { full }
    }
}

/// One side of a comparison: runs one batch and returns its figure (ns per
/// operation, operations per second, …). Each call builds its own state, so
/// nothing a round computes is reused by the next.
pub type Side<'a> = &'a mut dyn FnMut() -> f64;

/// Runs every side once untimed (to fault in code and memory), then
/// `rounds` rounds of one batch per side. Each round starts with the next
/// side in turn, and every other round goes through the sides backwards, so
/// that no side always runs first, or always right after the same other side
/// (its allocations, its code in the caches), on a machine whose clock speed
/// and caches change. Returns each side's figures, in the order of `sides`.
pub fn alternate(rounds: usize, sides: &mut [Side<'_>]) -> Vec<Vec<f64>> {
    for side in sides.iter_mut() {
        std::hint::black_box(side());
    }
    let n = sides.len();
    let mut figures = vec![Vec::with_capacity(rounds); n];
    for round in 0..rounds {
        for i in 0..n {
            let which = if round % 2 == 0 {
                (round + i) % n
            } else {
                (round + n - i) % n
            };
            figures[which].push(sides[which]());
        }
    }
    figures
}

/// The medians of two sides (tollgate, its anchor) over alternating rounds.
pub fn pair(
    rounds: usize,
    mut ours: impl FnMut() -> f64,
    mut theirs: impl FnMut() -> f64,
) -> (f64, f64) {
    let figures = alternate(rounds, &mut [&mut ours, &mut theirs]);
    (median(&figures[0]), median(&figures[1]))
}

/// Runs this program again as `--child name` (with `--quick` when the run
/// is quick) and returns what it printed: for the scenarios measured in
/// processes of their own.
pub fn run_child(name: &str, settings: Settings) -> String {
    let exe = std::env::current_exe().expect("the path of this program");
    let mut command = std::process::Command::new(exe);
    command.args(["--child", name]);
    if settings.quick {
        command.arg("--quick");
    }
    let output = command.output().expect("start a child of this program");
    assert!(
        output.status.success(),
        "child {name} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Nanoseconds per operation of `n` operations since `start`.
pub fn ns_per_op(start: Instant, n: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / n as f64
}

/// Operations per second of `n` operations since `start`.
pub fn per_second(start: Instant, n: u64) -> f64 {
    n as f64 / start.elapsed().as_secs_f64()
}

/// Element-wise `a − b`: the added cost of a layer, round by round, so that
/// a slow round slows both terms and cancels.
pub fn differences(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

/// A pseudo-random sequence (xorshift32), the same on both sides of a
/// comparison, cheap enough not to dominate a 20 ns check.
#[derive(Clone, Debug)]
pub struct Xorshift(u32);

impl Xorshift {
    /// A sequence from a fixed, non-zero seed.
    pub fn new() -> Self {
        Xorshift(0x9e37_79b9)
    }

    /// The next number, never 0.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }
}

impl Default for Xorshift {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternate_rotates_the_first_side() {
        let order = std::cell::RefCell::new(Vec::new());
        let mut a = || {
            order.borrow_mut().push('a');
            1.0
        };
        let mut b = || {
            order.borrow_mut().push('b');
            2.0
        };
        let figures = alternate(3, &mut [&mut a, &mut b]);
        assert_eq!(figures, vec![vec![1.0; 3], vec![2.0; 3]]);
        // One warm-up each, then a, b / b, a / a, b.
        assert_eq!(order.into_inner().iter().collect::<String>(), "ababbaab");
    }

    #[test]
    fn alternate_varies_the_side_before_each() {
        let order = std::cell::RefCell::new(String::new());
        let mut a = || {
            order.borrow_mut().push('a');
            0.0
        };
        let mut b = || {
            order.borrow_mut().push('b');
            0.0
        };
        let mut c = || {
            order.borrow_mut().push('c');
            0.0
        };
        alternate(4, &mut [&mut a, &mut b, &mut c]);
        // Warm-up, then forwards from a, backwards from b, forwards from c,
        // backwards from a: b follows a, then c, in turn.
        assert_eq!(order.into_inner(), "abc|abc|bac|cab|acb".replace('|', ""));
    }

    #[test]
    fn differences_pair_rounds() {
        assert_eq!(differences(&[5.0, 7.0], &[2.0, 3.0]), vec![3.0, 4.0]);
    }
}
