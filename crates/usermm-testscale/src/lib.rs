//! Test support shared by every crate of the workspace: how much to run, from which seed, how
//! much was done, and what to do when a run hangs.
//!
//! - **Scale.** `USERMM_TEST_SCALE` (a positive integer, default 1) multiplies the budget of
//!   every randomised test: fuzz cases, property cases, stress operations, differential
//!   sequences, racing rounds ([`scaled`]). 1 is the quick run of `cargo test` and CI;
//!   `scripts/soak` runs a large one with the `debug_vm` checks on.
//! - **Seed.** `USERMM_TEST_SEED` (decimal or `0x` hex) seeds them all. Unset, each test process
//!   draws a fresh seed, so every run explores new cases. A test derives its own stream from the
//!   seed and its name ([`seed_for`]), so one seed replays every test of a run; a failing test
//!   prints the line that replays it ([`replay`]): the seed *and* the scale, since the scale
//!   decides how far into its stream a test goes.
//! - **Reports.** [`report`] prints `usermm-test-ops NAME OPS seed=… scale=…` on stderr, the
//!   line the soak collects (`cargo test` shows it with `--nocapture`, or when the test fails).
//! - **Property tests.** [`prop::check`] runs a proptest strategy with the scaled case count
//!   and the derived seed, counts the ops each case reports, and on failure panics with the
//!   minimal input and the replay line.
//! - **Watchdog.** [`Watchdog`] turns a hang into a failure with a message (which thread, what
//!   it was doing, the replay line) instead of a CI timeout.
//! - [`Rng`]: a small seeded generator (SplitMix64) for a stress test's own choices.

#![warn(clippy::allow_attributes)]
#![warn(unreachable_pub)]
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The environment variable that multiplies every budget.
pub const SCALE_VAR: &str = "USERMM_TEST_SCALE";
/// The environment variable that seeds every randomised test.
pub const SEED_VAR: &str = "USERMM_TEST_SEED";

/// `USERMM_TEST_SCALE`, 1 when unset. Anything but a positive integer panics with a message
/// naming the variable (a typo must not silently run the quick default).
pub fn scale() -> u64 {
    static SCALE: OnceLock<u64> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var(SCALE_VAR) {
        Err(_) => 1,
        Ok(s) => match s.trim().parse::<u64>() {
            Ok(n) if n >= 1 => n,
            _ => panic!("{SCALE_VAR}={s:?}: expected a positive integer (1 = the quick default)"),
        },
    })
}

/// `base` times the scale (saturating).
pub fn scaled(base: u64) -> u64 {
    base.saturating_mul(scale())
}

/// [`scaled`] for `u32` budgets (proptest's case counts).
pub fn scaled_u32(base: u32) -> u32 {
    u32::try_from(scaled(u64::from(base))).unwrap_or(u32::MAX)
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16).ok(),
        None => s.replace('_', "").parse().ok(),
    }
}

/// The run's seed: `USERMM_TEST_SEED`, or one drawn for this process (the host's hash keys, the
/// time and the pid), fixed from the first call on.
pub fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| match std::env::var(SEED_VAR) {
        Ok(s) => parse_seed(&s)
            .unwrap_or_else(|| panic!("{SEED_VAR}={s:?}: expected a number (decimal or 0x hex)")),
        Err(_) => {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            h.write_u64(now);
            h.write_u32(std::process::id());
            h.finish()
        }
    })
}

/// SplitMix64's output function: a bijective mix of 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of the test `name`: the run's seed mixed with the name (FNV-1a), so tests draw
/// different streams and one run seed replays all of them.
pub fn seed_for(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(seed() ^ h)
}

/// The environment that replays this run: `USERMM_TEST_SEED=0x… USERMM_TEST_SCALE=N`.
pub fn replay() -> String {
    format!("{SEED_VAR}={:#x} {SCALE_VAR}={}", seed(), scale())
}

/// Say how to replay test `name` (on stderr: `cargo test` shows it when the test fails).
pub fn announce(name: &str) {
    eprintln!("{name}: replay with {}", replay());
}

