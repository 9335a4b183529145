//! The capture timestamp. A record's monotonic time is CLOCK_MONOTONIC in ns; reading it costs
//! a vDSO call (about 35 ns in a KVM guest), a fair part of a log call. Where the kernel itself
//! keeps time with the TSC (clocksource `tsc`, with `constant_tsc` and `nonstop_tsc`), the
//! caller only reads the TSC (a few ns) and the writer thread converts it to CLOCK_MONOTONIC
//! with a calibration it refreshes on every batch; elsewhere the caller reads CLOCK_MONOTONIC.
//! A stamp says which it is by its top bit.

use std::sync::atomic::{AtomicBool, Ordering};

static TSC_OK: AtomicBool = AtomicBool::new(false);
const TSC_BIT: u64 = 1 << 63;

/// Decides once whether the TSC may stand in for CLOCK_MONOTONIC (`allowed`: `UMD_LOG_TSC`,
/// read with the other log settings in `config.rs`).
pub fn init(allowed: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let source_is_tsc =
            read("/sys/devices/system/clocksource/clocksource0/current_clocksource").trim()
                == "tsc";
        let info = read("/proc/cpuinfo");
        let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
        let has = |f: &str| flags.split_whitespace().any(|x| x == f);
        TSC_OK.store(
            allowed && source_is_tsc && has("constant_tsc") && has("nonstop_tsc"),
            Ordering::Relaxed,
        );
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// A capture stamp: `TSC_BIT | tsc`, or CLOCK_MONOTONIC ns.
#[inline]
pub fn stamp() -> u64 {
    if TSC_OK.load(Ordering::Relaxed) {
        rdtsc() | TSC_BIT
    } else {
        crate::error::detail::mono_ns()
    }
}

/// Converts stamps to CLOCK_MONOTONIC ns (writer thread).
pub struct Converter {
    /// First calibration point (tsc, mono ns).
    base: (u64, u64),
    /// Latest point.
    anchor: (u64, u64),
    /// TSC ticks per ns.
    per_ns: f64,
}

fn pair() -> (u64, u64) {
    // The TSC read between two clock reads, against their midpoint.
    let m0 = crate::error::detail::mono_ns();
    let t = rdtsc();
    let m1 = crate::error::detail::mono_ns();
    (t, m0 + (m1 - m0) / 2)
}

impl Converter {
    /// A converter for CLOCK_MONOTONIC stamps only (before calibration).
    pub fn uncalibrated() -> Converter {
        Converter {
            base: (0, 0),
            anchor: (0, 0),
            per_ns: 1.0,
        }
    }

    /// Calibrates over about 10 ms (only when the TSC is in use).
    pub fn calibrate() -> Converter {
        if !TSC_OK.load(Ordering::Relaxed) {
            return Converter::uncalibrated();
        }
        let a = pair();
        std::thread::sleep(std::time::Duration::from_millis(10));
        let b = pair();
        let per_ns = (b.0.wrapping_sub(a.0)) as f64 / (b.1.saturating_sub(a.1)).max(1) as f64;
        Converter {
            base: a,
            anchor: b,
            per_ns: if per_ns.is_finite() && per_ns > 0.0 {
                per_ns
            } else {
                1.0
            },
        }
    }

    /// Takes a new anchor and refines the rate over the whole run (call once per batch).
    pub fn refresh(&mut self) {
        if !TSC_OK.load(Ordering::Relaxed) || self.base.0 == 0 {
            return;
        }
        let p = pair();
        let span = p.1.saturating_sub(self.base.1);
        if span > 50_000_000 {
            let r = p.0.wrapping_sub(self.base.0) as f64 / span as f64;
            if r.is_finite() && r > 0.0 {
                self.per_ns = r;
            }
        }
        self.anchor = p;
    }

    /// CLOCK_MONOTONIC ns of a stamp.
    #[inline]
    pub fn mono_ns(&self, stamp: u64) -> u64 {
        if stamp & TSC_BIT == 0 {
            return stamp;
        }
        let t = stamp & !TSC_BIT;
        let dt = t.wrapping_sub(self.anchor.0) as i64;
        let ns = self.anchor.1 as i64 + (dt as f64 / self.per_ns) as i64;
        ns.max(0) as u64
    }
}
