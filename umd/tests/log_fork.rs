//! After `fork` the child has no writer thread: the log restarts there on the next call, writes
//! `umd-<child pid>.log` with the child's thread id, and neither process sees the other's records
//! or re-writes records queued before the fork.

#[path = "log_util.rs"]
mod util;
use util::*;

fn messages(p: &std::path::Path) -> Vec<String> {
    lines(p)
        .iter()
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect()
}

#[test]
fn fork_child_logs_to_its_own_file() {
    if is_child() {
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        umd::log::ensure_init();
        tracing::info!("before fork");
        flush();
        // Queued but not yet written at fork time: the parent writes it, the child must not.
        tracing::info!("queued at fork");
        // SAFETY: the child only logs, checks files and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            tracing::info!(n = 1u32, "in the forked child");
            let flushed = umd::abi::log::umdLogFlush(5000) == umd::umdResult::UMD_SUCCESS;
            // SAFETY: getpid has no preconditions.
            let me = unsafe { libc::getpid() } as u32;
            let mine = lines(&log_path(&dir, me));
            let ok = flushed
                && mine.len() == 1
                && mine[0].contains("\"in the forked child\"")
                && mine[0].contains(&format!(" tid={} ", tid()));
            if !ok {
                eprintln!("forked child saw: flushed={flushed} {mine:#?}");
            }
            // SAFETY: leave without running the parent's test harness teardown.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        tracing::info!("in the parent after fork");
        let mut status = 0;
        // SAFETY: waiting for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "forked child failed"
        );
        flush();
        assert_eq!(
            messages(&log_path(&dir, std::process::id())),
            ["before fork", "queued at fork", "in the parent after fork"]
        );
        assert_eq!(
            messages(&log_path(&dir, pid as u32)),
            ["in the forked child"]
        );
        return;
    }
    let dir = fresh_dir("fork");
    let o = run_child(
        "fork_child_logs_to_its_own_file",
        &[("UMD_LOG_DIR", dir.to_str().unwrap())],
    );
    assert_ok(&o);
    assert_eq!(log_files(&dir).len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
