//! The kernel log: reading it (a given text file, else `dmesg`; the previous boot from
//! `journalctl -k -b -1`), filtering it to what concerns the driver, and recognising the lines
//! triage draws conclusions from. The patterns are listed in docs/tools.md.
//!
//! The driver's own event lines are `rules` formats: recognised by their lead
//! (`rules::lead`) and read by key into the typed facts of [`Event`]; the kernel's own
//! lines about the module (version magic, unknown symbols, module verification, splats) are the
//! kernel's formats and recognised as such.

use crate::host::{run, Host, Notes};
use crate::kv::Kv;
mod driver;
use driver::driver_event;
pub use driver::FaultFacts;
use rules::rules::lost::LossCause;
use std::time::Duration;

/// A kernel log text and where it came from.
#[derive(Clone, Debug)]
pub struct KernelLog {
    /// `dmesg`, `journalctl -k -b -1`, or the file given.
    pub source: String,
    /// Its lines.
    pub lines: Vec<String>,
}

/// The current boot's kernel log: the file given with `--dmesg`, else `dmesg` (live only).
pub fn read_dmesg(host: &Host, notes: &mut Notes) -> Option<KernelLog> {
    if let Some(p) = &host.dmesg {
        return match crate::host::read_text(p) {
            Ok(t) => Some(KernelLog {
                source: "dmesg".into(),
                lines: t.lines().map(str::to_string).collect(),
            }),
            Err(e) => {
                notes.add(format!("dmesg ({})", p.display()), e.describe());
                None
            }
        };
    }
    if host.offline {
        notes.add("dmesg", "not given (offline: --root without --dmesg)");
        return None;
    }
    match run("dmesg", &[], Duration::from_secs(10)) {
        Ok(o) if o.ok => Some(KernelLog {
            source: "dmesg".into(),
            lines: o.stdout.lines().map(str::to_string).collect(),
        }),
        Ok(o) => {
            let why = o.stderr.trim().to_string();
            notes.add(
                "dmesg",
                if why.is_empty() {
                    "dmesg failed".to_string()
                } else if why.contains("Operation not permitted") {
                    format!("{why} (kernel.dmesg_restrict=1: run as root, or journalctl -k as a member of adm/systemd-journal)")
                } else {
                    why
                },
            );
            None
        }
        Err(e) => {
            notes.add("dmesg", e);
            None
        }
    }
}

/// The previous boot's kernel log: the file given with `--journal`, else `journalctl -k -b -1`
/// (live only, where journald keeps it).
pub fn read_journal(host: &Host, notes: &mut Notes) -> Option<KernelLog> {
    if let Some(p) = &host.journal {
        return match crate::host::read_text(p) {
            Ok(t) => Some(KernelLog {
                source: "journal (previous boot)".into(),
                lines: t.lines().map(str::to_string).collect(),
            }),
            Err(e) => {
                notes.add(format!("journal ({})", p.display()), e.describe());
                None
            }
        };
    }
    if host.offline {
        return None;
    }
    match run(
        "journalctl",
        &[
            "-k",
            "-b",
            "-1",
            "--no-pager",
            "-q",
            "-o",
            "short-monotonic",
        ],
        Duration::from_secs(20),
    ) {
        Ok(o) if o.ok => Some(KernelLog {
            source: "journal (previous boot)".into(),
            lines: o.stdout.lines().map(str::to_string).collect(),
        }),
        Ok(o) => {
            notes.add(
                "journalctl -k -b -1 (previous boot)",
                first_line_or(&o.stderr, "no previous boot in the journal"),
            );
            None
        }
        Err(e) => {
            notes.add("journalctl -k -b -1 (previous boot)", e);
            None
        }
    }
}

fn first_line_or(s: &str, d: &str) -> String {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or(d)
        .to_string()
}

/// The text after a `[   12.345678] ` or `<3>[ ...] ` or journal prefix.
pub fn body(line: &str) -> &str {
    let l = line.trim_start();
    let l = if l.starts_with('<') {
        l.split_once('>').map(|(_, r)| r).unwrap_or(l)
    } else {
        l
    };
    if l.starts_with('[') {
        if let Some((_, r)) = l.split_once("] ") {
            return r;
        }
    }
    // journalctl short-monotonic: "[ 12.345678] host kernel: text"
    if let Some((_, r)) = l.split_once(" kernel: ") {
        return r;
    }
    l
}

const SPLATS: [&str; 7] = [
    "BUG:",
    "WARNING:",
    "Oops",
    "KASAN",
    "general protection fault",
    "Kernel panic",
    "unreferenced object",
];