/// Report the operations test `name` ran, for the soak's table.
pub fn report(name: &str, ops: u64) {
    eprintln!(
        "usermm-test-ops {name} {ops} seed={:#x} scale={}",
        seed(),
        scale()
    );
}

/// A small seeded generator (SplitMix64) for a stress test's own random choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `0..n` (`n` > 0), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Property tests on the knob and the seed.
pub mod prop {
    use std::fmt::Debug;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    use proptest::strategy::Strategy;
    use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};

    /// A proptest configuration for test `name`: `base_cases` scaled, the test's derived seed,
    /// failures persisted beside `source_file` (pass `file!()`), as `proptest!` does.
    pub fn config(name: &str, source_file: &'static str, base_cases: u32) -> Config {
        Config {
            cases: super::scaled_u32(base_cases),
            rng_seed: RngSeed::Fixed(super::seed_for(name)),
            source_file: Some(source_file),
            ..Config::default()
        }
    }

    /// Run `test` on `base_cases` (scaled) values of `strategy`. `test` returns how many
    /// operations the case ran (summed and reported for the soak) or fails as a proptest
    /// case does (`prop_assert!`). A failure panics with proptest's minimal input and the
    /// replay line.
    pub fn check<S>(
        name: &str,
        source_file: &'static str,
        base_cases: u32,
        strategy: S,
        test: impl Fn(S::Value) -> Result<u64, TestCaseError>,
    ) where
        S: Strategy,
        S::Value: Debug,
    {
        super::announce(name);
        let ops = AtomicU64::new(0);
        let mut runner = TestRunner::new(config(name, source_file, base_cases));
        let result = runner.run(&strategy, |v| {
            let n = test(v)?;
            ops.fetch_add(n, Relaxed);
            Ok(())
        });
        match result {
            Ok(()) => super::report(name, ops.load(Relaxed)),
            Err(TestError::Fail(why, input)) => panic!(
                "{name}: {why}\nminimal failing input: {input:#?}\nreplay: {}",
                super::replay()
            ),
            Err(TestError::Abort(why)) => {
                panic!(
                    "{name}: proptest aborted: {why}\nreplay: {}",
                    super::replay()
                )
            }
        }
    }
}

/// Turns a hang into a failure: threads of a stress test beat their slot as they make
/// progress; a slot silent for longer than the timeout ends the process (exit 101) with a
/// message naming the test, the slot, what it was doing (its last note, decoded by the
/// test's `describe`) and the replay line. The message goes straight to the process's stderr,
/// past the test harness's capture, which would die with the process.
pub struct Watchdog {
    shared: Arc<WatchdogState>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct WatchdogState {
    name: String,
    timeout: Duration,
    start: Instant,
    slots: Vec<Slot>,
    describe: Box<dyn Fn(usize, u64) -> String + Send + Sync>,
    done: Mutex<bool>,
    cv: Condvar,
}

#[derive(Default)]
struct Slot {
    last_ms: AtomicU64,
    note: AtomicU64,
    retired: AtomicBool,
}

impl std::fmt::Debug for Watchdog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchdog")
            .field("name", &self.shared.name)
            .field("timeout", &self.shared.timeout)
            .field("slots", &self.shared.slots.len())
            .finish()
    }
}

impl WatchdogState {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// The first slot silent for longer than the timeout at `now` (ms since the start).
    fn stalled(&self, now: u64) -> Option<(usize, u64)> {
        let limit = self.timeout.as_millis() as u64;
        self.slots.iter().enumerate().find_map(|(i, s)| {
            let silent = now.saturating_sub(s.last_ms.load(Relaxed));
            (!s.retired.load(Relaxed) && silent > limit).then_some((i, silent))
        })
    }

