//! A burst from many threads into a tiny queue, through both front ends: nothing lost in
//! blocking mode, exact drop counts in lossy mode.

#[path = "log_util.rs"]
mod util;
use std::collections::HashSet;
use util::*;

const THREADS: u32 = 8;
const PER: u32 = 5000;

fn burst() {
    let hs: Vec<_> = (0..THREADS)
        .map(|t| {
            std::thread::spawn(move || {
                // Half the threads through each front end (docs/logging.md, "Two front
                // ends"): both share the lanes, the overflow rule and the drop count.
                for i in 0..PER {
                    if t % 2 == 0 {
                        tracing::info!(t, i, "burst");
                    } else {
                        umd::record!(INFO, "burst", t, i);
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

/// (thread, i) of every burst record in the file.
fn burst_records(dir: &std::path::Path) -> Vec<(u32, u32)> {
    lines(&log_path(dir, std::process::id()))
        .iter()
        .filter(|l| l.contains("\"burst\""))
        .map(|l| {
            let f = |k: &str| -> u32 {
                l.split(&format!(" {k}="))
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap()
            };
            (f("t"), f("i"))
        })
        .collect()
}

#[test]
fn blocking_mode_loses_nothing() {
    if is_child() {
        umd::log::ensure_init();
        burst();
        flush();
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        let recs = burst_records(&dir);
        assert_eq!(recs.len(), (THREADS * PER) as usize);
        let set: HashSet<_> = recs.iter().copied().collect();
        assert_eq!(set.len(), recs.len(), "no duplicates");
        // Per thread, records appear in the order they were logged.
        for t in 0..THREADS {
            let seq: Vec<u32> = recs.iter().filter(|r| r.0 == t).map(|r| r.1).collect();
            assert_eq!(seq, (0..PER).collect::<Vec<_>>());
        }
        let s = stats();
        assert_eq!(s.dropped, 0);
        assert_eq!(s.queue_capacity, 64);
        return;
    }
    let dir = fresh_dir("block");
    let o = run_child(
        "blocking_mode_loses_nothing",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_QUEUE", "64"),
            ("UMD_LOG_OVERFLOW", "block"),
            ("UMD_LOG_BLOCK_MS", "10000"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn lossy_mode_counts_every_drop() {
    if is_child() {
        umd::log::ensure_init();
        burst();
        flush();
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        let recs = burst_records(&dir);
        let s = stats();
        assert!(s.dropped > 0, "a 16-record queue under 8 threads drops");
        assert_eq!(
            recs.len() as u64 + s.dropped,
            (THREADS * PER) as u64,
            "written + dropped = logged"
        );
        let set: HashSet<_> = recs.iter().copied().collect();
        assert_eq!(set.len(), recs.len(), "no duplicates");
        // The drops are said in the log (on the next flush interval).
        std::thread::sleep(std::time::Duration::from_millis(100));
        flush();
        let all = lines(&log_path(&dir, std::process::id()));
        assert!(
            all.iter()
                .any(|l| l.contains(&format!("log queue full: {} records dropped", s.dropped))),
            "drop notice"
        );
        return;
    }
    let dir = fresh_dir("lossy");
    let o = run_child(
        "lossy_mode_counts_every_drop",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_QUEUE", "16"),
            ("UMD_LOG_OVERFLOW", "drop"),
            ("UMD_LOG_FLUSH_MS", "20"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}
