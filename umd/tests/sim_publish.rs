//! A simulator-backed process publishes its devices' debugfs views for tools outside it
//! (umd/src/backend/sim/publish.rs; docs/libumd.md, "Simulated devices seen from outside"):
//! tests/c/sim_hold.c holds a device with two contexts and a 1 MiB buffer while these tests read
//! its directory. The pool is off (`UMD_POOL=off`) so the device's memory is the buffer's alone.

#[path = "c_util.rs"]
mod c_util;
#[path = "support/sim_hold.rs"]
mod sim_hold_util;

use sim_hold_util::{command, dev_dir, field, fresh, wait_until, Holder};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The `sim_publish_off` WARN records on a process's stderr.
fn publish_warnings(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains("event=sim_publish_off"))
        .map(str::to_string)
        .collect()
}

/// The `clients` file once it shows both jobs, which must be its only line.
fn clients_after_the_work(dir: &Path, pid: u32) {
    let clients = wait_until(|| {
        std::fs::read_to_string(dir.join("clients"))
            .ok()
            .filter(|c| c.contains(" jobs=2"))
    })
    .expect("clients published with both jobs");
    assert_eq!(
        clients,
        format!("client=1 pid={pid} comm=sim_hold mem=1048576 objects=1 contexts=2 jobs=2\n")
    );
}

#[test]
fn a_live_process_publishes_its_views_and_removes_them_at_close() {
    let base = fresh("live");
    let h = Holder::start(command(&base, "", &[("UMD_POOL", "off")]));
    let dir = dev_dir(&base, h.pid, 0);
    // The first rounds may be written before the work is done: wait for the state it holds.
    sim_hold_util::wait_for_the_work(&dir);
    clients_after_the_work(&dir, h.pid);
    let status = read(&dir.join("status"));
    for (k, v) in [
        ("device", "sim0"),
        ("state", "ok"),
        ("mem_used", "1048576"),
        ("clients", "1"),
        ("contexts", "2"),
        ("jobs", "2"),
        ("faults", "0"),
    ] {
        assert_eq!(field(status.trim_end(), k), Some(v), "{k} in {status}");
    }
    let contexts = read(&dir.join("contexts"));
    let lines: Vec<&str> = contexts.lines().collect();
    assert_eq!(lines.len(), 2, "{contexts}");
    assert_eq!(
        lines[0],
        format!("ctx=1 client=1 pid={} comm=sim_hold queue=1 prio=normal submitted=1 completed=1 reset=none hung=0", h.pid)
    );
    assert_eq!(
        lines[1],
        format!("ctx=2 client=1 pid={} comm=sim_hold queue=0 prio=high submitted=1 completed=1 reset=none hung=0", h.pid)
    );
    assert_eq!(read(&dir.join("queues")).lines().count(), 4);
    assert_eq!(read(&dir.join("name")), "aigpu dev=sim0 unique=sim0\n");
    let owner = umd::backend::sim::publish::Owner::parse(&read(&dir.join("owner"))).expect("owner");
    let stat = read(Path::new(&format!("/proc/{}/stat", h.pid)));
    assert_eq!(
        (
            owner.pid,
            owner.uid,
            owner.comm.as_str(),
            owner.backend_why.as_str(),
            owner.device.as_str()
        ),
        (h.pid, uid(), "sim_hold", "requested", "sim0")
    );
    assert_eq!(
        Some(owner.start_time),
        umd::backend::sim::publish::start_time(&stat)
    );
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(owner.updated_unix_ms <= now_ms && now_ms - owner.updated_unix_ms < 60_000);
    // The per-user directory is this user's alone; no temporary file is left behind.
    let user = base.join(format!("aigpu-sim-{}", uid()));
    let m = std::fs::symlink_metadata(&user).expect("user dir");
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o700, uid()));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dev dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["clients", "contexts", "name", "owner", "queues", "status"]
    );

    let pid = h.pid;
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    assert_eq!(end.stdout, "closed\n");
    assert!(!dir.exists(), "{} left after close", dir.display());
    assert!(
        !user.join(pid.to_string()).exists(),
        "pid dir left after close"
    );
    assert!(user.is_dir());
    assert_eq!(publish_warnings(&end.stderr), Vec::<String>::new());
}

