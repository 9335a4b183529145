//! `umd-smi exporter`: the device view as Prometheus metrics (text exposition format 0.0.4),
//! served over HTTP or written for node_exporter's textfile collector.
//!
//! Naming follows Prometheus' conventions: an `aigpu_` prefix, base units in the name
//! (`_bytes`, `_seconds`), `_total` on counters, one `_info` metric carrying the versions as
//! labels. Per device the labels are `device` (aigpu0; `sim0@<pid>` for another process's
//! simulator device, `DeviceView::unique_name`); per queue also `queue` and `priority`;
//! per client (an open file, debugfs `clients`) also `client`, `pid` and `command`. A device
//! whose debugfs is not readable (not root) has only the metrics the query ioctl gives.
//!
//! The HTTP server is hand-written on std::net, on purpose: it answers `GET /metrics` (and `/`)
//! one connection at a time, with a 5 s timeout and an 8 KiB request limit, which is all a
//! scraper needs; an HTTP crate would bring an async runtime for that.

use crate::host::Notes;
use crate::smi::{Access, SmiView};
use crate::umdlog;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

/// The content type of the text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The message of libumd's drop record (docs/logging.md, "The pipeline"): `log queue full: N
/// records dropped in total`, with the total in its `dropped` field.
const DROPS: &str = "log queue full:";

/// Records libumd dropped, per process: the largest `dropped` total of its drop records in the
/// logs in `dirs`. The files are read a line at a time and only the drop records are parsed,
/// so a scrape's memory does not grow with the logs (on a busy server they are gigabytes: each
/// process keeps its active file and its rotations).
pub fn log_drops(dirs: &[PathBuf], notes: &mut Notes) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = Vec::new();
    for f in umdlog::discover(dirs, &[], notes) {
        let Some(pid) = f.pid else { continue };
        let file = match std::fs::File::open(&f.path) {
            Ok(file) => file,
            Err(e) => {
                notes.add(f.path.display().to_string(), e.to_string());
                continue;
            }
        };
        // A line that is not UTF-8 (a torn write) is skipped, not the rest of the file.
        for line in BufReader::new(file).split(b'\n').map_while(Result::ok) {
            let Ok(line) = std::str::from_utf8(&line) else {
                continue;
            };
            if !line.contains(DROPS) {
                continue;
            }
            let Ok(r) = umdlog::parse_line(line) else {
                continue;
            };
            let Some(n) = r
                .msg
                .starts_with(DROPS)
                .then(|| r.field_u64("dropped"))
                .flatten()
            else {
                continue;
            };
            match v.iter_mut().find(|(p, _)| *p == pid) {
                Some(e) => e.1 = e.1.max(n),
                None => v.push((pid, n)),
            }
        }
    }
    v.sort();
    v
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, String)>,
}

struct Out(Vec<Family>);

impl Out {
    fn add(
        &mut self,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        value: impl ToString,
    ) {
        let l = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect::<Vec<_>>()
            .join(",");
        let s = (l, value.to_string());
        match self.0.iter_mut().find(|f| f.name == name) {
            Some(f) => f.samples.push(s),
            None => self.0.push(Family {
                name,
                kind,
                help,
                samples: vec![s],
            }),
        }
    }

