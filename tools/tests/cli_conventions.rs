//! The operator conventions of both binaries (tools/src/cli.rs, tools/src/query.rs,
//! tools/src/exporter.rs): `--version`, per-command `--help`, exit statuses, a closed stdout,
//! nvidia-smi's `--query-*` CSV and `dmon`, the Prometheus exporter (checked by promtool and
//! scraped once over 127.0.0.1), completions and man pages. No GPU: the healthy fixture machine
//! (`--root`) and the simulator.

mod common;
use common::*;
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");
const LOG: &str = env!("CARGO_BIN_EXE_umd-log");
const NOW: &str = "2026-11-29T02:15:00Z";

fn healthy() -> String {
    fixtures()
        .join("machines/healthy/root")
        .to_str()
        .expect("utf-8")
        .to_string()
}

/// Runs `bin` with `args`; (stdout, stderr, status code).
fn out(bin: &str, args: &[&str]) -> (String, String, i32) {
    let o = run(bin, args);
    (
        stdout(&o),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        o.status.code().unwrap_or(-1),
    )
}

#[test]
fn version_and_per_command_help() {
    assert_eq!(
        out(SMI, &["--version"]),
        ("umd-smi 0.1.0\n".into(), String::new(), 0)
    );
    assert_eq!(
        out(LOG, &["--version"]),
        ("umd-log 0.1.0\n".into(), String::new(), 0)
    );
    let (o, e, c) = out(SMI, &["triage", "--help"]);
    assert_eq!((e.as_str(), c), ("", 0));
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines[0], "One snapshot of the whole scene (dmesg, modinfo, nodes, debugfs, logs) with a verdict per layer, written as a directory and a .tar.gz");
    assert_eq!(lines[2], "Usage: umd-smi triage [OPTIONS]");
    assert!(o.ends_with("Exit status:\n  0  the report was written, whatever it found\n  1  the report could not be written\n  2  usage error\n"), "{o}");
    let (o, _, c) = out(LOG, &["ctx", "--help"]);
    assert_eq!(c, 0);
    assert_eq!(
        o.lines().nth(2),
        Some("Usage: umd-log ctx [OPTIONS] <ID> [PATH]...")
    );
    let (o, _, c) = out(SMI, &["exporter", "--help"]);
    assert_eq!(c, 0);
    assert_eq!(o.lines().nth(2), Some("Usage: umd-smi exporter [OPTIONS]"));
    let (o, _, c) = out(SMI, &["--help"]);
    assert_eq!(c, 0);
    assert!(o.contains("\nExit status:\n  0  a device was shown (with -l: the last view showed one)\n  1  no aigpu device, or it could not be looked at (the reason is printed)\n  2  usage error (unknown option, bad value)\n"), "{o}");
}

#[test]
fn usage_errors_exit_2() {
    let r = healthy();
    let (o, e, c) = out(SMI, &["--root", &r, "--count", "3"]);
    assert_eq!((o.as_str(), c), ("", 2));
    assert_eq!(
        e,
        "error: the following required arguments were not provided:\n  --loop <SECONDS>\n\nUsage: umd-smi --loop <SECONDS> --root <DIR> --count <N>\n\nFor more information, try '--help'.\n"
    );
    let (_, e, c) = out(SMI, &["--sim", "--root", &r]);
    assert_eq!(c, 2);
    assert!(
        e.starts_with("error: the argument '--sim' cannot be used with '--root <DIR>'\n"),
        "{e}"
    );
    let (_, e, c) = out(SMI, &["--query-gpu=index,temperature.gpu"]);
    assert_eq!(c, 2);
    assert!(e.starts_with("error: invalid value 'index,temperature.gpu' for '--query-gpu <FIELDS>': unknown field \"temperature.gpu\" (the list: --help-query-gpu)\n"), "{e}");
    let (_, e, c) = out(SMI, &["--query-gpu=index", "--format=json"]);
    assert_eq!(c, 2);
    assert!(e.starts_with("error: invalid value 'json' for '--format <FORMAT>': only csv is supported: csv[,noheader][,nounits]\n"), "{e}");
    let (_, _, c) = out(LOG, &[]);
    assert_eq!(c, 2, "no command: help on stderr, status 2");
}

