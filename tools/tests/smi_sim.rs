//! `umd-smi --sim`: the in-process simulator with a small demo workload renders through the same
//! debugfs parser and views as the kernel driver.

mod common;
use common::*;
use std::process::Command;

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");

fn sim(args: &[&str]) -> (String, std::process::ExitStatus) {
    let o = Command::new(SMI)
        .arg("--sim")
        .args(args)
        .env_clear()
        .env("UMD_SIM_DEVICES", "2")
        .output()
        .expect("spawn");
    (stdout(&o), o.status)
}

#[test]
fn simulator_view_with_demo_workload() {
    let (out, st) = sim(&["--json"]);
    assert!(st.success(), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["backend"], "sim");
    let d0 = &v["devices"][0];
    assert_eq!(d0["name"], "sim0");
    assert_eq!(d0["state"], "ok");
    assert_eq!(
        d0["uapi"],
        format!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR)
    );
    // The demo: one client (this umd-smi), two contexts, a 1 MiB buffer, one job on each.
    assert_eq!(d0["mem_used"], 1 << 20);
    assert_eq!(d0["status"]["jobs"], 2);
    assert_eq!(d0["clients"][0]["comm"], "umd-smi");
    assert_eq!(d0["clients"][0]["contexts"], 2);
    assert_eq!(d0["contexts"].as_array().map(Vec::len), Some(2));
    assert_eq!(d0["queues"].as_array().map(Vec::len), Some(4));
    assert_eq!(v["devices"][1]["name"], "sim1");
    assert_eq!(v["devices"][1]["status"]["jobs"], 0);

    let (text, _) = sim(&["--no-demo"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        format!(
            "host: simulator (in-process devices, no kernel), libumd UAPI {}.{}",
            uapi::UAPI_MAJOR,
            uapi::UAPI_MINOR
        )
    );
    assert_eq!(lines[3], "GPU 0: sim0  (no render node)  state ok");
    assert!(
        lines.contains(&"  memory     0 B used of 1.0 GiB (0.0%)"),
        "{text}"
    );
}

#[test]
fn simulator_refresh_runs_the_demo_again() {
    let (out, st) = sim(&["--json", "-l", "1", "--count", "3"]);
    assert!(st.success());
    let jobs: Vec<u64> = out
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            v["devices"][0]["status"]["jobs"].as_u64().unwrap_or(0)
        })
        .collect();
    assert_eq!(jobs, vec![2, 4, 6]);
}
