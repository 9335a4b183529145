//! `umd-smi` and `umd-smi triage` against fixture machines written by hand from
//! docs/debugfs.md and docs/kmd.md (fake sysfs / procfs / debugfs trees, dmesg texts, recorded
//! libumd logs): the exact screen output, the report directory and archive, the JSON, and every
//! verdict line issue 7 names.

mod common;
use common::*;
use std::path::Path;

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");
const NOW: &str = "2026-11-29T02:15:00Z";

/// Runs triage on machine directory `m` with `extra` arguments; returns (screen with the
/// report path replaced by `<OUT>`, the output directory).
fn triage(m: &Path, logs: &Path, extra: &[&str]) -> (String, std::path::PathBuf, i32) {
    let out = m.join("out");
    let root = m.join("root");
    let dmesg = m.join("dmesg.txt");
    let mut args = vec![
        "triage",
        "--root",
        root.to_str().expect("utf-8"),
        "--dmesg",
        dmesg.to_str().expect("utf-8"),
        "--log-dir",
        logs.to_str().expect("utf-8"),
        "--now",
        NOW,
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let o = run(SMI, &args);
    let screen = scrub(&stdout(&o), &out, "<OUT>");
    (screen, out, o.status.code().unwrap_or(-1))
}

fn report_dir(out: &Path) -> std::path::PathBuf {
    out.join("aigpu-triage-20261129T021500Z")
}

fn archive_names(out: &Path) -> Vec<String> {
    let f = std::fs::File::open(out.join("aigpu-triage-20261129T021500Z.tar.gz")).expect("archive");
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    let mut v: Vec<String> = a
        .entries()
        .expect("entries")
        .map(|e| {
            e.expect("entry")
                .path()
                .expect("path")
                .display()
                .to_string()
        })
        .collect();
    v.sort();
    v
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The verdict lines (layer: text) of a screen.
fn verdict_line<'a>(screen: &'a str, layer: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.starts_with(&format!("  {layer}: ")))
        .unwrap_or_else(|| panic!("no {layer} line in\n{screen}"))
}

#[test]
fn healthy_machine_all_ok() {
    let m = machine("healthy");
    let (screen, out, rc) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(rc, 0);
    golden("triage-healthy.txt", &screen);
    let dir = report_dir(&out);
    golden("summary-healthy.txt", &read(&dir.join("summary.txt")));
    let names = archive_names(&out);
    for f in [
        "aigpu-triage-20261129T021500Z/summary.txt",
        "aigpu-triage-20261129T021500Z/verdict.json",
        "aigpu-triage-20261129T021500Z/debugfs/dri-0/status",
        "aigpu-triage-20261129T021500Z/modinfo.txt",
        "aigpu-triage-20261129T021500Z/dmesg-aigpu.txt",
        "aigpu-triage-20261129T021500Z/processes.txt",
        "aigpu-triage-20261129T021500Z/umd-logs/umd-4411.log",
    ] {
        assert!(names.contains(&f.to_string()), "{f} not in {names:#?}");
    }
    golden("modinfo-healthy.txt", &read(&dir.join("modinfo.txt")));
    golden("processes-healthy.txt", &read(&dir.join("processes.txt")));
    golden(
        "dmesg-aigpu-healthy.txt",
        &read(&dir.join("dmesg-aigpu.txt")),
    );
}

#[test]
fn module_not_loaded() {
    let m = machine("not-loaded");
    let (screen, _, rc) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(rc, 0, "a report was produced");
    golden("triage-not-loaded.txt", &screen);
    assert_eq!(
        verdict_line(&screen, "kernel module"),
        "  kernel module: kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu')"
    );
    // umd-smi says why there is no device, with libumd's code, and exits 1.
    let root = m.join("root");
    let o = run(
        SMI,
        &["--root", root.to_str().expect("utf-8"), "--now", NOW],
    );
    assert_eq!(o.status.code(), Some(1));
    golden("smi-not-loaded.txt", &stdout(&o));
}

#[test]
fn module_not_installed_for_the_running_kernel() {
    let m = machine("not-loaded");
    let (screen, _, _) = triage(&m, &m.join("logs"), &["--uname-r", "7.3.9"]);
    assert_eq!(
        verdict_line(&screen, "kernel module"),
        "  kernel module: no usable aigpu.ko for the running kernel 7.3.9: no aigpu.ko under /lib/modules/7.3.9 (nor /lib/modules/aigpu.ko)"
    );
}