/// Runs sim_hold below `base` for `ms` (past a few publishing periods) and checks that it
/// worked and said exactly one `sim_publish_off` WARN: (its pid, the WARN line).
fn works_with_one_warning(base: &Path, envs: &[(&str, &str)], ms: u64) -> (u32, String) {
    let h = Holder::start(command(base, "", envs));
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let pid = h.pid;
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    assert_eq!(end.stdout, "closed\n");
    let mut w = publish_warnings(&end.stderr);
    assert_eq!(w.len(), 1, "{}", end.stderr);
    (pid, w.remove(0))
}

/// Runs sim_hold with the per-user directory prepared by `prepare`, and checks that the process
/// works, nothing is published and one WARN names the directory and why.
fn refused(name: &str, prepare: impl FnOnce(&Path), why: &str) {
    let base = fresh(name);
    let user = base.join(format!("aigpu-sim-{}", uid()));
    prepare(&user);
    let (pid, w) = works_with_one_warning(&base, &[], 400);
    assert!(w.contains(&format!("path={} ", user.display())), "{w}");
    assert!(w.contains(&format!("reason=\"{why}\"")), "{w}");
    assert!(!user.join(pid.to_string()).exists());
}

#[test]
fn a_symlink_in_place_of_the_per_user_directory_turns_publishing_off() {
    let target = fresh("symlink-target");
    refused(
        "symlink",
        |user| std::os::unix::fs::symlink(&target, user).expect("symlink"),
        "it is a symbolic link",
    );
    assert_eq!(std::fs::read_dir(&target).expect("target").count(), 0);
}

#[test]
fn a_file_in_place_of_the_per_user_directory_turns_publishing_off() {
    refused(
        "file",
        |user| std::fs::write(user, "x").expect("file"),
        "it is not a directory",
    );
}

#[test]
fn a_per_user_directory_others_may_write_turns_publishing_off() {
    refused(
        "mode",
        |user| {
            std::fs::create_dir(user).expect("dir");
            std::fs::set_permissions(user, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        },
        "it is writable by other users (mode 777)",
    );
}

#[test]
fn a_per_user_directory_of_another_uid_turns_publishing_off() {
    if uid() != 0 {
        eprintln!("skipped: chown needs root");
        return;
    }
    refused(
        "owner",
        |user| {
            std::fs::create_dir(user).expect("dir");
            std::os::unix::fs::chown(user, Some(65534), Some(65534)).expect("chown");
        },
        "it belongs to uid 65534, not to this process's uid 0",
    );
}

#[test]
fn a_missing_base_directory_turns_publishing_off() {
    let top = fresh("missing");
    let base = top.join("absent");
    let logs = top.join("logs");
    let (_, w) = works_with_one_warning(&base, &[("UMD_LOG_DIR", logs.to_str().expect("utf8"))], 0);
    assert!(
        w.contains("reason=\"No such file or directory (os error 2)\""),
        "{w}"
    );
    assert!(!base.exists());
}

#[test]
fn a_full_file_system_is_one_warning_and_the_process_keeps_working() {
    if uid() != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let base = fresh("enospc");
    // Two pages: `name` and `status` fit, `queues` does not.
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8k", "tmpfs"])
        .arg(&base)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: cannot mount a tmpfs");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _u = Unmount(&base);
    // Later rounds stay silent.
    let (pid, w) = works_with_one_warning(&base, &[], 700);
    let dir = dev_dir(&base, pid, 0);
    assert!(
        w.contains(&format!("path={} ", dir.join("queues").display()))
            && w.contains("No space left on device"),
        "{w}"
    );
    // The close removes what was written.
    assert!(!dir.exists());
}

#[test]
fn publishing_off_writes_nothing_and_the_process_story_says_so() {
    let base = fresh("off");
    let h = Holder::start(command(&base, "", &[("UMD_SIM_PUBLISH", "0")]));
    std::thread::sleep(std::time::Duration::from_millis(400));
    assert!(!base.join(format!("aigpu-sim-{}", uid())).exists());
    let pid = h.pid;
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    let names: Vec<String> = std::fs::read_dir(&base)
        .expect("base")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["logs"]);
    let log = read(&base.join("logs").join(format!("umd-{pid}.log")));
    let setting = log
        .lines()
        .find(|l| l.contains("event=setting name=sim_publish "))
        .expect("sim_publish setting record");
    assert!(
        setting.contains("value=false default=true src=environment variable=UMD_SIM_PUBLISH"),
        "{setting}"
    );
}