/// True for a line of the driver or of DRM (kept in the snapshot's filtered dmesg); the
/// kernel's load errors for the module name it (`aigpu: version magic ...`).
pub fn relevant(line: &str) -> bool {
    let b = body(line);
    let l = b.to_ascii_lowercase();
    l.contains("aigpu") || l.contains("[drm") || l.starts_with("drm") || is_leak(b)
}

/// The end (exclusive) of the kernel report that starts at `i`: the line after its
/// `---[ end trace` marker, else the next report, at most 80 lines.
fn report_end(lines: &[String], i: usize) -> usize {
    let limit = (i + 80).min(lines.len());
    for (j, l) in lines.iter().enumerate().take(limit).skip(i + 1) {
        let b = body(l);
        if b.contains("---[ end trace") {
            return j + 1;
        }
        if SPLATS.iter().any(|s| b.contains(s)) {
            return j;
        }
    }
    limit
}

/// The lines of `log` that concern the driver: its and DRM's own lines, and the kernel's
/// reports (`BUG:`, `WARNING:`, `Oops`, KASAN, ...) as a whole when they name the driver (a
/// backtrace frame `[aigpu]`) or one of `pids` (`PID: <pid>`); nothing else.
pub fn filter_for(log: &KernelLog, pids: &[u32]) -> Vec<String> {
    let lines = &log.lines;
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let b = body(&lines[i]);
        if SPLATS.iter().any(|s| b.contains(s)) {
            let end = report_end(lines, i);
            let block = &lines[i..end];
            let ours = block.iter().any(|l| {
                let lb = body(l);
                lb.contains("[aigpu]")
                    || lb.to_ascii_lowercase().contains("aigpu")
                    || pids.iter().any(|p| lb.contains(&format!("PID: {p} ")))
            });
            if ours {
                out.extend(block.iter().cloned());
            }
            i = end;
            continue;
        }
        if relevant(&lines[i]) {
            out.push(lines[i].clone());
        }
        i += 1;
    }
    out
}

/// The driver's leak report. `pr_err!` in a Rust module prefixes the module name
/// (`aigpu: LEAK: aigpu0: ... still accounted at device release`); the bare form is accepted too.
fn is_leak(b: &str) -> bool {
    b.strip_prefix("aigpu: ").unwrap_or(b).starts_with("LEAK:")
}

/// The lines of `log` that concern the driver ([`filter_for`] with no process of interest).
pub fn filter(log: &KernelLog) -> Vec<String> {
    filter_for(log, &[])
}

/// What a kernel log line says, for the verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `aigpu: version magic '<built> ...' should be '<running> ...'`.
    VersionMagic {
        /// Release the module was built for.
        built: String,
        /// Running release.
        running: String,
    },
    /// `aigpu: Unknown symbol <sym> (err -2)`.
    UnknownSymbol(String),
    /// `aigpu: disagrees about version of symbol <sym>`.
    SymbolVersion(String),
    /// Any other `aigpu: ...` load failure (a parameter out of range, module verification).
    LoadError,
    /// `aigpu aigpu0: virtual AI GPU, UAPI 1.0, driver 0.1.0, 256 MiB`.
    Probe {
        /// Device.
        device: String,
        /// UAPI major.minor.
        uapi: Option<(u32, u32)>,
    },
    /// A fault line (`rules::report::FaultLine`): a page fault, or an uncorrectable memory
    /// error (a hardware event, [`FaultFacts::mem_error`]).
    Fault(FaultFacts),
    /// A job timeout line (`rules::report::HangLine`; its facts are read by key where used).
    Hang,
    /// The device was declared lost (`rules::lost::LostLine`).
    Lost {
        /// Why: the reset failed, or it fell off the bus.
        cause: LossCause,
        /// A fault injection did it.
        injected: bool,
    },
    /// A lost device was power-cycled and works again (`rules::lost::ReinitLine`).
    Reinit {
        /// Why it had been lost (`None`: the field did not name a cause this tool knows).
        lost_cause: Option<LossCause>,
    },
    /// The DRM wedged event of a lost device (`rules::lost::WedgedLine`).
    Wedged {
        /// The uevent was sent.
        sent: bool,
    },
    /// A kernel warning, BUG or oops whose backtrace names aigpu.
    Splat,
    /// The driver's `LEAK:` line at device release.
    Leak,
}

/// A recognised line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// What it says.
    pub event: Event,
    /// The line as logged.
    pub line: String,
    /// Its index in the log.
    pub index: usize,
}