#[test]
fn version_magic_mismatch() {
    let m = machine("version-magic");
    let (screen, out, rc) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(rc, 0);
    golden("triage-version-magic.txt", &screen);
    assert_eq!(
        verdict_line(&screen, "kernel module"),
        "  kernel module: aigpu.ko built for 7.3.4 but running kernel is 7.3.5 — version magic mismatch"
    );
    golden(
        "summary-version-magic.txt",
        &read(&report_dir(&out).join("summary.txt")),
    );
    // --json carries the same verdict.
    let m2 = machine("version-magic");
    let (js, _, _) = triage(&m2, &m2.join("logs"), &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&js).expect("triage --json");
    assert_eq!(v["report_dir"], "<OUT>/aigpu-triage-20261129T021500Z");
    assert_eq!(v["verdict"][1]["layer"], "kernel module");
    assert_eq!(v["verdict"][1]["status"], "finding");
    assert_eq!(
        v["verdict"][1]["findings"][0]["evidence"][0]["line"],
        "[    3.512345] aigpu: version magic '7.3.4 SMP preempt mod_unload ' should be '7.3.5 SMP preempt mod_unload '"
    );
    assert_eq!(v["verdict"][0]["status"], "not_checked");
}

#[test]
fn unknown_symbol() {
    let m = machine("version-magic");
    std::fs::copy(m.join("dmesg-unknown-symbol.txt"), m.join("dmesg.txt")).expect("dmesg");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    let km: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.starts_with("  kernel module: "))
        .take(2)
        .collect();
    assert_eq!(
        km,
        vec![
            "  kernel module: aigpu.ko needs symbol drm_gem_shmem_unpin, which the running kernel 7.3.5 does not export — unknown symbol (module built for another kernel or configuration)",
            "    evidence (dmesg): [    3.512390] aigpu: Unknown symbol drm_gem_shmem_unpin (err -2)",
        ]
    );
}

#[test]
fn uapi_mismatch_from_libumd_log() {
    let m = machine("uapi-mismatch");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    golden("triage-uapi-mismatch.txt", &screen);
    assert_eq!(
        verdict_line(&screen, "user-space driver"),
        "  user-space driver: libumd in pid 7001 ran on the simulator, not the GPU (UMD_BACKEND=auto): libumd UAPI 1.4 needs kernel UAPI ≥ 1.3, found 1.2"
    );
}

#[test]
fn uapi_mismatch_from_debugfs() {
    let m = machine("healthy");
    let st = m.join("root/sys/kernel/debug/dri/0/status");
    std::fs::write(&st, read(&st).replace("uapi=1.0", "uapi=2.0")).expect("status");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    let want = format!(
        "  user-space driver: libumd UAPI {}.{} needs kernel UAPI {}.x with x ≥ {}, found 2.0 (a different major version)",
        uapi::UAPI_MAJOR,
        uapi::UAPI_MINOR,
        uapi::UAPI_MAJOR,
        uapi::MIN_KERNEL_MINOR
    );
    assert_eq!(verdict_line(&screen, "user-space driver"), want);
    let ev = screen
        .lines()
        .skip_while(|l| !l.starts_with("  user-space driver: "))
        .nth(1);
    assert_eq!(
        ev,
        Some("    evidence (/sys/kernel/debug/dri/0/status): device=aigpu0 state=ok uapi=2.0 driver=0.1.0 hw=1.0 mem_total=268435456 mem_used=1052672 clients=1 contexts=2 jobs=1201 faults=0 hangs=0 resets=0 job_timeout_ms=2000 hang_debug=0")
    );
}

#[test]
fn faulted_context_names_pid_and_comm() {
    let m = machine("faulted");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    golden("triage-faulted.txt", &screen);
    assert_eq!(
        verdict_line(&screen, "application"),
        "  application: a page fault at 0x7f0010000 in context 12 (pid 4411, python) on aigpu0 at 2026-11-29 02:13:07 UTC (unmapped read) — the context was banned; other contexts keep running"
    );
    let root = m.join("root");
    let o = run(
        SMI,
        &["--root", root.to_str().expect("utf-8"), "--now", NOW],
    );
    assert_eq!(o.status.code(), Some(0));
    golden("smi-faulted.txt", &stdout(&o));
}

#[test]
fn lost_device() {
    let m = machine("lost");
    let logs = fixtures().join("logs");
    let (screen, out, _) = triage(&m, &logs, &[]);
    golden("triage-lost.txt", &screen);
    assert_eq!(
        verdict_line(&screen, "application"),
        "  application: device lost at 02:13:07 after a page fault at 0x7f0010000 in context 12 (pid 4411, python)"
    );
    let dir = report_dir(&out);
    golden("summary-lost.txt", &read(&dir.join("summary.txt")));
    golden("verdict-lost.json", &read(&dir.join("verdict.json")));
    golden(
        "umd-log-report-lost.txt",
        &read(&dir.join("umd-log-report.txt")),
    );
    // The logs and the black box travel with the report.
    let names = archive_names(&out);
    for f in [
        "umd-logs/umd-4411.2.log",
        "umd-logs/umd-4411.1.log",
        "umd-logs/umd-4411.log",
        "umd-logs/umd-5120.log",
        "umd-logs/umd-blackbox-4411-20261129T021307.455100Z.log",
        "debugfs/dri-0/crashdumps/crash-3",
    ] {
        let p = format!("aigpu-triage-20261129T021500Z/{f}");
        assert!(names.contains(&p), "{p} not in {names:#?}");
    }
}