#[test]
fn loop_zero_is_one_view() {
    let r = healthy();
    let once = out(SMI, &["--root", &r, "--now", NOW]);
    assert_eq!(once.2, 0);
    assert_eq!(out(SMI, &["--root", &r, "--now", NOW, "-l", "0"]), once);
    // Sub-second refresh: three views 100 ms apart.
    let t = std::time::Instant::now();
    let (o, _, c) = out(SMI, &["--root", &r, "--now", NOW, "-l", "100ms", "-c", "3"]);
    assert_eq!(c, 0);
    assert!(t.elapsed() >= std::time::Duration::from_millis(200));
    assert_eq!(o, format!("{0}\n{0}\n{0}", once.0));
}

/// The binary's stdout is a pipe whose reader is gone before it writes: no panic, no
/// backtrace, status 0 (as `umd-smi --help | head -1`).
fn closed_pipe(bin: &str, args: &[&str]) {
    let mut c = Command::new(bin)
        .args(args)
        .env_clear()
        .env("RUST_BACKTRACE", "1")
        .env("UMD_SIM_DEVICES", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(c.stdout.take());
    let mut err = String::new();
    c.stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    let st = c.wait().expect("wait");
    assert_eq!((st.code(), err.as_str()), (Some(0), ""), "{bin} {args:?}");
}

#[test]
fn closed_stdout_ends_quietly() {
    let r = healthy();
    let logs = fixtures().join("logs");
    let logs = logs.to_str().expect("utf-8");
    closed_pipe(SMI, &["--help"]);
    closed_pipe(SMI, &["--version"]);
    closed_pipe(SMI, &["--help-query-gpu"]);
    closed_pipe(SMI, &["--root", &r]);
    closed_pipe(SMI, &["--sim", "-l", "0.05"]);
    closed_pipe(SMI, &["dmon", "--sim", "-d", "0.05"]);
    closed_pipe(SMI, &["--root", &r, "--query-gpu=index,name", "-l", "0.05"]);
    closed_pipe(LOG, &["--help"]);
    closed_pipe(LOG, &["-d", logs, "errors"]);
    closed_pipe(LOG, &["-d", logs, "--json", "leaks"]);
}

#[test]
fn query_gpu_csv() {
    let r = healthy();
    let all = "timestamp,index,name,render_node,state,access,driver_version,uapi_version,hw_version,memory.total,memory.used,memory.free,utilization.gpu,jobs,faults,hangs,resets,clients,contexts,crash_dumps,job_timeout";
    let (o, e, c) = out(
        SMI,
        &[
            "--root",
            &r,
            "--now",
            NOW,
            &format!("--query-gpu={all}"),
            "--format=csv",
        ],
    );
    assert_eq!((e.as_str(), c), ("", 0));
    assert_eq!(
        o,
        "timestamp, index, name, render_node, state, access, driver_version, uapi_version, hw_version, memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%], jobs, faults, hangs, resets, clients, contexts, crash_dumps, job_timeout [ms]\n\
         2026-11-29T02:15:00.000000Z, 0, aigpu0, /dev/dri/renderD128, ok, not checked (offline), 0.1.0, 1.0, 1.0, 256 MiB, 1 MiB, 254 MiB, 9 %, 1201, 0, 0, 0, 1, 2, [N/A], 2000 ms\n"
    );
    let (o, _, _) = out(
        SMI,
        &[
            "--root",
            &r,
            "--query-gpu",
            "index,memory.used,utilization.gpu",
            "--format",
            "csv,noheader,nounits",
        ],
    );
    assert_eq!(o, "0, 1, 9\n");
    let (o, _, _) = out(
        SMI,
        &["--root", &r, "--query-gpu=name", "-l", "0.05", "-c", "2"],
    );
    assert_eq!(o, "name\naigpu0\naigpu0\n", "the header once");
    let (o, _, c) = out(SMI, &["--help-query-gpu"]);
    assert_eq!(c, 0);
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(
        lines[2..6],
        [
            "timestamp",
            "    the time of the view (RFC 3339, UTC)",
            "index",
            "    umd-smi's device index (render-node order; libumd's for the usable ones)"
        ]
    );
    assert!(
        o.contains("\nmemory.used [MiB]\n    device memory allocated\n"),
        "{o}"
    );
    // No device: no row, status 1.
    let nl = fixtures().join("machines/not-loaded/root");
    let (o, _, c) = out(
        SMI,
        &[
            "--root",
            nl.to_str().expect("utf-8"),
            "--query-gpu=index,name",
        ],
    );
    assert_eq!((o.as_str(), c), ("index, name\n", 1));
}

#[test]
fn query_compute_apps_csv() {
    let r = healthy();
    let (o, e, c) = out(SMI, &["--root", &r, "--now", NOW, "--query-compute-apps=timestamp,gpu_index,gpu_name,pid,process_name,used_memory,objects,contexts,jobs,busy_time", "--format=csv,nounits"]);
    assert_eq!((e.as_str(), c), ("", 0));
    assert_eq!(
        o,
        "timestamp, gpu_index, gpu_name, pid, process_name, used_memory [MiB], objects, contexts, jobs, busy_time [ms]\n\
         2026-11-29T02:15:00.000000Z, 0, aigpu0, 4411, python, 1, 3, 2, 1201, 0.912\n"
    );
    let (o, _, _) = out(SMI, &["--help-query-compute-apps"]);
    assert!(
        o.contains("\nbusy_time [ms]\n    the device time its jobs took\n"),
        "{o}"
    );
}

#[test]
fn dmon_one_line_per_sample() {
    let r = healthy();
    let (o, e, c) = out(SMI, &["dmon", "--root", &r, "-c", "2", "-d", "0.05"]);
    assert_eq!((e.as_str(), c), ("", 0));
    assert_eq!(
        o,
        "# gpu     name  state     mem  mem% busy      jobs faults hangs resets clients\n\
         # Idx        -      -     MiB     %    %         #      #     #      #       #\n\
         \x20   0   aigpu0     ok       1   0.4    9      1201      0     0      0       1\n\
         \x20   0   aigpu0     ok       1   0.4    9      1201      0     0      0       1\n"
    );
    let (o, _, _) = out(SMI, &["dmon", "--root", &r, "-c", "1", "--no-header"]);
    assert_eq!(o.lines().count(), 1);
    let nl = fixtures().join("machines/not-loaded/root");
    let (_, e, c) = out(
        SMI,
        &[
            "dmon",
            "--root",
            nl.to_str().expect("utf-8"),
            "-c",
            "1",
            "--no-header",
        ],
    );
    assert_eq!(c, 1);
    assert_eq!(e, "umd-smi dmon: no aigpu device: kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu') [UMD_ERR_INIT_BACKEND_UNAVAILABLE]\n");
}

/// A libumd log directory whose process dropped records (the writer's own WARN,
/// umd/src/log/writer.rs).
fn drop_logs() -> Scratch {
    let d = Scratch(scratch("drops"));
    std::fs::write(
        d.join("umd-7001.log"),
        "2026-11-29T02:14:00.000000Z 8000000000000 WARN tid=7001 umd::log - umd/src/log/writer.rs:635 ctx=- code=- \"log queue full: 12 records dropped in total (UMD_LOG_OVERFLOW, UMD_LOG_QUEUE; counters: umdLogGetStats)\" dropped=12\n\
         2026-11-29T02:14:01.000000Z 8001000000000 WARN tid=7001 umd::log - umd/src/log/writer.rs:635 ctx=- code=- \"log queue full: 40 records dropped in total\" dropped=40\n",
    )
    .expect("write log");
    d
}

fn promtool(text: &str) -> (String, i32) {
    let mut c = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; scripts/setup-toolchain.sh installs it)");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let o = c.wait_with_output().expect("promtool");
    (
        format!("{}{}", stdout(&o), String::from_utf8_lossy(&o.stderr)),
        o.status.code().unwrap_or(-1),
    )
}

