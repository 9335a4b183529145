//! The staged failures of tests/triage (tests/triage/README.md): each a small C program written
//! from include/umd.h that fails the way applications do, run in a fresh log directory with
//! the environment its `.expect` file names, then `umd-smi triage --json` over its log and a
//! recorded machine without the kernel module; the verdict's layers and the first findings'
//! fields (kind, context, call, packet, address, size, buffer, culprit, innocent contexts,
//! setting, fix) must be exactly the expected ones.

#[path = "../../umd/tests/c_util.rs"]
mod c_util;
mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");

/// One `.expect` file.
struct Expect {
    program: String,
    env: Vec<(String, String)>,
    exit: i32,
    /// (layer as in verdict.json, finding index, expectation).
    layers: Vec<(String, usize, Want)>,
}

enum Want {
    Ok,
    NotChecked,
    /// (field, value, substring match).
    Finding(Vec<(String, String, bool)>),
}

fn layer_name(k: &str) -> String {
    match k {
        "kernel_module" => "kernel module".into(),
        "user_space" => "user-space driver".into(),
        other => other.into(),
    }
}

/// `kind=x ctx=1 packet=offset 0 fix~=some words`: a value runs to the next `key=` or `key~=`.
fn pairs(s: &str) -> Vec<(String, String, bool)> {
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for tok in s.split(' ') {
        let key = tok.split_once("~=").or_else(|| tok.split_once('='));
        match key {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_') =>
            {
                out.push((k.to_string(), v.to_string(), tok.contains("~=")))
            }
            _ => {
                let last = out.last_mut().expect("a value before any key");
                last.1 = format!("{} {tok}", last.1);
            }
        }
    }
    out
}

fn parse(path: &Path) -> Expect {
    let text = std::fs::read_to_string(path).expect("read .expect");
    let mut e = Expect {
        program: String::new(),
        env: Vec::new(),
        exit: 0,
        layers: Vec::new(),
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
        match head {
            "program" => e.program = rest.to_string(),
            "env" => {
                e.env = rest
                    .split(' ')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }
            "exit" => e.exit = rest.parse().expect("exit status"),
            layer => {
                let (layer, index) = match layer.split_once('+') {
                    Some((l, n)) => (l, n.parse().expect("finding index")),
                    None => (layer, 0),
                };
                let want = match rest {
                    "ok" => Want::Ok,
                    "not_checked" => Want::NotChecked,
                    facts => Want::Finding(pairs(facts)),
                };
                e.layers.push((layer_name(layer), index, want));
            }
        }
    }
    e
}

fn program(name: &str) -> PathBuf {
    let exe = c_util::out_dir().join(format!("staged-{name}"));
    let o = c_util::compile(&format!("tests/triage/{name}.c"), &exe, &["-std=c11"]);
    assert!(
        o.status.success(),
        "tests/triage/{name}.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

fn value_matches(v: &Value, want: &str, sub: bool) -> bool {
    let got = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if sub {
        got.contains(want)
    } else {
        got == want
    }
}

/// Runs one staged failure and checks its verdict.
fn staged(case: &str) {
    let expect = parse(&c_util::root().join(format!("tests/triage/{case}.expect")));
    let exe = program(&expect.program);
    let dir = common::scratch(case);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    let mut c = Command::new(&exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    // Every record in the file even on a loaded machine: the verdict is judged on the whole log
    // (with the default `drop`, a full lane drops records and counts them).
    c.env("UMD_LOG_DIR", &logs)
        .env("UMD_LOG_SIGNALS", "0")
        .env("UMD_LOG_CONSOLE", "off")
        .env("UMD_LOG_OVERFLOW", "block")
        .env("UMD_LOG_BLOCK_MS", "5000")
        .envs(expect.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let out = c.output().expect("run the staged program");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(expect.exit),
        "{case}: exit status\n{stderr}"
    );
    // The machine: the recorded one without the kernel module (the simulator needs none).
    let machine = common::machine("not-loaded");
    let o = Command::new(SMI)
        .env_clear()
        .args([
            "triage",
            "--json",
            "--no-archive",
            "--now",
            "2026-12-02T02:00:00Z",
        ])
        .arg("--root")
        .arg(machine.join("root"))
        .arg("--dmesg")
        .arg(machine.join("dmesg.txt"))
        .arg("--log-dir")
        .arg(&logs)
        .arg("-o")
        .arg(dir.join("out"))
        .output()
        .expect("run umd-smi triage");
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    let json: Value =
        serde_json::from_str(&screen).unwrap_or_else(|e| panic!("{case}: {e}\n{screen}"));
    let layers = json["verdict"].as_array().expect("verdict layers");
    for (layer, index, want) in &expect.layers {
        let l = layers
            .iter()
            .find(|l| l["layer"] == layer.as_str())
            .unwrap_or_else(|| panic!("{case}: no layer {layer}"));
        let status = l["status"].as_str().unwrap_or("");
        let shown = format!("{case}, layer {layer}:\n{:#}", l);
        match want {
            Want::Ok => assert_eq!(status, "ok", "{shown}"),
            Want::NotChecked => assert_eq!(status, "not_checked", "{shown}"),
            Want::Finding(facts) => {
                assert_eq!(status, "finding", "{shown}");
                let f = &l["findings"][*index];
                for (k, v, sub) in facts {
                    if k == "innocent" {
                        let ctxs: Vec<String> = f["innocent"]
                            .as_array()
                            .map(|a| a.iter().map(|i| i["ctx"].to_string()).collect())
                            .unwrap_or_default();
                        assert_eq!(ctxs.join(","), *v, "{shown}");
                        continue;
                    }
                    assert!(
                        value_matches(&f[k.as_str()], v, *sub),
                        "{case}, layer {layer}, finding {index}: {k} is {}, expected {}{v}\n{shown}",
                        f[k.as_str()],
                        if *sub { "to contain " } else { "" }
                    );
                }
            }
        }
    }
}

#[test]
fn use_after_free_through_a_replayed_command_buffer() {
    staged("use_after_free");
}

#[test]
fn out_of_bounds_write_with_an_innocent_second_context() {
    staged("oob_write");
}

#[test]
fn page_fault_with_an_innocent_second_context() {
    staged("page_fault");
}

#[test]
fn hang_with_the_default_timeout() {
    staged("hang");
}

#[test]
fn job_timeout_set_too_short_is_configuration() {
    staged("short_timeout");
}

#[test]
fn leak_with_a_normal_exit() {
    staged("leak");
}

#[test]
fn out_of_memory_caused_by_another_context() {
    staged("oom");
}

#[test]
fn memory_error_then_failed_reset_is_hardware() {
    staged("mem_error");
}

/// The cases that need a machine without aigpu loaded (the guest has it).
fn staged_without_module(case: &str) {
    if Path::new("/sys/module/aigpu").exists() {
        eprintln!("{case} skipped: aigpu is loaded here");
        return;
    }
    staged(case);
}

#[test]
fn module_not_loaded() {
    staged_without_module("module_not_loaded");
}

#[test]
fn memory_size_set_too_small_is_configuration() {
    staged("small_memory");
}

#[test]
fn module_not_loaded_and_the_automatic_fallback() {
    staged_without_module("module_not_loaded_auto");
}

#[test]
fn expect_files_parse() {
    let p = pairs("kind=page_fault packet=offset 0 fix~=the device pointer");
    assert_eq!(
        p,
        vec![
            ("kind".into(), "page_fault".into(), false),
            ("packet".into(), "offset 0".into(), false),
            ("fix".into(), "the device pointer".into(), true),
        ]
    );
}
