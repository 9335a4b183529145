//! `umd-smi` and `umd-smi triage` see the devices of a running simulator-backed process
//! (docs/tools.md, "Simulator processes"; the files: docs/debugfs.md, "Published simulator
//! devices"): tests/c/sim_hold.c holds a device with two contexts and a 1 MiB buffer (the pool
//! off, so that is the device's memory) while the real `umd-smi` binary looks at it.

#[path = "../../umd/tests/c_util.rs"]
mod c_util;
#[path = "../../umd/tests/support/sim_hold.rs"]
mod sim_hold_util;

use serde_json::{json, Value};
use sim_hold_util::{command, dev_dir, fresh, Holder};
use std::path::Path;
use std::process::Command;

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions.
    unsafe { libc::getuid() }
}

/// `umd-smi` with the published directories below `sim_dir` (and /tmp), the logs of sim_hold
/// (`sim_dir/logs`, not the user's own log directory) and no other `UMD_*`.
fn smi(sim_dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(SMI);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    c.env("UMD_SIM_DIR", sim_dir)
        .env("UMD_LOG_DIR", sim_dir.join("logs"))
        .args(args);
    c
}

/// The JSON document a run printed.
fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON: {e}\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn smi_json(sim_dir: &Path) -> Value {
    json_of(&smi(sim_dir, &["--json"]).output().expect("run umd-smi"))
}