#[test]
fn a_mistyped_setting_value_fails_the_open_naming_it() {
    for (var, value, says) in [
        (
            "UMD_SIM_PUBLISH",
            "yes",
            "UMD_SIM_PUBLISH=\"yes\" is not a whole number in 0..=1",
        ),
        (
            "UMD_SIM_DIR",
            "relative/dir",
            "UMD_SIM_DIR=\"relative/dir\" is not an absolute path",
        ),
    ] {
        let base = fresh("typo");
        let o = command(&base, "", &[(var, value)])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        let line = err
            .lines()
            .find(|l| l.starts_with("umdDeviceOpen(0, &dev): "))
            .unwrap_or_else(|| panic!("{err}"));
        assert!(
            line.starts_with("umdDeviceOpen(0, &dev): UMD_ERR_INIT_BAD_CONFIG: ")
                && line.contains(says),
            "{line}"
        );
    }
}

#[test]
fn a_forked_child_does_not_publish_as_its_parent() {
    let base = fresh("fork");
    let h = Holder::start(command(&base, "fork", &[("UMD_POOL", "off")]));
    let child: u32 = h
        .lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("child pid=")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .expect("child line");
    assert!(h
        .lines
        .iter()
        .any(|l| l == &format!("child pid={child} status=0")));
    let user = base.join(format!("aigpu-sim-{}", uid()));
    // The child slept past a publishing period and exited with exit(): nothing of its own, and
    // the parent's directory is whole.
    assert!(!user.join(child.to_string()).exists());
    let dir = dev_dir(&base, h.pid, 0);
    let owner = wait_until(|| {
        umd::backend::sim::publish::Owner::parse(&std::fs::read_to_string(dir.join("owner")).ok()?)
    })
    .expect("parent's owner file");
    assert_eq!(owner.pid, h.pid);
    clients_after_the_work(&dir, h.pid);
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    assert!(!dir.exists());
}

#[test]
fn a_process_that_exits_with_its_device_open_removes_its_directory() {
    let base = fresh("leave");
    let h = Holder::start(command(&base, "leave", &[("UMD_POOL", "off")]));
    let dir = dev_dir(&base, h.pid, 0);
    clients_after_the_work(&dir, h.pid);
    let pid = h.pid;
    let end = h.finish();
    assert_eq!(
        (end.code, end.stdout.as_str()),
        (Some(0), "left open\n"),
        "{}",
        end.stderr
    );
    assert!(!dir.exists(), "{} left after exit", dir.display());
    assert!(!base.join(format!("aigpu-sim-{}/{pid}", uid())).exists());
}

#[test]
fn the_next_process_removes_the_directory_a_killed_one_left() {
    let base = fresh("sweep");
    let killed = Holder::start(command(&base, "", &[]));
    let left = dev_dir(&base, killed.pid, 0);
    wait_until(|| left.join("owner").exists().then_some(())).expect("published");
    let end = killed.kill();
    assert_eq!(end.code, None);
    assert!(
        left.join("owner").exists(),
        "a killed process cannot clean up"
    );
    // A directory being created (no owner yet) is left alone.
    let creating = dev_dir(&base, 1, 0);
    std::fs::create_dir_all(&creating).expect("mkdir");
    let next = Holder::start(command(&base, "", &[]));
    assert!(!left.exists(), "{} not removed", left.display());
    assert!(!left.parent().expect("pid dir").exists());
    assert!(creating.exists());
    let mine = dev_dir(&base, next.pid, 0);
    wait_until(|| mine.join("owner").exists().then_some(())).expect("published");
    let end = next.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
}