fn quoted_after<'a>(s: &'a str, key: &str) -> Option<&'a str> {
    let i = s.find(key)? + key.len();
    let rest = s[i..].strip_prefix('\'')?;
    rest.split('\'').next()
}

/// Recognises the lines triage draws conclusions from.
pub fn classify(log: &KernelLog) -> Vec<Found> {
    let mut out = Vec::new();
    let lines = &log.lines;
    let mut i = 0;
    while i < lines.len() {
        let line = &lines[i];
        let b = body(line);
        let l = b.to_ascii_lowercase();
        let push = |out: &mut Vec<Found>, e: Event| {
            out.push(Found {
                event: e,
                line: line.clone(),
                index: i,
            })
        };
        let ours = l.starts_with("aigpu") || l.contains(" aigpu");
        if SPLATS.iter().any(|s| b.contains(s)) {
            // A backtrace that names the module: "[aigpu]" after a function in the next lines.
            let end = (i + 60).min(lines.len());
            let names_us = b.contains("aigpu")
                || lines[i + 1..end]
                    .iter()
                    .take_while(|n| !SPLATS.iter().any(|s| body(n).contains(s)))
                    .any(|n| n.contains("[aigpu]"));
            if names_us {
                push(&mut out, Event::Splat);
            }
        } else if ours && l.contains("version magic") {
            let built = quoted_after(b, "version magic ").unwrap_or("?");
            let running = quoted_after(b, "should be ").unwrap_or("?");
            push(
                &mut out,
                Event::VersionMagic {
                    built: built.split_whitespace().next().unwrap_or("?").into(),
                    running: running.split_whitespace().next().unwrap_or("?").into(),
                },
            );
        } else if ours && l.contains("unknown symbol") {
            let sym = b
                .split("nknown symbol ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .unwrap_or("?");
            push(&mut out, Event::UnknownSymbol(sym.into()));
        } else if ours && l.contains("disagrees about version of symbol") {
            let sym = b.rsplit(' ').next().unwrap_or("?");
            push(&mut out, Event::SymbolVersion(sym.into()));
        } else if ours && l.contains("virtual ai gpu") {
            let device = b
                .split_whitespace()
                .nth(1)
                .unwrap_or("?")
                .trim_end_matches(':');
            let uapi = b
                .split("UAPI ")
                .nth(1)
                .and_then(|r| r.split([',', ' ']).next())
                .and_then(|v| v.split_once('.'))
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)));
            push(
                &mut out,
                Event::Probe {
                    device: device.into(),
                    uapi,
                },
            );
        } else if is_leak(b) && l.contains("aigpu") {
            push(&mut out, Event::Leak);
        } else if ours {
            // The driver's event lines by their declared lead; then the kernel's load errors.
            let e = if let Some(e) = driver_event(message(line)) {
                Some(e)
            } else if l.contains("out of range")
                || l.contains("module verification failed")
                || (l.starts_with("aigpu:") && (l.contains("fail") || l.contains("error")))
            {
                Some(Event::LoadError)
            } else {
                None
            };
            if let Some(e) = e {
                push(&mut out, e);
            }
        }
        i += 1;
    }
    out
}

/// The message of a driver line: what follows `aigpu <device>: ` (`dev_*`) or `aigpu: ` (`pr_*`).
pub fn message(line: &str) -> &str {
    let b = body(line);
    b.strip_prefix("aigpu: ")
        .or_else(|| {
            b.strip_prefix("aigpu ")
                .and_then(|r| r.split_once(": ").map(|(_, m)| m))
        })
        .unwrap_or(b)
}

