//! `MonotonicClock` never runs back as seen by any thread, even when the
//! threads move between cores; and it reads the source the documentation
//! says it reads (the time-stamp counter only where the kernel vouches for
//! it, the OS clock when `TOLLGATE_CLOCK=os`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tollgate_core::{Clock, ClockSource, MonotonicClock};

/// Moves the calling thread to `cpu` (of those it may run on).
#[cfg(target_os = "linux")]
fn move_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and
    // sched_setaffinity only read and write that set and this thread's mask.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

#[cfg(not(target_os = "linux"))]
fn move_to(_: usize) {}

#[test]
fn no_thread_reads_a_time_earlier_than_one_already_read() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The latest time any thread has read: every read must be at least
    // what was published before it began.
    let latest = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let latest = latest.clone();
            std::thread::spawn(move || {
                for i in 0..200_000usize {
                    if i % 1_000 == 0 {
                        move_to((t + i / 1_000) % cpus);
                    }
                    let seen = latest.load(Ordering::SeqCst);
                    let now = MonotonicClock.now();
                    assert!(now >= seen, "read {now} after another thread read {seen}");
                    latest.fetch_max(now, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("no thread saw the clock run back");
    }
}

/// `now_relaxed` reads the same clock, from the same origin: never later
/// than an ordered reading after it, and at most a little (its docs: some
/// tens of ns; asserted: 1 µs) earlier than one before it.
#[test]
fn a_relaxed_reading_is_the_same_clock_read_a_little_early_at_most() {
    for _ in 0..200_000 {
        let before = MonotonicClock.now();
        let relaxed = MonotonicClock.now_relaxed();
        let after = MonotonicClock.now();
        assert!(relaxed <= after, "relaxed {relaxed} after {after}");
        assert!(
            relaxed + 1_000 >= before,
            "relaxed {relaxed} is {} ns before {before}",
            before - relaxed
        );
    }
}

#[test]
fn the_source_is_the_counter_only_where_the_kernel_vouches_for_it() {
    let forced = std::env::var("TOLLGATE_CLOCK").is_ok_and(|v| v.eq_ignore_ascii_case("os"));
    let kernel =
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .unwrap_or_default();
    let expected = if cfg!(target_os = "linux") && kernel.trim() == "tsc" && !forced {
        ClockSource::TimeStampCounter
    } else {
        ClockSource::OsMonotonic
    };
    assert_eq!(MonotonicClock::source(), expected, "kernel says {kernel:?}");
}

/// Run by the next test in a child process with `TOLLGATE_CLOCK=os`.
#[test]
#[ignore = "run by the_os_clock_can_be_asked_for, in a child process"]
fn child_reads_the_os_clock() {
    assert_eq!(MonotonicClock::source(), ClockSource::OsMonotonic);
    let (a, b) = (MonotonicClock.now(), MonotonicClock.now());
    assert!(b >= a);
}

#[test]
fn the_os_clock_can_be_asked_for() {
    let status = std::process::Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--ignored",
            "--exact",
            "child_reads_the_os_clock",
            "--quiet",
        ])
        .env("TOLLGATE_CLOCK", "os")
        .status()
        .expect("run the child test");
    assert!(status.success());
}