    fn text(&self) -> String {
        let mut o = String::new();
        for f in &self.0 {
            let _ = writeln!(o, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(o, "# TYPE {} {}", f.name, f.kind);
            for (l, v) in &f.samples {
                if l.is_empty() {
                    let _ = writeln!(o, "{} {v}", f.name);
                } else {
                    let _ = writeln!(o, "{}{{{l}}} {v}", f.name);
                }
            }
        }
        o
    }
}

fn secs(us_or_ns: u64, per_sec: f64) -> String {
    let v = us_or_ns as f64 / per_sec;
    format!("{v}")
}

/// The metrics of one view (and the log drops of libumd's logs, when read).
pub fn render(v: &SmiView, drops: Option<&[(u32, u64)]>) -> String {
    let mut o = Out(Vec::new());
    o.add(
        "aigpu_exporter_info",
        "gauge",
        "umd-smi exporter: its version and the backend it reads (kmd or sim).",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("backend", v.backend),
        ],
        1,
    );
    if v.backend == "kmd" {
        o.add(
            "aigpu_module_loaded",
            "gauge",
            "1 when the aigpu kernel module is loaded (/sys/module/aigpu).",
            &[],
            u8::from(v.module_loaded),
        );
    }
    o.add(
        "aigpu_devices",
        "gauge",
        "aigpu devices seen (render nodes and debugfs directories).",
        &[],
        v.devices.len(),
    );
    for d in &v.devices {
        let unique = d.unique_name();
        let dev = unique.as_str();
        let st = d.debugfs.as_ref().and_then(|x| x.status.as_ref());
        let hw = st.and_then(|s| s.get("hw")).unwrap_or("");
        let (drv, uapi) = (d.driver().unwrap_or_default(), d.uapi().unwrap_or_default());
        o.add(
            "aigpu_device_info",
            "gauge",
            "A device, with its render node and versions.",
            &[
                ("device", dev),
                ("node", d.node.as_deref().unwrap_or("")),
                ("driver", &drv),
                ("uapi", &uapi),
                ("hw", hw),
            ],
            1,
        );
        let usable = match d.access {
            Access::Ok | Access::Sim => Some(1),
            Access::No(_) => Some(0),
            // A recorded tree (--root): not known.
            Access::Offline => None,
        };
        if let Some(u) = usable {
            o.add(
                "aigpu_device_usable",
                "gauge",
                "1 when this exporter's user can drive the device with libumd.",
                &[("device", dev)],
                u,
            );
        }
        let state = d.state();
        if state != "unknown" {
            o.add(
                "aigpu_device_lost",
                "gauge",
                "1 when the device is lost (an engine reset failed; every ioctl fails with ENODEV).",
                &[("device", dev)],
                u8::from(state == "lost"),
            );
        }
        if let Some((used, total)) = d.memory() {
            o.add(
                "aigpu_memory_total_bytes",
                "gauge",
                "Device memory the driver may allocate.",
                &[("device", dev)],
                total,
            );
            o.add(
                "aigpu_memory_used_bytes",
                "gauge",
                "Device memory allocated.",
                &[("device", dev)],
                used,
            );
        }
        if let Some(s) = st {
            let counters: [(&'static str, &'static str, &'static str); 5] = [
                (
                    "jobs",
                    "aigpu_jobs_total",
                    "Jobs completed since the module was loaded.",
                ),
                (
                    "faults",
                    "aigpu_faults_total",
                    "Page faults and memory errors since load.",
                ),
                ("hangs", "aigpu_hangs_total", "Job timeouts since load."),
                ("resets", "aigpu_resets_total", "Engine resets since load."),
                (
                    "crashdumps",
                    "aigpu_crash_dumps_total",
                    "Crash dumps taken since load.",
                ),
            ];
            for (key, name, help) in counters {
                if let Some(n) = s.num(key) {
                    o.add(name, "counter", help, &[("device", dev)], n);
                }
            }
            if let Some(us) = s.num("busy_us") {
                o.add(
                    "aigpu_busy_seconds_total",
                    "counter",
                    "Time the device spent executing (debugfs status busy_us).",
                    &[("device", dev)],
                    secs(us, 1e6),
                );
            }
            for (key, name, help) in [
                ("clients", "aigpu_clients", "Open files on the device."),
                ("contexts", "aigpu_contexts", "Live contexts on the device."),
            ] {
                if let Some(n) = s.num(key) {
                    o.add(name, "gauge", help, &[("device", dev)], n);
                }
            }
            if let Some(ms) = s.num("job_timeout_ms") {
                o.add(
                    "aigpu_job_timeout_seconds",
                    "gauge",
                    "The job timeout (module parameter job_timeout_ms).",
                    &[("device", dev)],
                    secs(ms, 1e3),
                );
            }
        }
        let Some(dfs) = &d.debugfs else { continue };
        for q in &dfs.queues {
            let (qi, prio) = (q.or_dash("queue"), q.or_dash("prio"));
            let l = [("device", dev), ("queue", qi), ("priority", prio)];
            if let Some(b) = q.num("busy_pct") {
                o.add(
                    "aigpu_queue_busy_ratio",
                    "gauge",
                    "Share of the last half second the hardware queue had work (0 to 1).",
                    &l,
                    format!("{}", b as f64 / 100.0),
                );
            }
            if let Some(n) = q.num("inflight") {
                o.add(
                    "aigpu_queue_inflight_jobs",
                    "gauge",
                    "Jobs on the hardware queue now.",
                    &l,
                    n,
                );
            }
            if let Some(n) = q.num("jobs") {
                o.add(
                    "aigpu_queue_jobs_total",
                    "counter",
                    "Jobs the hardware queue completed.",
                    &l,
                    n,
                );
            }
        }
        for c in &dfs.clients {
            let (client, pid, comm) = (c.or_dash("client"), c.or_dash("pid"), c.or_dash("comm"));
            let l = [
                ("device", dev),
                ("client", client),
                ("pid", pid),
                ("command", comm),
            ];
            if let Some(n) = c.num("mem") {
                o.add(
                    "aigpu_client_memory_bytes",
                    "gauge",
                    "Device memory an open file allocated.",
                    &l,
                    n,
                );
            }
            if let Some(n) = c.num("objects") {
                o.add(
                    "aigpu_client_objects",
                    "gauge",
                    "Buffer objects of an open file.",
                    &l,
                    n,
                );
            }
            if let Some(n) = c.num("contexts") {
                o.add(
                    "aigpu_client_contexts",
                    "gauge",
                    "Contexts of an open file.",
                    &l,
                    n,
                );
            }
            if let Some(n) = c.num("jobs") {
                o.add(
                    "aigpu_client_jobs_total",
                    "counter",
                    "Completed jobs an open file submitted.",
                    &l,
                    n,
                );
            }
            if let Some(ns) = c.num("busy_ns") {
                o.add(
                    "aigpu_client_busy_seconds_total",
                    "counter",
                    "Device time the jobs of an open file took.",
                    &l,
                    secs(ns, 1e9),
                );
            }
        }
        for c in &dfs.contexts {
            let banned = c.get("fault").is_some() || c.get("hung") == Some("1");
            o.add(
                "aigpu_context_banned",
                "gauge",
                "1 for a context banned by a fault or a hang (it must be recreated).",
                &[
                    ("device", dev),
                    ("ctx", c.or_dash("ctx")),
                    ("pid", c.or_dash("pid")),
                    ("command", c.or_dash("comm")),
                ],
                u8::from(banned),
            );
        }
    }
    if let Some(drops) = drops {
        for (pid, n) in drops {
            o.add(
                "aigpu_umd_log_records_dropped_total",
                "counter",
                "Log records libumd dropped in a process because its queue was full (from its log).",
                &[("pid", &pid.to_string())],
                n,
            );
        }
    }
    o.text()
}

/// What a request asked for.
fn request_path(head: &[u8]) -> Result<String, (u16, &'static str)> {
    let text = String::from_utf8_lossy(head);
    let first = text.lines().next().unwrap_or("");
    let mut parts = first.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return Err((405, "Method Not Allowed"));
    }
    Ok(path.split('?').next().unwrap_or("").to_string())
}