#[test]
fn render_node_missing() {
    let m = machine("healthy");
    std::fs::remove_file(m.join("root/dev/dri/renderD128")).expect("rm node");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "kernel module"),
        "  kernel module: /dev/dri/renderD128 does not exist although the kernel registered /sys/class/drm/renderD128 for aigpu0"
    );
}

#[test]
fn smi_views_text_json_and_refresh() {
    let m = machine("healthy");
    let root = m.join("root");
    let r = root.to_str().expect("utf-8");
    let o = run(SMI, &["--root", r, "--now", NOW]);
    assert_eq!(o.status.code(), Some(0));
    let frame = stdout(&o);
    golden("smi-healthy.txt", &frame);
    let o = run(SMI, &["--root", r, "--now", NOW, "--json"]);
    let json = stdout(&o);
    golden("smi-healthy.json", &json);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["devices"][0]["clients"][0]["comm"], "python");
    assert_eq!(v["devices"][0]["queues"][0]["busy_pct"], 37);
    // -l 1 --count 2: the same view twice, a second apart.
    let t = std::time::Instant::now();
    let o = run(SMI, &["--root", r, "--now", NOW, "-l", "1", "--count", "2"]);
    assert!(t.elapsed() >= std::time::Duration::from_secs(1));
    assert_eq!(stdout(&o), format!("{frame}\n{frame}"));
    let o = run(
        SMI,
        &[
            "--root", r, "--now", NOW, "-l", "1", "--count", "2", "--json",
        ],
    );
    let lines: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 2, "one JSON document per line");
    for l in &lines {
        let x: serde_json::Value = serde_json::from_str(l).expect("json line");
        assert_eq!(x, v);
    }
}

#[test]
fn smi_lost_device() {
    let m = machine("lost");
    let root = m.join("root");
    let o = run(
        SMI,
        &["--root", root.to_str().expect("utf-8"), "--now", NOW],
    );
    golden("smi-lost.txt", &stdout(&o));
}