/// The fields of a driver line in a `rules::report` format (docs/kmd.md, "Faults, hangs, reset
/// and device loss"): its `key=value` pairs, the lead's words in `words`, without the clause
/// for people after the last `; `.
pub fn report_fields(line: &str) -> Kv {
    let m = message(line);
    Kv::parse(m.rsplit_once("; ").map_or(m, |(fields, _)| fields))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use rules::rules::lead;

    pub(super) fn log(t: &str) -> KernelLog {
        KernelLog {
            source: "dmesg".into(),
            lines: t.lines().map(str::to_string).collect(),
        }
    }

    #[test]
    fn load_errors() {
        let f = classify(&log("[    2.1] aigpu: version magic '7.3.4 SMP preempt mod_unload ' should be '7.3.5 SMP preempt mod_unload '\n[    2.2] aigpu: Unknown symbol drm_gem_shmem_pin (err -2)\n[    2.3] aigpu: num_devices=9 out of range 1..=8\n"));
        assert_eq!(
            f.iter().map(|f| f.event.clone()).collect::<Vec<_>>(),
            vec![
                Event::VersionMagic {
                    built: "7.3.4".into(),
                    running: "7.3.5".into()
                },
                Event::UnknownSymbol("drm_gem_shmem_pin".into()),
                Event::LoadError
            ]
        );
    }

    #[test]
    fn splat_naming_the_module() {
        let f = classify(&log("[ 5.0] WARNING: CPU: 0 PID: 1 at kernel/foo.c:1 bar+0x1/0x2\n[ 5.0] Modules linked in: aigpu\n[ 5.0] Call Trace:\n[ 5.0]  aigpu_thing+0x10/0x20 [aigpu]\n[ 6.0] WARNING: CPU: 0 PID: 1 at kernel/x.c:2 y\n[ 6.0] Call Trace:\n[ 6.0]  z+0x1/0x2\n"));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].index, 0);
    }

    pub(super) fn events(lines: &[String]) -> Vec<Event> {
        classify(&log(&lines.join("\n")))
            .into_iter()
            .map(|f| f.event)
            .collect()
    }

    #[test]
    fn the_drivers_lines_by_their_fields() {
        let fault = "[ 9.1] aigpu aigpu0: page fault: fault=unmapped access=read va=0x7f0010000 offset=24 queue=0 ctx=12 pid=4411 comm=python job=4711 injected=0; context banned";
        let k = report_fields(fault);
        assert_eq!(k.words, ["page", "fault:"]);
        assert_eq!(k.get("ctx"), Some("12"));
        assert_eq!(k.get("va"), Some("0x7f0010000"));
        assert_eq!(k.get("comm"), Some("python"));
        assert_eq!(
            k.get("injected"),
            Some("0"),
            "the clause for people is not a value"
        );
        let hang = "[ 9.2] aigpu 0000:00:04.0: job timeout: ctx=3 pid=50 comm=my app queue=1 job=18 seqno=1 ran_ms=2004 state=waiting wait=mem wait_va=0x4000 wait_value=1 offset=0 timeout_ms=2000 timeout_source=default recent_ms=none; context banned, resetting engine";
        let k = report_fields(hang);
        assert_eq!(k.get("comm"), Some("my app"));
        assert_eq!(k.get("recent_ms"), Some("none"));
        assert_eq!(message(hang).split(' ').next(), Some("job"));
        assert_eq!(
            events(&[
                fault.to_string(),
                hang.to_string(),
                "[ 9.3] aigpu aigpu0: the word timeout in some other line".into()
            ]),
            vec![
                Event::Fault(FaultFacts {
                    class: lead::PAGE_FAULT,
                    fault: "unmapped".into(),
                    access: "read".into(),
                    va: Some(0x7f0010000),
                    offset: Some(24),
                    ctx: Some(12),
                    pid: Some(4411),
                    comm: Some("python".into()),
                    injected: false,
                }),
                Event::Hang
            ],
            "only the declared leads"
        );
    }

    #[test]
    fn filter_keeps_reports_that_name_the_driver_or_the_process_only() {
        let l = log("[ 1.0] aigpu aigpu0: virtual AI GPU, UAPI 1.0, driver 0.1.0, 256 MiB\n[ 2.0] WARNING: CPU: 1 PID: 77 at fs/ext4/inode.c:1 ext4_thing+0x1/0x2\n[ 2.0] Call Trace:\n[ 2.0]  ext4_thing+0x1/0x2\n[ 2.0] ---[ end trace 0000000000000000 ]---\n[ 3.0] BUG: KASAN: use-after-free in foo+0x1/0x2\n[ 3.0] CPU: 0 PID: 4411 Comm: python\n[ 3.0] Call Trace:\n[ 3.0]  foo+0x1/0x2\n[ 3.0] ---[ end trace 0000000000000001 ]---\n[ 4.0] usbcore: registered new interface driver usbfs\n");
        assert_eq!(
            filter_for(&l, &[4411]),
            vec![
                "[ 1.0] aigpu aigpu0: virtual AI GPU, UAPI 1.0, driver 0.1.0, 256 MiB",
                "[ 3.0] BUG: KASAN: use-after-free in foo+0x1/0x2",
                "[ 3.0] CPU: 0 PID: 4411 Comm: python",
                "[ 3.0] Call Trace:",
                "[ 3.0]  foo+0x1/0x2",
                "[ 3.0] ---[ end trace 0000000000000001 ]---",
            ]
        );
        assert_eq!(
            filter(&l).len(),
            1,
            "the host's WARNING is not the driver's"
        );
    }
}