fn respond(
    s: &mut TcpStream,
    code: u16,
    reason: &str,
    ctype: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

/// Answers one connection: `GET /metrics` with `metrics()`, `GET /` with a pointer to it.
pub fn serve_one(mut s: TcpStream, metrics: &mut dyn FnMut() -> String) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > 8192 {
            return respond(
                &mut s,
                431,
                "Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
            );
        }
    }
    match request_path(&head) {
        Err((code, reason)) => respond(&mut s, code, reason, "text/plain", "only GET\n"),
        Ok(p) if p == "/metrics" => {
            let body = metrics();
            respond(&mut s, 200, "OK", CONTENT_TYPE, &body)
        }
        Ok(p) if p == "/" => respond(
            &mut s,
            200,
            "OK",
            "text/plain; charset=utf-8",
            "umd-smi exporter: the metrics are at /metrics\n",
        ),
        Ok(_) => respond(
            &mut s,
            404,
            "Not Found",
            "text/plain",
            "not found (try /metrics)\n",
        ),
    }
}

/// Serves `listener` one connection at a time, `max` requests in all (`None`: forever).
/// A connection that fails (timeout, reset) is dropped and does not count.
pub fn serve(listener: TcpListener, max: Option<u64>, metrics: &mut dyn FnMut() -> String) {
    let mut served = 0u64;
    for conn in listener.incoming() {
        let Ok(s) = conn else { continue };
        if serve_one(s, metrics).is_ok() {
            served += 1;
        }
        if max.is_some_and(|m| served >= m) {
            break;
        }
    }
}