/// Without debugfs (a user it is closed to), `umd-smi` shows the clients whose fdinfo this user
/// can read: every open aigpu file of the device, on its render node or its primary node
/// (docs/kmd.md, "fdinfo": both have the keys).
#[test]
fn smi_clients_from_fdinfo() {
    let m = machine("healthy");
    let root = m.join("root");
    std::fs::remove_dir_all(root.join("sys/kernel/debug/dri")).expect("rm debugfs dri");
    let fdinfo = |client: u32, objects: u32, kib: u32, jobs: u32| {
        format!(
            "pos:\t0\nflags:\t02100002\nmnt_id:\t20\nino:\t605\ndrm-driver:\taigpu\ndrm-client-id:\t{client}\n\
drm-engine-compute:\t2500000 ns\ndrm-total-memory:\t{kib} KiB\ndrm-shared-memory:\t0\n\
drm-resident-memory:\t{kib} KiB\ndrm-active-memory:\t0\naigpu-client:\t{client}\naigpu-contexts:\t1\n\
aigpu-jobs-submitted:\t{jobs}\naigpu-jobs-inflight:\t0\naigpu-jobs-completed:\t{jobs}\naigpu-faults:\t0\n\
aigpu-hangs:\t0\naigpu-resets:\t0\naigpu-objects:\t{objects}\naigpu-mappings:\t{objects}\naigpu-lost:\t0\n"
        )
    };
    let p = root.join("proc/4411");
    std::fs::create_dir_all(p.join("fdinfo")).expect("fdinfo dir");
    std::fs::write(p.join("fdinfo/5"), fdinfo(5, 3, 1152, 16)).expect("fdinfo 5");
    std::os::unix::fs::symlink("/dev/dri/card0", p.join("fd/6")).expect("fd 6");
    std::fs::write(p.join("fdinfo/6"), fdinfo(6, 1, 64, 2)).expect("fdinfo 6");
    let o = run(
        SMI,
        &["--root", root.to_str().expect("utf-8"), "--now", NOW],
    );
    let text = stdout(&o);
    let clients: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("  clients (this user's, from /proc/<pid>/fdinfo):"))
        .collect();
    assert_eq!(
        clients,
        vec![
            "  clients (this user's, from /proc/<pid>/fdinfo):",
            "    pid   comm    fd  busy    memory    contexts  jobs  faults  lost",
            "    4411  python  5   2.5 ms  1.1 MiB   1         16    0       0",
            "    4411  python  6   2.5 ms  64.0 KiB  1         2     0       0",
        ],
        "{text}"
    );
    let o = run(
        SMI,
        &[
            "--root",
            root.to_str().expect("utf-8"),
            "--now",
            NOW,
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    let fc = &v["devices"][0]["fdinfo_clients"];
    assert_eq!(fc.as_array().map(Vec::len), Some(2), "{v:#}");
    assert_eq!(fc[1]["fd"], "6");
    assert_eq!(fc[1]["client_id"], 6);
    assert_eq!(fc[1]["aigpu"]["jobs-completed"], 2);
    assert_eq!(fc[1]["memory"][0]["stat"], "total");
    assert_eq!(fc[1]["memory"][0]["bytes"], 65536);
}

#[test]
fn usage_errors_are_clear() {
    // clap's wording (tools/src/cli.rs), status 2.
    let err = |args: &[&str]| {
        let o = run(SMI, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(err(&["-l"])
        .starts_with("error: a value is required for '--loop <SECONDS>' but none was supplied\n"));
    assert!(err(&["-l", "soon"]).starts_with(
        "error: invalid value 'soon' for '--loop <SECONDS>': not a number of seconds (1, 0.5, 250ms)\n"
    ));
    assert!(err(&["--now", "yesterday"]).starts_with(
        "error: invalid value 'yesterday' for '--now <TIME>': not an RFC 3339 time (2026-11-29T02:15:00Z)\n"
    ));
    let o = run(
        SMI,
        &["triage", "-o", "/proc/version/x", "--root", "/nonexistent"],
    );
    assert_eq!(o.status.code(), Some(1), "no report, exit 1");
    assert!(stdout(&o).contains("umd-smi triage: could not write the report: /proc/version/x: "));
}

/// Triage as an unprivileged user: debugfs is root-only, other users' /proc/<pid>/fd are
/// closed, the render node cannot be opened. It still writes the report, lists what it could
/// not read, and the verdict says what it can.
#[test]
fn triage_without_root() {
    let m = machine("healthy");
    let root = m.join("root");
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    // debugfs is 0700 root on a real machine; a non-root test user makes it unreadable to
    // itself with 0000.
    set_mode(
        &root.join("sys/kernel/debug"),
        if as_root { 0o700 } else { 0o000 },
    );
    for p in ["4411", "4412"] {
        set_mode(
            &root.join(format!("proc/{p}/fd")),
            if as_root { 0o500 } else { 0o000 },
        );
    }
    let out = m.join("out");
    std::fs::create_dir_all(&out).expect("out");
    set_mode(&out, 0o777);
    // The binary is copied next to the tree: the target directory may not be reachable for
    // nobody (e.g. below /root).
    let bin = m.join("umd-smi");
    std::fs::copy(SMI, &bin).expect("copy binary");
    set_mode(&bin, 0o755);
    let mut c = std::process::Command::new(&bin);
    c.args([
        "triage",
        "--root",
        root.to_str().expect("utf-8"),
        "--dmesg",
        m.join("dmesg.txt").to_str().expect("utf-8"),
        "--log-dir",
        m.join("logs").to_str().expect("utf-8"),
        "--now",
        NOW,
        "-o",
        out.to_str().expect("utf-8"),
    ])
    .env_clear();
    if as_root {
        use std::os::unix::process::CommandExt;
        c.uid(65534).gid(65534);
    }
    // A copied executable can be briefly "busy" while another test thread forks with the copy's
    // write descriptor open: retry.
    let mut tries = 0;
    let o = loop {
        match c.output() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            r => break r.expect("spawn triage"),
        }
    };
    let screen = scrub(&stdout(&o), &out, "<OUT>");
    // Restore so the scratch tree can be removed.
    set_mode(&root.join("sys/kernel/debug"), 0o755);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{screen}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(report_dir(&out).join("summary.txt").exists());
    assert!(out.join("aigpu-triage-20261129T021500Z.tar.gz").exists());
    let not_read: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.starts_with("could not read ("))
        .skip(1)
        .take_while(|l| l.starts_with("  ") && !l.starts_with("  hardware:"))
        .collect();
    assert!(
        not_read.contains(&"  /sys/kernel/debug: permission denied (debugfs is root-only: run as root for queues, clients, contexts and crash dumps)"),
        "{screen}"
    );
    assert!(
        not_read.contains(&"  /proc/<pid>/fd: permission denied for 2 processes (run as root to see every process holding the device)"),
        "{screen}"
    );
    assert_eq!(
        verdict_line(&screen, "hardware"),
        "  hardware: OK — aigpu0 state unknown; no bus, memory or reset errors (as far as visible: debugfs not read)"
    );
    if as_root {
        // nobody may not open the node (0644 root:root in the fixture).
        assert_eq!(
            verdict_line(&screen, "user-space driver"),
            "  user-space driver: permission denied opening /dev/dri/renderD128 (add the user to the 'render' group)"
        );
    }
    let nr = read(&report_dir(&out).join("not-read.txt"));
    assert!(nr.contains("/sys/kernel/debug: permission denied"), "{nr}");
}

/// Without debugfs and dmesg (an unprivileged user on a machine with dmesg_restrict), the
/// application layer comes from libumd's logs, per process.
#[test]
fn lost_device_from_libumd_logs_only() {
    let m = machine("lost");
    std::fs::remove_dir_all(m.join("root/sys/kernel/debug/dri")).expect("rm debugfs dri");
    std::fs::write(m.join("dmesg.txt"), "").expect("empty dmesg");
    let (screen, _, _) = triage(&m, &fixtures().join("logs"), &[]);
    let app: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.starts_with("  application: "))
        .collect();
    assert_eq!(
        app,
        vec![
            "  application: GPU page fault (unmapped read) at 0x7f0010000 in context 1 (pid 4411), packet at offset 24 of its command buffer: in no live buffer and near none (the nearest: 31.7 GiB past the end of buffer 8 (4.0 KiB at 0x610000, context 2)); the context was banned",
            "    evidence (umd log umd-4411.log:4): 2026-11-29T02:13:07.159900Z 7987686445000 ERROR tid=4411 umd::context - umd/src/context.rs:156 ctx=1 code=- \"context lost\" event=ctx_lost kmd_ctx=12 cause=fault reset=guilty fault=unmapped access=read va=0x7f0010000 offset=24 submitted=57 completed=56",
            "    fix: the packet's address is outside every live buffer of the context: check the device pointer it was recorded with (a freed or foreign buffer, a wrong offset or leading dimension)",
            "    (2 more findings: see \"all findings\" in summary.txt)",
        ],
        "{screen}"
    );
}

