//! Rotation by size and by local date (injected clock), exactly N files kept, and the same
//! through the running pipeline (`UMD_LOG_MAX_BYTES`, `UMD_LOG_MAX_FILES`).

#[path = "log_util.rs"]
mod util;
use std::sync::Arc;
use umd::log::rotate::{FileConfig, FixedOffset, RotatingFile};
use util::*;

const DAY: u64 = 86_400 * 1_000_000_000;
/// 2026-11-29T00:00:00Z.
const T0: u64 = 1_795_910_400 * 1_000_000_000;

fn cfg(dir: &std::path::Path, max_bytes: u64, max_files: u32) -> FileConfig {
    FileConfig {
        dir: dir.to_path_buf(),
        stem: "umd-42".into(),
        max_bytes,
        max_files,
    }
}

fn names(dir: &std::path::Path) -> Vec<String> {
    log_files(dir)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn size_rotation_keeps_exactly_n_files() {
    let dir = fresh_dir("size");
    let mut f = RotatingFile::new(cfg(&dir, 4096, 3), Arc::new(FixedOffset(0)));
    f.open(T0).unwrap();
    // 100-byte records: 40 fit in 4096 bytes, the 41st starts a new file.
    let rec = |i: u32| format!("{i:099}\n");
    for i in 0..200 {
        f.append(rec(i).as_bytes(), T0 + 1).unwrap();
    }
    f.flush().unwrap();
    assert_eq!(f.rotations, 4, "200 records of 100 B at 40 per file");
    assert_eq!(names(&dir), ["umd-42.1.log", "umd-42.2.log", "umd-42.log"]);
    // Newest in the active file, then .1, then .2; records never split.
    let active = lines(&dir.join("umd-42.log"));
    let one = lines(&dir.join("umd-42.1.log"));
    let two = lines(&dir.join("umd-42.2.log"));
    assert_eq!(active.len(), 40);
    assert_eq!(one.len(), 40);
    assert_eq!(two.len(), 40);
    assert_eq!(active[0], rec(160).trim_end());
    assert_eq!(one[0], rec(120).trim_end());
    assert_eq!(two[0], rec(80).trim_end());
    for p in log_files(&dir) {
        assert!(std::fs::metadata(&p).unwrap().len() <= 4096);
    }
    // Fewer files kept from now on: the leftovers go at the next rotation.
    let mut g = RotatingFile::new(cfg(&dir, 4096, 2), Arc::new(FixedOffset(0)));
    g.open(T0).unwrap();
    for i in 200..241 {
        g.append(rec(i).as_bytes(), T0 + 2).unwrap();
    }
    g.flush().unwrap();
    assert_eq!(names(&dir), ["umd-42.1.log", "umd-42.log"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn date_rotation_uses_local_midnight() {
    let dir = fresh_dir("date");
    // UTC+8: local midnight is 16:00 UTC.
    let mut f = RotatingFile::new(cfg(&dir, 1 << 20, 5), Arc::new(FixedOffset(8 * 3600)));
    let start = T0 + 15 * 3600 * 1_000_000_000; // 23:00 local
    f.open(start).unwrap();
    f.append(b"day one\n", start).unwrap();
    f.append(b"day one later\n", start + 3599 * 1_000_000_000)
        .unwrap();
    assert_eq!(f.rotations, 0);
    f.append(b"day two\n", start + 3600 * 1_000_000_000)
        .unwrap(); // 00:00 local
    assert_eq!(f.rotations, 1);
    f.append(b"day three\n", start + 3600 * 1_000_000_000 + DAY)
        .unwrap();
    f.append(b"day three again\n", start + 3600 * 1_000_000_000 + DAY + 5)
        .unwrap();
    f.flush().unwrap();
    assert_eq!(f.rotations, 2);
    assert_eq!(
        lines(&dir.join("umd-42.2.log")),
        ["day one", "day one later"]
    );
    assert_eq!(lines(&dir.join("umd-42.1.log")), ["day two"]);
    assert_eq!(
        lines(&dir.join("umd-42.log")),
        ["day three", "day three again"]
    );
    // Six more days with max 5 files: exactly five remain, the newest ones.
    for d in 2..8u64 {
        let t = start + 3600 * 1_000_000_000 + d * DAY;
        f.append(format!("day {}\n", d + 2).as_bytes(), t).unwrap();
    }
    f.flush().unwrap();
    assert_eq!(
        names(&dir),
        [
            "umd-42.1.log",
            "umd-42.2.log",
            "umd-42.3.log",
            "umd-42.4.log",
            "umd-42.log"
        ]
    );
    assert_eq!(lines(&dir.join("umd-42.log")), ["day 9"]);
    assert_eq!(lines(&dir.join("umd-42.4.log")), ["day 5"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pipeline_rotates_by_size() {
    if is_child() {
        umd::log::ensure_init();
        for i in 0..3000u32 {
            tracing::info!(
                i,
                pad = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                "rotation test record"
            );
        }
        flush();
        let s = stats();
        assert!(s.rotations >= 10, "rotations {}", s.rotations);
        assert_eq!(s.written_file, 3000);
        assert_eq!(s.dropped, 0);
        return;
    }
    let dir = fresh_dir("pipe");
    let o = run_child(
        "pipeline_rotates_by_size",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_MAX_BYTES", "32k"),
            ("UMD_LOG_MAX_FILES", "4"),
        ],
    );
    assert_ok(&o);
    let files = log_files(&dir);
    assert_eq!(files.len(), 4, "{files:?}");
    let mut last_i = None;
    // Oldest kept file first: .3, .2, .1, active; numbers ascend across them without gaps.
    for p in files.iter().rev().skip(1).chain(files.iter().rev().take(1)) {
        assert!(std::fs::metadata(p).unwrap().len() <= 32 * 1024);
        for l in lines(p) {
            let i: u32 = l
                .split(" i=")
                .nth(1)
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .expect("i= field");
            if let Some(prev) = last_i {
                assert_eq!(i, prev + 1, "{}", p.display());
            }
            last_i = Some(i);
        }
    }
    assert_eq!(last_i, Some(2999));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn old_runs_are_pruned_across_processes() {
    use umd::log::rotate::{prune_runs, run_of};
    assert_eq!(run_of("umd-42.log"), Some(42));
    assert_eq!(run_of("umd-42.3.log"), Some(42));
    assert_eq!(
        run_of("umd-blackbox-42-20261129T095615.123456Z.log"),
        Some(42)
    );
    assert_eq!(run_of("notes.log"), None);
    let dir = fresh_dir("runs");
    // Process ids that do not exist (checked), oldest first.
    let dead: Vec<u32> = (4_190_000..4_194_000)
        // SAFETY: signal 0 only checks existence.
        .filter(|&p| unsafe { libc::kill(p as i32, 0) } != 0)
        .take(4)
        .collect();
    assert_eq!(dead.len(), 4);
    let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    for (k, pid) in dead.iter().enumerate() {
        for name in [
            format!("umd-{pid}.log"),
            format!("umd-{pid}.1.log"),
            format!("umd-blackbox-{pid}-20261129T095615.123456Z.log"),
        ] {
            let f = std::fs::File::create(dir.join(&name)).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(60 * k as u64))
                .unwrap();
        }
    }
    let me = std::process::id();
    std::fs::write(dir.join(format!("umd-{me}.log")), b"").unwrap();
    std::fs::write(dir.join("unrelated.txt"), b"").unwrap();
    // Keep 3 runs: this one and the two newest dead ones. The older runs lose their logs, not
    // their black boxes.
    assert_eq!(prune_runs(&dir, 3, me), 4);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want = vec![format!("umd-{me}.log"), "unrelated.txt".to_string()];
    for pid in &dead[2..] {
        want.push(format!("umd-{pid}.log"));
        want.push(format!("umd-{pid}.1.log"));
    }
    for pid in &dead {
        want.push(format!("umd-blackbox-{pid}-20261129T095615.123456Z.log"));
    }
    want.sort();
    assert_eq!(left, want);
    assert_eq!(prune_runs(&dir, 0, me), 0, "0 keeps everything");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run whose writer still holds its active file is live, whatever `kill(pid, 0)` says (a
/// process in another PID namespace, or a pid reused): its files are never pruned.
#[test]
fn a_run_holding_its_file_lock_is_never_pruned() {
    use std::os::fd::AsRawFd;
    use umd::log::rotate::prune_runs;
    let dir = fresh_dir("locked-run");
    let dead: Vec<u32> = (4_180_000..4_184_000)
        // SAFETY: signal 0 only checks existence.
        .filter(|&p| unsafe { libc::kill(p as i32, 0) } != 0)
        .take(3)
        .collect();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
    for pid in &dead {
        for name in [format!("umd-{pid}.log"), format!("umd-{pid}.1.log")] {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_modified(old).unwrap();
        }
    }
    // The oldest "dead" run is in fact live elsewhere: its writer holds the shared lock.
    let held = std::fs::File::open(dir.join(format!("umd-{}.log", dead[0]))).unwrap();
    // SAFETY: flock on a file this test owns.
    assert_eq!(
        unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) },
        0
    );
    let me = std::process::id();
    std::fs::write(dir.join(format!("umd-{me}.log")), b"").unwrap();
    // Keep 1 run (this one, the newest): the two unlocked dead runs go, the locked one stays.
    assert_eq!(prune_runs(&dir, 1, me), 4);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want = vec![
        format!("umd-{}.1.log", dead[0]),
        format!("umd-{}.log", dead[0]),
        format!("umd-{me}.log"),
    ];
    want.sort();
    assert_eq!(left, want);
    drop(held);
    assert_eq!(
        prune_runs(&dir, 1, me),
        2,
        "once the lock is gone the run is pruned"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn black_boxes_of_exited_runs_are_capped_newest_kept() {
    use umd::log::rotate::{prune_runs, BLACKBOXES_KEPT};
    let dir = fresh_dir("boxes");
    // A crash loop: 40 exited runs, each left only a black box.
    let dead: Vec<u32> = (4_180_000..4_190_000)
        // SAFETY: signal 0 only checks existence.
        .filter(|&p| unsafe { libc::kill(p as i32, 0) } != 0)
        .take(40)
        .collect();
    assert_eq!(dead.len(), 40);
    let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    let name = |pid: u32| format!("umd-blackbox-{pid}-20261129T095615.123456Z.log");
    for (k, pid) in dead.iter().enumerate() {
        let f = std::fs::File::create(dir.join(name(*pid))).unwrap();
        f.set_modified(t0 + std::time::Duration::from_secs(k as u64))
            .unwrap();
    }
    let me = std::process::id();
    assert_eq!(prune_runs(&dir, 10, me), 40 - BLACKBOXES_KEPT);
    for (k, pid) in dead.iter().enumerate() {
        assert_eq!(
            dir.join(name(*pid)).exists(),
            k >= 40 - BLACKBOXES_KEPT,
            "black box {k} of 40"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