/// Writes `text` to `path` atomically (`path.tmp`, then renamed), as the textfile collector
/// needs: it must never read a half-written file.
pub fn write_textfile(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod drop_tests {
    use super::*;

    const TEXT_40: &str = "2026-11-29T02:14:01.000000Z 8001000000000 WARN tid=7001 umd::log - umd/src/log/writer.rs:635 ctx=- code=- \"log queue full: 40 records dropped in total\" dropped=40\n";

    #[test]
    fn drops_are_read_a_line_at_a_time_per_process_largest_total() {
        let d = std::env::temp_dir().join(format!("aigpu-drops-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        // Process 7001: an older rotation with 12, a torn (non-UTF-8) line, then 40.
        std::fs::write(
            d.join("umd-7001.1.log"),
            "2026-11-29T02:14:00.000000Z 8000000000000 WARN tid=7001 umd::log - umd/src/log/writer.rs:635 ctx=- code=- \"log queue full: 12 records dropped in total (UMD_LOG_OVERFLOW, UMD_LOG_QUEUE; counters: umdLogGetStats)\" dropped=12\n",
        )
        .expect("write");
        let mut active = b"\xff\xfe log queue full: torn\n".to_vec();
        active.extend_from_slice(TEXT_40.as_bytes());
        // A record that only quotes the sentence is not a drop record.
        active.extend_from_slice(b"2026-11-29T02:14:02.000000Z 8002000000000 INFO tid=7001 umd::abi - - ctx=- code=- \"saw log queue full: 99\" dropped=99\n");
        std::fs::write(d.join("umd-7001.log"), active).expect("write");
        // Process 7002 logs JSON lines.
        std::fs::write(
            d.join("umd-7002.log"),
            "{\"ts\":\"2026-11-29T02:14:03.000000Z\",\"mono_ns\":3,\"level\":\"WARN\",\"tid\":7002,\"module\":\"umd::log\",\"function\":null,\"file\":\"umd/src/log/writer.rs\",\"line\":635,\"ctx\":null,\"code\":null,\"msg\":\"log queue full: 7 records dropped in total\",\"fields\":{\"dropped\":7}}\n",
        )
        .expect("write");
        // Process 7003 dropped nothing.
        std::fs::write(
            d.join("umd-7003.log"),
            TEXT_40.replace(
                "log queue full: 40 records dropped in total",
                "device opened",
            ),
        )
        .expect("write");
        let mut notes = Notes::default();
        let got = log_drops(std::slice::from_ref(&d), &mut notes);
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!(got, vec![(7001, 40), (7002, 7)]);
    }
}
