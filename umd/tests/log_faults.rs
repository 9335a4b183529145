//! The log never fails the driver: a full disk (a size-limited file), an unwritable directory and
//! a log file deleted under us each degrade, are counted, are said once, and recover.

#[path = "log_util.rs"]
mod util;
use umd::abi::log::*;
use umd::umdResult;
use util::*;

/// A real driver call sequence on the simulator: open, query, context, close.
fn driver_works() {
    let mut dev = 0u64;
    assert_eq!(
        umd::abi::device::umdDeviceOpen(0, &mut dev),
        umdResult::UMD_SUCCESS
    );
    let mut ctx = 0u64;
    assert_eq!(
        umd::abi::context::umdContextCreate(dev, umd::abi::types::UMD_PRIORITY_NORMAL, &mut ctx),
        umdResult::UMD_SUCCESS
    );
    assert_eq!(
        umd::abi::context::umdContextDestroy(ctx),
        umdResult::UMD_SUCCESS
    );
    assert_eq!(
        umd::abi::device::umdDeviceClose(dev),
        umdResult::UMD_SUCCESS
    );
}

fn count(hay: &str, needle: &str) -> usize {
    hay.matches(needle).count()
}

#[test]
fn disk_full_degrades_to_console_and_counts() {
    if is_child() {
        // A 16 KiB file-size limit stands in for a full disk: write(2) fails with EFBIG.
        // SAFETY: plain libc calls on this process.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 16 * 1024,
                rlim_max: 16 * 1024,
            };
            assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &lim), 0);
        }
        umd::log::ensure_init();
        for i in 0..2000u32 {
            tracing::info!(
                i,
                "filling the disk with a record of about one hundred and fifty bytes"
            );
            if i % 500 == 0 {
                driver_works();
            }
        }
        let r = umdLogFlush(5000);
        assert_eq!(
            r,
            umdResult::UMD_ERR_LOG_IO,
            "flush reports the file sink down"
        );
        let s1 = stats();
        assert_eq!(s1.file_ok, 0);
        assert!(s1.failed_file > 1000, "failed {}", s1.failed_file);
        // What reached the file is exactly the whole lines in it (16 KiB of ~170-byte records).
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        let text = std::fs::read(log_path(&dir, std::process::id())).unwrap();
        assert_eq!(text.len(), 16 * 1024);
        let whole = text.iter().filter(|&&b| b == b'\n').count() as u64;
        assert_eq!(s1.written_file, whole);
        assert!(
            s1.written_file + s1.failed_file >= 2000,
            "every record counted"
        );
        // Still failing later: the counter keeps rising, the driver keeps working.
        std::thread::sleep(std::time::Duration::from_millis(120));
        tracing::info!("one more");
        driver_works();
        let _ = umdLogFlush(5000);
        let s2 = stats();
        assert!(s2.failed_file > s1.failed_file);
        return;
    }
    let dir = fresh_dir("full");
    let o = run_child(
        "disk_full_degrades_to_console_and_counts",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_RETRY_MS", "30"),
            ("UMD_LOG_FLUSH_MS", "10"),
        ],
    );
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(count(&err, "log file sink down"), 1, "said once: {err}");
    assert!(err.contains("File too large"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unwritable_directory_then_recovers() {
    if is_child() {
        let base = std::path::PathBuf::from(std::env::var("TEST_BASE").unwrap());
        umd::log::ensure_init();
        tracing::warn!("record while the directory is unusable");
        driver_works();
        assert_eq!(umdLogFlush(5000), umdResult::UMD_ERR_LOG_IO);
        let s = stats();
        assert_eq!(s.file_ok, 0);
        assert!(s.failed_file >= 1);
        let mut need = 0usize;
        assert_eq!(
            umdLogGetFilePath(std::ptr::null_mut(), 0, &mut need),
            umdResult::UMD_ERR_LOG_IO
        );
        // Make the directory possible; the sink retries on its own.
        std::fs::remove_file(base.join("afile")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        tracing::warn!("record after recovery");
        flush();
        let s = stats();
        assert_eq!(s.file_ok, 1);
        let path = base
            .join("afile/sub")
            .join(format!("umd-{}.log", std::process::id()));
        let got = lines(&path);
        assert!(
            got.iter().any(|l| l.contains("record after recovery")),
            "{got:#?}"
        );
        assert!(
            got.iter().any(|l| l.contains("log file sink back")),
            "{got:#?}"
        );
        return;
    }
    let base = fresh_dir("unwritable");
    std::fs::write(base.join("afile"), b"a file, not a directory").unwrap();
    let logdir = base.join("afile/sub");
    let o = run_child(
        "unwritable_directory_then_recovers",
        &[
            ("UMD_LOG_DIR", logdir.to_str().unwrap()),
            ("TEST_BASE", base.to_str().unwrap()),
            ("UMD_LOG_RETRY_MS", "50"),
            ("UMD_LOG_FLUSH_MS", "10"),
        ],
    );
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(count(&err, "log file sink down"), 1, "{err}");
    assert!(err.contains("Not a directory"), "{err}");
    assert!(
        err.contains("record while the directory is unusable"),
        "console still gets it"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn deleted_log_file_is_recreated() {
    if is_child() {
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        umd::log::ensure_init();
        tracing::info!("before delete");
        flush();
        let path = log_path(&dir, std::process::id());
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        tracing::info!("after delete");
        flush();
        let got = lines(&path);
        assert!(
            got.iter()
                .any(|l| l.contains("was deleted or replaced; reopened")),
            "{got:#?}"
        );
        assert!(got.last().unwrap().contains("after delete"), "{got:#?}");
        return;
    }
    let dir = fresh_dir("deleted");
    let o = run_child(
        "deleted_log_file_is_recreated",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_FLUSH_MS", "20"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}