/// A lost device that the kernel has power-cycled since (the next open after its last context
/// was gone): debugfs says `state=ok`, but the kernel log keeps the loss, and the verdict still
/// names it and what came before it.
#[test]
fn lost_device_reinitialised_since() {
    let m = machine("lost");
    let status = m.join("root/sys/kernel/debug/dri/0/status");
    let st = read(&status).replace("state=lost", "state=ok");
    std::fs::write(&status, st).expect("status");
    let mut dmesg = read(&m.join("dmesg.txt"));
    dmesg.push_str("[ 7990.100000] aigpu aigpu0: device re-initialised: method=power_cycle lost_cause=reset_failed; no context was left on it\n");
    std::fs::write(m.join("dmesg.txt"), dmesg).expect("dmesg");
    let (screen, _, _) = triage(&m, &fixtures().join("logs"), &[]);
    let hw: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.starts_with("  hardware: "))
        .take(3)
        .collect();
    assert_eq!(
        hw,
        vec![
            "  hardware: aigpu0 was lost (an engine reset failed) and has been re-initialised since",
            "    evidence (dmesg): [ 7987.652113] aigpu aigpu0: device lost: cause=reset_failed injected=0; every ioctl now fails with ENODEV",
            "    evidence (dmesg): [ 7990.100000] aigpu aigpu0: device re-initialised: method=power_cycle lost_cause=reset_failed; no context was left on it",
        ],
        "{screen}"
    );
    assert_eq!(
        verdict_line(&screen, "application"),
        "  application: device lost at 02:13:07 after a page fault at 0x7f0010000 in context 12 (pid 4411, python) (re-initialised since)"
    );
}

/// A loss whose line says the device fell off the bus, injected by a test: the hardware finding
/// says both, from the line's `cause` and `injected` fields, and so do its JSON fields.
#[test]
fn lost_off_the_bus_by_injection() {
    let m = machine("lost");
    let dmesg = read(&m.join("dmesg.txt")).replace(
        "device lost: cause=reset_failed injected=0;",
        "device lost: cause=off_bus injected=1;",
    );
    std::fs::write(m.join("dmesg.txt"), dmesg).expect("dmesg");
    let (screen, out, _) = triage(&m, &fixtures().join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "hardware"),
        "  hardware: aigpu0 is lost: it fell off the bus, injected through debugfs inject_fall_off_bus (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)",
        "{screen}"
    );
    let f = verdict_finding(&out, "hardware");
    assert_eq!(f["kind"], "device_lost");
    assert_eq!(f["cause"], "off_bus");
    assert_eq!(f["injected"], true);
    assert_eq!(
        f["evidence"][0]["line"],
        "[ 7987.652113] aigpu aigpu0: device lost: cause=off_bus injected=1; every ioctl now fails with ENODEV"
    );
}

/// A device lost now whose `device lost` line is not in the kernel log read (rotated out): the
/// finding says the cause is unknown instead of guessing one, and its JSON has no cause.
#[test]
fn lost_without_its_kernel_line_has_no_guessed_cause() {
    let m = machine("lost");
    let dmesg: String = read(&m.join("dmesg.txt"))
        .lines()
        .filter(|l| !l.contains("device lost: cause="))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(m.join("dmesg.txt"), dmesg).expect("dmesg");
    let (screen, out, _) = triage(&m, &fixtures().join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "hardware"),
        "  hardware: aigpu0 is lost: the cause is not in the kernel log read (its `device lost` line is not there: rotated out of the ring buffer, or dmesg not readable) (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)",
        "{screen}"
    );
    let f = verdict_finding(&out, "hardware");
    assert_eq!(f["kind"], "device_lost");
    assert_eq!(f["cause"], serde_json::Value::Null);
    assert_eq!(f["injected"], serde_json::Value::Null);
}

