//! The result codes are an ABI: once released, a value never changes meaning, is never reused,
//! and a name never disappears. `umd/errors.golden` is the released list.

use std::collections::{HashMap, HashSet};
use umd::error::{umdErrorAction, umdResult};

fn golden() -> Vec<(String, i32)> {
    let text = include_str!("../errors.golden");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (name, value) = l.split_once('=').expect("golden line is NAME = value");
            (
                name.trim().to_string(),
                value.trim().parse().expect("golden value is an integer"),
            )
        })
        .collect()
}

#[test]
fn every_released_code_keeps_its_name_and_value() {
    let current: HashMap<&str, i32> = umdResult::ALL
        .iter()
        .map(|c| (c.name(), *c as i32))
        .collect();
    for (name, value) in golden() {
        assert_eq!(
            current.get(name.as_str()),
            Some(&value),
            "released code {name} = {value} changed or disappeared"
        );
    }
}

#[test]
fn every_current_code_is_in_the_golden_file() {
    let released: HashSet<String> = golden().into_iter().map(|(n, _)| n).collect();
    for c in umdResult::ALL {
        assert!(
            released.contains(c.name()),
            "{} = {} is not in umd/errors.golden: add it",
            c.name(),
            *c as i32
        );
    }
}

#[test]
fn values_are_unique_and_in_their_domain() {
    let mut seen = HashSet::new();
    for c in umdResult::ALL {
        let v = *c as i32;
        assert!(seen.insert(v), "value {v} used twice");
        let name = c.name();
        // The name matches the enumerator (the info table cannot drift from the enum).
        assert_eq!(name, format!("{c:?}"));
        let domain = match v {
            0 => "UMD_SUCCESS",
            1..=99 => "UMD_STATUS_",
            -99..=-1 => "UMD_ERR_INVALID_",
            -199..=-100 => "UMD_ERR_INIT_",
            -299..=-200 => "UMD_ERR_DEVICE_",
            -399..=-300 => "UMD_ERR_CTX_",
            -499..=-400 => "UMD_ERR_MEM_",
            -599..=-500 => "UMD_ERR_SUBMIT_",
            -699..=-600 => "UMD_ERR_SYNC_",
            -799..=-700 => "UMD_ERR_LOG_",
            -999..=-900 => "UMD_ERR_INTERNAL",
            _ => panic!("{name} = {v} is outside every domain range"),
        };
        assert!(
            name.starts_with(domain),
            "{name} = {v} is not in the {domain} range"
        );
    }
}

#[test]
fn statuses_are_not_errors_and_actions_are_sane() {
    assert!(!umdResult::UMD_STATUS_NOT_READY.is_error());
    assert!(umdResult::UMD_ERR_SYNC_TIMEOUT.is_error());
    assert_eq!(
        umdResult::UMD_SUCCESS.action(),
        umdErrorAction::UMD_ACTION_NONE
    );
    assert_eq!(
        umdResult::UMD_ERR_DEVICE_LOST.action(),
        umdErrorAction::UMD_ACTION_RECREATE_DEVICE
    );
    assert_eq!(
        umdResult::UMD_ERR_CTX_LOST.action(),
        umdErrorAction::UMD_ACTION_RECREATE_CONTEXT
    );
    assert_eq!(
        umdResult::UMD_ERR_MEM_OUT_OF_MEMORY.action(),
        umdErrorAction::UMD_ACTION_FREE_MEMORY_AND_RETRY
    );
    assert_eq!(
        umdResult::UMD_ERR_MEM_TOO_LARGE.action(),
        umdErrorAction::UMD_ACTION_FIX_CALL
    );
    assert!(umdResult::UMD_ERR_SYNC_TIMEOUT.is_retryable());
    assert!(!umdResult::UMD_ERR_INVALID_HANDLE.is_retryable());
    for c in umdResult::ALL {
        assert!(!c.text().is_empty(), "{} has no text", c.name());
        assert_eq!(c.is_error(), (*c as i32) < 0);
    }
}

#[test]
fn every_code_is_documented() {
    let doc = include_str!("../../docs/libumd.md");
    for c in umdResult::ALL {
        let row = format!("| `{}` | {} |", c.name(), *c as i32);
        assert!(
            doc.contains(&row),
            "docs/libumd.md has no table row for {} = {}",
            c.name(),
            *c as i32
        );
    }
}
