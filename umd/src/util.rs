//! Small helpers shared by several modules.

/// "at 2026-11-29T02:13:07.123Z" from ns since the epoch (UTC, no dependency on a time crate).
pub fn format_wall(ns: u64) -> String {
    if ns == 0 {
        return "at an unknown time".into();
    }
    let secs = ns / 1_000_000_000;
    let ms = (ns / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "at {y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = (z - era * 146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe as i64 + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// A handler glibc runs inside `exit()` (and at the return from `main`) with the exit status.
pub type ExitHandler = extern "C" fn(status: libc::c_int, arg: *mut libc::c_void);

/// Registers `f` with glibc's `on_exit` (declared here, inside the function, so that the C
/// header generated from the crate does not list it). The handler must not unwind into C.
pub fn on_exit(f: ExitHandler) {
    extern "C" {
        /// glibc: like `atexit`, but the handler receives the exit status.
        fn on_exit(f: ExitHandler, arg: *mut libc::c_void) -> libc::c_int;
    }
    // SAFETY: `on_exit` registers a plain function with a null argument; glibc calls it at
    // exit() or the return from main with the exit status.
    unsafe {
        on_exit(f, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn wall_format() {
        assert_eq!(format_wall(0), "at an unknown time");
        assert_eq!(
            format_wall(1_795_918_387_123_000_000),
            "at 2026-11-29T02:13:07.123Z"
        );
    }
}
