//! Assertions on backend results shared by the backend test files (included with `#[path]`;
//! no tests of its own).
#![allow(dead_code)]

use uapi::reason as r;
use umd::backend::KmdError;

#[track_caller]
pub fn expect_err_at<T: std::fmt::Debug>(
    got: Result<T, KmdError>,
    errno: i32,
    reason: u32,
    bad_index: u32,
) {
    match got {
        Err(e) => assert_eq!(
            (e.errno, e.reason, e.bad_index),
            (errno, reason, bad_index),
            "got {}, want errno {errno} reason {} naming index {bad_index}",
            e.describe(),
            r::name(reason)
        ),
        Ok(v) => panic!(
            "succeeded with {v:?}, want errno {errno} reason {} naming index {bad_index}",
            r::name(reason)
        ),
    }
}

#[track_caller]
pub fn expect_err<T: std::fmt::Debug>(got: Result<T, KmdError>, errno: i32, reason: u32) {
    match got {
        Err(e) => assert_eq!(
            (e.errno, e.reason),
            (errno, reason),
            "got {}, want errno {errno} reason {} ({})",
            e.describe(),
            reason,
            r::name(reason)
        ),
        Ok(v) => panic!(
            "succeeded with {v:?}, want errno {errno} reason {}",
            r::name(reason)
        ),
    }
}