/// The devices of `pid` in a `umd-smi --json` view.
fn devices_of(v: &Value, pid: u32) -> Vec<Value> {
    v["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter(|d| d["owner"]["pid"] == json!(pid))
        .cloned()
        .collect()
}

/// Starts sim_hold and waits until its device's views show the whole workload.
fn held(base: &Path) -> Holder {
    let h = Holder::start(command(base, "", &[("UMD_POOL", "off")]));
    sim_hold_util::wait_for_the_work(&dev_dir(base, h.pid, 0));
    h
}

#[test]
fn umd_smi_lists_a_live_simulator_process_with_its_views_and_drops_it_after_exit() {
    let base = fresh("smi-live");
    let h = held(&base);
    let dir = dev_dir(&base, h.pid, 0);
    let v = smi_json(&base);
    let devs = devices_of(&v, h.pid);
    assert_eq!(devs.len(), 1, "{v:#}");
    let d = &devs[0];
    assert_eq!(d["name"], "sim0");
    assert_eq!(d["node"], Value::Null);
    assert_eq!(d["state"], "ok");
    assert_eq!(d["access"], json!({"ok": true, "why": "sim"}));
    assert_eq!(
        (d["mem_used"].clone(), d["mem_total"].clone()),
        (json!(1048576), json!(1073741824))
    );
    assert_eq!(d["debugfs"], json!(dir.display().to_string()));
    assert_eq!(d["owner"]["comm"], "sim_hold");
    assert_eq!(d["owner"]["uid"], json!(uid()));
    assert_eq!(d["owner"]["backend_why"], "requested");
    assert_eq!(d["status"]["clients"], json!(1));
    assert_eq!(d["status"]["contexts"], json!(2));
    assert_eq!(d["status"]["jobs"], json!(2));
    assert_eq!(
        d["clients"],
        json!([{"client": 1, "pid": h.pid, "comm": "sim_hold", "mem": 1048576, "objects": 1, "contexts": 2, "jobs": 2}])
    );
    let ctxs: Vec<(Value, Value, Value, Value)> = d["contexts"]
        .as_array()
        .expect("contexts")
        .iter()
        .map(|c| {
            (
                c["ctx"].clone(),
                c["pid"].clone(),
                c["prio"].clone(),
                c["completed"].clone(),
            )
        })
        .collect();
    assert_eq!(
        ctxs,
        vec![
            (json!(1), json!(h.pid), json!("normal"), json!(1)),
            (json!(2), json!(h.pid), json!("high"), json!(1)),
        ]
    );
    assert_eq!(d["queues"].as_array().map(Vec::len), Some(4));

    let o = smi(&base, &[]).output().expect("run umd-smi");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    let head = format!("sim0  simulator of pid {} (sim_hold)  state ok\n", h.pid);
    assert!(text.contains(&head), "{text}");
    assert!(
        text.contains(&format!(
            "  {}  sim_hold  1.0 MiB  1        2         2     -\n",
            h.pid
        )),
        "{text}"
    );

    // The exporter: every simulator process has a sim0, so its device label carries the pid.
    let prom = base.join("metrics.prom");
    let o = smi(
        &base,
        &["exporter", "--textfile", prom.to_str().expect("utf8")],
    )
    .output()
    .expect("run umd-smi exporter");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let metrics = std::fs::read_to_string(&prom).expect("metrics");
    let line = format!(
        "aigpu_memory_used_bytes{{device=\"sim0@{}\"}} 1048576\n",
        h.pid
    );
    assert!(metrics.contains(&line), "{metrics}");

    let pid = h.pid;
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
    let v = smi_json(&base);
    assert_eq!(devices_of(&v, pid), Vec::<Value>::new(), "{v:#}");
    let stale = v.get("stale_sim_dirs").cloned().unwrap_or(json!([]));
    assert!(
        !stale
            .as_array()
            .expect("array")
            .iter()
            .any(|s| s["pid"] == json!(pid)),
        "{stale:#}"
    );
}

#[test]
fn a_killed_process_leaves_a_stale_directory_that_is_no_device() {
    let base = fresh("smi-killed");
    let h = held(&base);
    let pid = h.pid;
    let dir = dev_dir(&base, pid, 0);
    let end = h.kill();
    assert_eq!(end.code, None);
    assert!(dir.join("owner").exists(), "nothing left to judge");
    let v = smi_json(&base);
    assert_eq!(devices_of(&v, pid), Vec::<Value>::new(), "{v:#}");
    let stale: Vec<Value> = v["stale_sim_dirs"]
        .as_array()
        .expect("stale_sim_dirs")
        .iter()
        .filter(|s| s["pid"] == json!(pid))
        .cloned()
        .collect();
    assert_eq!(
        stale,
        vec![
            json!({"dir": dir.display().to_string(), "pid": pid, "comm": "sim_hold", "why": "exited"})
        ]
    );
    let o = smi(&base, &[]).output().expect("run umd-smi");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains(&format!("  {}  pid {pid} sim_hold exited\n", dir.display())),
        "{text}"
    );
    // Read-only: the tool left the directory as it was.
    assert!(dir.join("owner").exists());
}

#[test]
fn a_directory_whose_pid_now_belongs_to_another_process_is_stale() {
    let base = fresh("smi-reused");
    // This test's own pid, with a start time it never had.
    let me = std::process::id();
    let dir = dev_dir(&base, me, 0);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(dir.join("name"), "aigpu dev=sim0 unique=sim0\n").expect("name");
    std::fs::write(
        dir.join("status"),
        "device=sim0 state=ok uapi=1.3 driver=0.1.0 hw=1.0 mem_total=1073741824 mem_used=0 clients=0 contexts=0 jobs=0\n",
    )
    .expect("status");
    std::fs::write(
        dir.join("owner"),
        format!("pid={me} uid={} start_time=1 backend=sim backend_why=requested device=sim0 updated_unix_ms=1 comm=gone\n", uid()),
    )
    .expect("owner");
    let v = smi_json(&base);
    assert_eq!(devices_of(&v, me), Vec::<Value>::new(), "{v:#}");
    let stale: Vec<&Value> = v["stale_sim_dirs"]
        .as_array()
        .expect("stale_sim_dirs")
        .iter()
        .filter(|s| s["pid"] == json!(me))
        .collect();
    assert_eq!(
        stale,
        vec![
            &json!({"dir": dir.display().to_string(), "pid": me, "comm": "gone", "why": "pid_reused"})
        ]
    );
}