#[test]
fn exporter_textfile_and_http() {
    let r = healthy();
    let logs = drop_logs();
    let dir = Scratch(scratch("prom"));
    let prom = dir.join("aigpu.prom");
    let (o, e, c) = out(
        SMI,
        &[
            "exporter",
            "--root",
            &r,
            "--textfile",
            prom.to_str().expect("utf-8"),
            "--log-dir",
            logs.to_str().expect("utf-8"),
        ],
    );
    assert_eq!((o.as_str(), e.as_str(), c), ("", "", 0));
    let text = std::fs::read_to_string(&prom).expect("textfile");
    assert!(!dir.join("aigpu.prom.tmp").exists());
    golden("exporter-healthy.prom", &text);
    assert_eq!(
        promtool(&text),
        (String::new(), 0),
        "promtool check metrics"
    );
    assert!(text.contains("\naigpu_umd_log_records_dropped_total{pid=\"7001\"} 40\n"));

    // The simulator's metrics pass promtool too (device-lost state, busy time, clients).
    let sim = Command::new(SMI)
        .args([
            "exporter",
            "--sim",
            "--textfile",
            dir.join("sim.prom").to_str().expect("utf-8"),
        ])
        .env_clear()
        .env("UMD_SIM_DEVICES", "2")
        .status()
        .expect("spawn");
    assert!(sim.success());
    let st = std::fs::read_to_string(dir.join("sim.prom")).expect("sim textfile");
    assert_eq!(promtool(&st), (String::new(), 0));
    assert!(
        st.contains("\naigpu_device_lost{device=\"sim1\"} 0\n"),
        "{st}"
    );

    // HTTP on 127.0.0.1 (a free port), three requests, then it stops by itself.
    let mut srv = Command::new(SMI)
        .args([
            "exporter",
            "--root",
            &r,
            "--listen",
            "127.0.0.1:0",
            "--max-scrapes",
            "3",
            "--log-dir",
            logs.to_str().expect("utf-8"),
        ])
        .env_clear()
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn exporter");
    let mut first = String::new();
    std::io::BufReader::new(srv.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .expect("first line");
    let url = first
        .strip_prefix("umd-smi exporter: serving http://")
        .and_then(|s| s.strip_suffix("/metrics\n"))
        .unwrap_or_else(|| panic!("first line: {first:?}"))
        .to_string();
    assert!(url.starts_with("127.0.0.1:"), "{url}");
    let get = |path: &str| -> String {
        let mut s = std::net::TcpStream::connect(&url).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        write!(s, "GET {path} HTTP/1.1\r\nHost: {url}\r\n\r\n").expect("request");
        let mut resp = String::new();
        s.read_to_string(&mut resp).expect("response");
        resp
    };
    let m = get("/metrics");
    let (head, body) = m.split_once("\r\n\r\n").expect("head and body");
    assert_eq!(
        head,
        format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close", text.len())
    );
    assert_eq!(body, text, "the scrape is the textfile");
    assert!(get("/").ends_with("\r\n\r\numd-smi exporter: the metrics are at /metrics\n"));
    assert!(get("/nothing").starts_with("HTTP/1.1 404 Not Found\r\n"));
    let st = srv.wait().expect("exporter exit");
    assert_eq!(st.code(), Some(0), "stops after --max-scrapes");
}

#[test]
fn completions_and_man_pages() {
    let (o, _, c) = out(SMI, &["completions", "bash"]);
    assert_eq!(c, 0);
    assert!(o.starts_with("_umd__smi() {\n"), "{o}");
    assert!(o.contains("--query-gpu"));
    let (o, _, c) = out(LOG, &["completions", "zsh"]);
    assert_eq!(c, 0);
    assert!(o.starts_with("#compdef umd-log\n"), "{o}");
    let (o, _, _) = out(SMI, &["completions", "fish", "--bin", "umd-log"]);
    assert!(o.contains("complete -c umd-log"), "{o}");
    let dir = Scratch(scratch("man"));
    let (o, e, c) = out(SMI, &["man-pages", dir.to_str().expect("utf-8")]);
    assert_eq!((e.as_str(), c), ("", 0));
    assert_eq!(
        o,
        "umd-log-ctx.1\numd-log-errors.1\numd-log-last-job.1\numd-log-leaks.1\numd-log.1\numd-smi-dmon.1\numd-smi-exporter.1\numd-smi-triage.1\numd-smi.1\n"
    );
    let page = std::fs::read_to_string(dir.join("umd-smi.1")).expect("page");
    assert!(page.starts_with(".ie \\n(.g .ds Aq \\(aq\n"), "{page}");
    assert!(page.contains(".TH umd-smi 1"), "{page}");
}