/// A memory error that banned a context is the hardware's, never that context's page fault;
/// injected, it says so.
#[test]
fn memory_error_is_hardware_not_a_page_fault() {
    let m = machine("healthy");
    let mut dmesg = read(&m.join("dmesg.txt"));
    dmesg.push_str("[ 7000.000001] aigpu aigpu0: uncorrectable memory error: fault=bus-error access=read va=0x40000000 offset=8 queue=0 ctx=3 pid=77 comm=exec_test job=9 injected=1; context banned\n");
    std::fs::write(m.join("dmesg.txt"), dmesg).expect("dmesg");
    let out = hardware_not_application(
        &m,
        "  hardware: uncorrectable device memory error on aigpu0 at 0x40000000 in context 3 (pid 77, exec_test), injected through debugfs inject_mem_error",
    );
    let f = verdict_finding(&out, "hardware");
    assert_eq!(f["kind"], "memory_error");
    assert_eq!(f["ctx"], 3);
    assert_eq!(f["pid"], 77);
    assert_eq!(f["va"], "0x40000000");
    assert_eq!(f["injected"], true);
    assert_eq!(
        f["fix"],
        "none needed: the fault was injected by a test (debugfs inject_mem_error)"
    );
}

/// A context banned for a memory error (debugfs `contexts` says `fault=bus-error`, the dmesg line
/// has the memory-error lead) is the hardware's finding; the application layer does not call it
/// a page fault.
#[test]
fn a_context_banned_for_a_memory_error_is_not_a_page_fault() {
    let m = machine("faulted");
    let dfs = m.join("root/sys/kernel/debug/dri/0");
    std::fs::remove_dir_all(dfs.join("crashdumps")).expect("no crash dumps");
    let contexts = read(&dfs.join("contexts")).replace("fault=unmapped", "fault=bus-error");
    std::fs::write(dfs.join("contexts"), contexts).expect("contexts");
    let dmesg = read(&m.join("dmesg.txt")).replace(
        "page fault: fault=unmapped",
        "uncorrectable memory error: fault=bus-error",
    );
    std::fs::write(m.join("dmesg.txt"), dmesg).expect("dmesg");
    hardware_not_application(
        &m,
        "  hardware: uncorrectable device memory error on aigpu0 at 0x7f0010000 in context 12 (pid 4411, python)",
    );
}

/// Triage of machine `m` with its own logs: the hardware verdict is `want`, the application's
/// OK (a memory error is never the application's page fault). Returns the output directory.
fn hardware_not_application(m: &Path, want: &str) -> std::path::PathBuf {
    let (screen, out, _) = triage(m, &m.join("logs"), &[]);
    assert_eq!(verdict_line(&screen, "hardware"), want, "{screen}");
    assert!(
        verdict_line(&screen, "application").starts_with("  application: OK"),
        "{screen}"
    );
    out
}

/// A lost device while another device hung later: the loss is told after the lost device's
/// own fault, not after the other device's more recent hang (which is a finding of its own).
#[test]
fn lost_device_cause_is_on_that_device() {
    let m = machine("lost");
    let d1 = m.join("root/sys/kernel/debug/dri/1");
    std::fs::create_dir_all(d1.join("crashdumps")).expect("mkdir dri/1");
    std::fs::write(
        d1.join("status"),
        "device=aigpu1 state=ok uapi=1.0 driver=0.1.0 hw=1.0 mem_total=268435456 mem_used=65536 clients=0 contexts=0 jobs=1 faults=0 hangs=1 resets=1 job_timeout_ms=2000 hang_debug=1\n",
    )
    .expect("status");
    std::fs::write(d1.join("name"), "aigpu dev=aigpu1 unique=aigpu1\n").expect("name");
    for f in ["queues", "clients", "contexts", "vm"] {
        std::fs::write(d1.join(f), "").expect(f);
    }
    std::fs::write(
        d1.join("crashdumps/list"),
        "crash-1 time=2026-11-29T02:14:00.000001Z kind=hang ctx=3\n",
    )
    .expect("list");
    std::fs::write(
        d1.join("crashdumps/crash-1"),
        "aigpu crash dump 1\nkernel=7.3.4 driver=0.1.0 uapi=1.0 device=aigpu1\ntime_wall=2026-11-29T02:14:00.000001Z time_mono_ns=7988000000000\nkind=hang\nprocess pid=5120 comm=train client=2\ncontext ctx=3 queue=1 prio=normal submitted=1 completed=0\nhang job=9 offset=0 timeout_ms=2000\njob id=9 seqno=1 cmdbuf=0 va=0x40000000 size=4\npackets:\n  +0000 HANG   <- executing\nregisters:\n  STATUS=0x00000001\nend\n",
    )
    .expect("crash-1");
    let (screen, _, _) = triage(&m, &fixtures().join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "application"),
        "  application: device lost at 02:13:07 after a page fault at 0x7f0010000 in context 12 (pid 4411, python)",
        "{screen}"
    );
    let dir = report_dir(&m.join("out"));
    let summary = read(&dir.join("summary.txt"));
    assert!(
        summary.contains("a job timeout (GPU hang) in context 3 (pid 5120, train)"),
        "{summary}"
    );
}