#[test]
fn another_users_directory_is_a_note_not_a_failure() {
    if uid() != 0 {
        eprintln!("skipped: running umd-smi as another user needs root");
        return;
    }
    let base = fresh("smi-other");
    let h = held(&base);
    let user = base.join("aigpu-sim-0");
    // umd-smi as nobody: root's 0700 directory cannot be listed.
    let mut c = smi(&base, &["--json"]);
    std::os::unix::process::CommandExt::uid(&mut c, 65534);
    std::os::unix::process::CommandExt::gid(&mut c, 65534);
    let o = c.output().expect("run umd-smi as nobody");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(devices_of(&v, h.pid), Vec::<Value>::new());
    let notes: Vec<&Value> = v["not_read"]
        .as_array()
        .expect("not_read")
        .iter()
        .filter(|n| n["what"] == json!(user.display().to_string()))
        .collect();
    assert_eq!(
        notes,
        vec![
            &json!({"what": user.display().to_string(), "why": "permission denied (another user's published simulator devices: run as root to see them)"})
        ]
    );
    drop(h);
}

#[test]
fn triage_of_a_live_simulator_process_keeps_its_views_and_does_not_blame_the_kernel_module() {
    if Path::new("/sys/module/aigpu").exists() {
        eprintln!("skipped: aigpu is loaded here (the case is a machine without the module)");
        return;
    }
    let base = fresh("triage");
    let h = held(&base);
    let out = base.join("reports");
    // No libumd log: what triage knows of the process is its published device.
    let logs = base.join("no-logs");
    std::fs::create_dir_all(&logs).expect("logs");
    let o = smi(
        &base,
        &[
            "triage",
            "--json",
            "--no-archive",
            "--output",
            out.to_str().expect("utf8"),
            "--log-dir",
            logs.to_str().expect("utf8"),
        ],
    )
    .output()
    .expect("run umd-smi triage");
    let v = json_of(&o);
    let layer = |name: &str| -> Value {
        v["verdict"]
            .as_array()
            .expect("verdict")
            .iter()
            .find(|l| l["layer"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no layer {name}: {v:#}"))
    };
    let k = layer("kernel module");
    assert_eq!(k["status"], "not_checked", "{k:#}");
    assert!(
        k["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("not involved: pid ") && t.contains(&h.pid.to_string())),
        "{k:#}"
    );
    let hw = layer("hardware");
    assert_eq!(hw["status"], "ok", "{hw:#}");
    assert!(
        hw["text"]
            .as_str()
            .is_some_and(|t| t.contains(&format!("sim0 of pid {} (sim_hold) state ok", h.pid))),
        "{hw:#}"
    );
    let dir = Path::new(v["report_dir"].as_str().expect("report_dir"));
    let published = dev_dir(&base, h.pid, 0);
    let kept = |f: &str| {
        std::fs::read_to_string(dir.join(format!("sim/pid{}-sim0/{f}", h.pid)))
            .unwrap_or_else(|e| panic!("sim/pid{}-sim0/{f}: {e}", h.pid))
    };
    // The device is idle: these views do not change while triage runs (`status`, `queues` and
    // `owner` may: busy_pct decays over half a second after the last job).
    for f in ["clients", "contexts", "name"] {
        assert_eq!(
            kept(f),
            std::fs::read_to_string(published.join(f)).expect("published"),
            "{f}"
        );
    }
    for f in ["status", "queues", "owner"] {
        assert!(!kept(f).is_empty(), "{f}");
    }
    let smi_json: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("umd-smi.json")).expect("umd-smi.json"),
    )
    .expect("json");
    assert_eq!(devices_of(&smi_json, h.pid).len(), 1);
    let end = h.finish();
    assert_eq!(end.code, Some(0), "{}", end.stderr);
}