    fn fire(&self, slot: usize, silent_ms: u64) -> ! {
        let mut msg = format!(
            "\nWATCHDOG: {}: slot {slot} made no progress for {:.1} s (limit {:.0} s), last doing: {}\n",
            self.name,
            silent_ms as f64 / 1e3,
            self.timeout.as_secs_f64(),
            (self.describe)(slot, self.slots[slot].note.load(Relaxed)),
        );
        for (i, s) in self.slots.iter().enumerate() {
            let state = if s.retired.load(Relaxed) {
                "done".to_string()
            } else {
                format!(
                    "last beat {:.1} s ago",
                    self.now_ms().saturating_sub(s.last_ms.load(Relaxed)) as f64 / 1e3
                )
            };
            msg.push_str(&format!(
                "  slot {i}: {state}, {}\n",
                (self.describe)(i, s.note.load(Relaxed))
            ));
        }
        msg.push_str(&format!(
            "replay: {} (a hang may need the same interleaving)\n",
            replay()
        ));
        let _ = std::io::stderr().write_all(msg.as_bytes());
        std::process::exit(101);
    }
}

impl Watchdog {
    /// Watch `slots` slots of test `name`; `describe(slot, note)` renders a slot's last note.
    pub fn start(
        name: &str,
        slots: usize,
        timeout: Duration,
        describe: impl Fn(usize, u64) -> String + Send + Sync + 'static,
    ) -> Watchdog {
        let shared = Arc::new(WatchdogState {
            name: name.to_string(),
            timeout,
            start: Instant::now(),
            slots: (0..slots).map(|_| Slot::default()).collect(),
            describe: Box::new(describe),
            done: Mutex::new(false),
            cv: Condvar::new(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("watchdog {name}"))
            .spawn(move || {
                let tick = (s.timeout / 8).max(Duration::from_millis(50));
                let mut done = s.done.lock().unwrap_or_else(|e| e.into_inner());
                while !*done {
                    if let Some((slot, silent)) = s.stalled(s.now_ms()) {
                        s.fire(slot, silent);
                    }
                    done =
                        s.cv.wait_timeout(done, tick)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                }
            })
            .expect("spawn the watchdog");
        Watchdog {
            shared,
            thread: Some(thread),
        }
    }

    /// Slot `slot` made progress.
    pub fn beat(&self, slot: usize) {
        self.shared.slots[slot]
            .last_ms
            .store(self.shared.now_ms(), Relaxed);
    }

    /// Slot `slot` made progress and is now doing `note` (decoded by `describe`).
    pub fn beat_doing(&self, slot: usize, note: u64) {
        self.beat(slot);
        self.shared.slots[slot].note.store(note, Relaxed);
    }

    /// Slot `slot` is finished: no longer watched.
    pub fn retire(&self, slot: usize) {
        self.shared.slots[slot].retired.store(true, Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        *self.shared.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn seeds_parse_in_decimal_and_hex() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(parse_seed(" 0x2a "), Some(42));
        assert_eq!(parse_seed("0xdead_beef"), Some(0xdead_beef));
        assert_eq!(parse_seed("1_000"), Some(1000));
        assert_eq!(parse_seed("x"), None);
        assert_eq!(parse_seed("0x"), None);
    }

    #[test]
    fn tests_draw_different_streams_from_one_seed() {
        assert_ne!(seed_for("a"), seed_for("b"));
        assert_eq!(seed_for("a"), seed_for("a"));
    }

    #[test]
    fn rng_stays_in_range_and_replays() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let x = a.below(10);
            assert_eq!(x, b.below(10));
            seen[x as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "every value of 0..10 drawn");
        assert!(!(0..100).any(|_| a.chance(0)));
        assert!((0..100).all(|_| a.chance(100)));
    }

    #[test]
    fn a_silent_slot_is_stalled_unless_retired() {
        let wd = Watchdog::start("t", 2, Duration::from_secs(3600), |_, n| format!("{n}"));
        wd.beat_doing(0, 5);
        assert_eq!(wd.shared.slots[0].note.load(Relaxed), 5);
        let s = &wd.shared;
        let limit = 3_600_000;
        s.slots[0].last_ms.store(1000, Relaxed);
        s.slots[1].last_ms.store(2000, Relaxed);
        assert_eq!(
            s.stalled(limit + 1000),
            None,
            "exactly the limit is not a stall"
        );
        assert_eq!(s.stalled(limit + 1001), Some((0, limit + 1)));
        s.slots[0].retired.store(true, Relaxed);
        assert_eq!(s.stalled(limit + 1001), None);
        assert_eq!(s.stalled(limit + 2001), Some((1, limit + 1)));
    }
}