/// The module was reloaded after an earlier instance of aigpu0 faulted, hit a memory error and
/// was lost (and after a load attempt with the wrong version magic): those lines stay in dmesg
/// and in the report, but they describe a device that no longer exists, so the verdict is about
/// the device as it is now.
#[test]
fn dmesg_before_the_latest_probe_is_history() {
    let m = machine("healthy");
    let mut dmesg = read(&m.join("dmesg.txt"));
    dmesg.push_str(
        "[   40.000001] aigpu aigpu0: page fault: fault=unmapped access=read va=0x7f0010000 offset=24 queue=0 ctx=12 pid=4411 comm=python job=4711 injected=0; context banned\n\
         [   41.000001] aigpu aigpu0: uncorrectable memory error: fault=bus-error access=fetch va=0x4e10000 offset=0 queue=0 job=0 injected=0; no job of a live context owns it\n\
         [   42.000001] aigpu aigpu0: device lost: cause=reset_failed injected=0; every ioctl now fails with ENODEV\n\
         [   50.000001] aigpu: version magic '7.3.5 SMP preempt mod_unload ' should be '7.3.4 SMP preempt mod_unload '\n\
         [   60.000001] aigpu aigpu0: virtual AI GPU, UAPI 1.0, driver 0.1.0, 256 MiB\n",
    );
    std::fs::write(m.join("dmesg.txt"), &dmesg).expect("dmesg");
    let (screen, out, rc) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(rc, 0);
    for layer in ["hardware", "kernel module", "application"] {
        assert!(
            verdict_line(&screen, layer).starts_with(&format!("  {layer}: OK")),
            "{layer}: {screen}"
        );
    }
    // The report keeps the history.
    let kept = read(&report_dir(&out).join("dmesg-aigpu.txt"));
    assert!(kept.contains("device lost: cause=reset_failed"), "{kept}");

    // A kernel warning in the driver and its leak report stay findings across a reload.
    // (The line as the driver prints it: Rust's `pr_err!` prefixes the module name.)
    let with_leak = dmesg.replace(
        "[   60.000001]",
        "[   55.000000] aigpu: LEAK: aigpu0: 8192 bytes of GEM memory, 0 page-table pages, 0 mappings still accounted at device release\n[   60.000001]",
    );
    std::fs::write(m.join("dmesg.txt"), &with_leak).expect("dmesg");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "kernel module"),
        "  kernel module: aigpu reported resources still accounted at device release",
        "{screen}"
    );

    // The same lines after the latest probe are the current state.
    let (before, after) = dmesg.split_at(dmesg.find("[   60.000001]").expect("probe line"));
    let reordered = format!(
        "{}{}{}",
        &before[..before.find("[   40.000001]").expect("fault")],
        after,
        &before[before.find("[   40.000001]").expect("fault")..]
    );
    std::fs::write(m.join("dmesg.txt"), reordered).expect("dmesg");
    let (screen, _, _) = triage(&m, &m.join("logs"), &[]);
    assert_eq!(
        verdict_line(&screen, "hardware"),
        "  hardware: uncorrectable device memory error on aigpu0 at 0x4e10000",
        "{screen}"
    );
}

/// A layer of `verdict.json` and its first finding.
fn verdict_finding(out: &Path, layer: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&read(&report_dir(out).join("verdict.json"))).expect("verdict.json");
    v.as_array()
        .and_then(|a| a.iter().find(|l| l["layer"] == layer))
        .map(|l| l["findings"][0].clone())
        .unwrap_or_else(|| panic!("no {layer} layer in {v}"))
}

/// A healthy machine whose aigpu0 kept one hang dump, `hang` its `hang` line.
fn hang_machine(hang: &str) -> Scratch {
    let m = machine("healthy");
    let d = m.join("root/sys/kernel/debug/dri/0/crashdumps");
    std::fs::write(
        d.join("list"),
        "crash-1 time=2026-11-29T02:14:00.000001Z kind=hang ctx=12\n",
    )
    .expect("list");
    std::fs::write(
        d.join("crash-1"),
        format!("aigpu crash dump 1\nkernel=7.3.4 driver=0.1.0 uapi=1.0 device=aigpu0\ntime_wall=2026-11-29T02:14:00.000001Z time_mono_ns=7988000000000\nkind=hang\nprocess pid=4411 comm=python client=5\ncontext ctx=12 queue=0 prio=high submitted=120 completed=118\n{hang}\nring queue=0 head=3 tail=4 base=0x7080000 size=1024\nregisters:\n  STATUS=0x00000001\nend\n"),
    )
    .expect("crash-1");
    m
}

/// The crash dump's hang facts reach the verdict: a WAIT_MEM that never came is a genuine hang,
/// with the address and value it waited for, the time it ran, the timeout and its source, and
/// the context's recent run times.
#[test]
fn a_kernel_hang_waiting_on_memory_is_a_hang_with_its_facts() {
    let m = hang_machine("hang job=9 ran_ms=2004 state=waiting wait=mem wait_va=0x40001000 wait_value=7 offset=8 timeout_ms=2000 timeout_source=default recent_ms=3,4,5");
    let (screen, out, _) = triage(&m, &m.join("logs"), &[]);
    let f = verdict_finding(&out, "application");
    assert_eq!(f["kind"], "job_timeout", "{screen}");
    assert_eq!(f["ctx"], 12);
    assert_eq!(f["ran_ms"], 2004);
    assert_eq!(f["state"], "waiting");
    assert_eq!(f["wait_va"], "0x40001000");
    assert_eq!(f["wait_value"], 7);
    assert_eq!(f["packet"], "offset 8");
    assert_eq!(f["timeout_ms"], 2000);
    assert_eq!(f["timeout_source"], "default");
    assert_eq!(f["recent_ms"], serde_json::json!([3, 4, 5]));
    let text = f["text"].as_str().expect("text");
    assert!(
        text.ends_with("; a genuine hang: it was waiting on 0x40001000 for 7 and the value never came (ran 2004 ms, waiting on 0x40001000 for 7 at packet offset 8, timeout 2000 ms (default); its recent jobs ran 3, 4, 5 ms)"),
        "{text}"
    );
    assert!(
        verdict_line(&screen, "configuration").starts_with("  configuration: "),
        "{screen}"
    );
    assert_eq!(
        verdict_finding(&out, "configuration"),
        serde_json::Value::Null
    );
}

/// A job still executing after about as long as its context's recent jobs, stopped by a
/// module parameter's timeout: the configuration layer's finding, not a hang.
#[test]
fn a_kernel_timeout_as_long_as_the_recent_jobs_is_too_short() {
    let m = hang_machine("hang job=9 ran_ms=52 state=executing offset=0 timeout_ms=50 timeout_source=module_param recent_ms=30,35,32");
    let (screen, out, _) = triage(&m, &m.join("logs"), &[]);
    let f = verdict_finding(&out, "configuration");
    assert_eq!(f["kind"], "job_timeout_too_short", "{screen}");
    assert_eq!(f["ctx"], 12);
    assert_eq!(f["setting"], "job_timeout_ms=50");
    assert_eq!(f["state"], "executing");
    assert_eq!(f["ran_ms"], 52);
    assert_eq!(f["timeout_source"], "module_param");
    assert_eq!(f["recent_ms"], serde_json::json!([30, 35, 32]));
    assert_eq!(
        f["text"],
        "aigpu's job timeout 50 ms (module_param) on aigpu0: context 12's job was declared hung, but it was still executing after 52 ms, about as long as the context's recent jobs (up to 35 ms) (ran 52 ms, executing at packet offset 0, timeout 50 ms (module_param); its recent jobs ran 30, 35, 32 ms) — the setting is too short, not the job"
    );
    assert!(
        verdict_line(&screen, "application").starts_with("  application: OK"),
        "{screen}"
    );
}

/// Without a crash dump, the dmesg line's fields (by key, `rules::report::HangLine`).
#[test]
fn a_kernel_hang_from_the_dmesg_line_alone() {
    let m = machine("healthy");
    let mut dmesg = read(&m.join("dmesg.txt"));
    dmesg.push_str("[   70.000001] aigpu aigpu0: job timeout: ctx=12 pid=4411 comm=python queue=0 job=9 seqno=119 ran_ms=2003 state=hung offset=4 timeout_ms=2000 timeout_source=default recent_ms=none; context banned, resetting engine\n");
    std::fs::write(m.join("dmesg.txt"), &dmesg).expect("dmesg");
    let (screen, out, _) = triage(&m, &m.join("logs"), &[]);
    let f = verdict_finding(&out, "application");
    assert_eq!(f["kind"], "job_timeout", "{screen}");
    assert_eq!(f["ctx"], 12);
    assert_eq!(f["pid"], 4411);
    assert_eq!(f["state"], "hung");
    assert_eq!(f["ran_ms"], 2003);
    assert_eq!(f["packet"], "offset 4");
    assert_eq!(f["recent_ms"], serde_json::json!([]));
    assert_eq!(f["wait_va"], serde_json::Value::Null);
}
