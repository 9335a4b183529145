//! The application: faults and hangs of its contexts (the kernel's view first), the calls
//! libumd refused and why (use after free, out of bounds, out of memory and who holds it),
//! leaks, how each process ended.

use super::{
    dmesg_device, dmesg_ev, dmesg_found, ev, finding, journal_found, log_ev, losses_in_log,
    process, who, Evidence, Finding, LostInLog, Status,
};
use crate::debugfs::CrashDump;
use crate::dmesg::{self, Event};
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};
use crate::umdlog::Rec;
use crate::util::Wall;

/// A fault or hang, from whichever source saw it.
#[derive(Clone, Debug)]
struct Incident {
    kind: &'static str, // "page fault" | "job timeout" | "memory error"
    device: String,
    time: Option<Wall>,
    ctx: Option<String>,
    pid: Option<u64>,
    comm: Option<String>,
    va: Option<String>,
    detail: String,
    evidence: Evidence,
}

impl Incident {
    fn what(&self) -> String {
        match self.kind {
            "page fault" => format!(
                "a page fault at {}",
                self.va.as_deref().unwrap_or("an unknown address")
            ),
            "job timeout" => "a job timeout (GPU hang)".into(),
            k => format!("a {k}"),
        }
    }

    fn place(&self) -> String {
        format!(
            "in context {} ({})",
            self.ctx.as_deref().unwrap_or("?"),
            who(self.pid, self.comm.as_deref())
        )
    }
}

fn crash_incident(device: &str, c: &CrashDump) -> Option<Incident> {
    let kind = match c.kind.as_str() {
        "page_fault" => "page fault",
        "hang" => "job timeout",
        _ => return None,
    };
    Some(Incident {
        kind,
        device: device.to_string(),
        time: c.time,
        ctx: c.ctx.map(|x| x.to_string()),
        pid: c.pid,
        comm: c.comm.clone(),
        va: c.va.clone(),
        detail: match (&c.fault, &c.access) {
            (Some(f), Some(a)) => format!("{f} {a}"),
            _ => String::new(),
        },
        evidence: ev(c.source.clone(), c.evidence.clone()),
    })
}

/// The application layer: what the programs did wrong, from the kernel's records of its
/// contexts (crash dumps, debugfs, dmesg) and from each process's own log.
pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
    // The kernel's view: crash dumps, then live contexts without a dump, else dmesg lines.
    let mut kernel_side: Vec<Incident> = Vec::new();
    for d in &s.view.devices {
        let Some(dfs) = &d.debugfs else { continue };
        let mut crash_ctx = Vec::new();
        for c in &dfs.crashes {
            if let Some(i) = crash_incident(&d.name, c) {
                crash_ctx.push(i.ctx.clone());
                kernel_side.push(i);
            }
        }
        for c in &dfs.contexts {
            let ctx = c.get("ctx").map(str::to_string);
            if crash_ctx.contains(&ctx) {
                continue;
            }
            let kind = if c.get("fault").is_some() {
                "page fault"
            } else if c.get("hung") == Some("1") {
                "job timeout"
            } else {
                continue;
            };
            kernel_side.push(Incident {
                kind,
                device: d.name.clone(),
                time: None,
                ctx,
                pid: c.num("pid"),
                comm: c.get("comm").map(str::to_string),
                va: c.get("va").map(str::to_string),
                detail: format!("{} {}", c.or_dash("fault"), c.or_dash("access")),
                evidence: ev(format!("{}/contexts", dfs.dir), c.line.clone()),
            });
        }
    }
    if kernel_side.is_empty() {
        for (src, f) in dmesg_found(s).iter().chain(journal_found(s).iter()) {
            let kind = match f.event {
                Event::Fault => "page fault",
                Event::Hang => "job timeout",
                _ => continue,
            };
            let device = dmesg_device(f).unwrap_or_else(|| "aigpu".into());
            kernel_side.push(Incident {
                kind,
                device,
                time: None,
                ctx: dmesg::loose(&f.line, &["ctx", "context"]),
                pid: dmesg::loose(&f.line, &["pid"]).and_then(|p| p.parse().ok()),
                comm: dmesg::loose(&f.line, &["comm"]),
                va: dmesg::loose(&f.line, &["va", "at", "address"]),
                detail: String::new(),
                evidence: dmesg_ev(src, f),
            });
        }
    }
    let mut out = Vec::new();
    // 1. A device the kernel reports lost: after its most recent fault or hang.
    let lost_dev: Vec<&crate::smi::DeviceView> = s
        .view
        .devices
        .iter()
        .filter(|d| d.state() == "lost")
        .collect();
    // A device lost earlier and re-initialised since (the kernel log says both): the loss is
    // still what happened to the application that was using it.
    let dm = dmesg_found(s);
    let lost_before: Vec<LostInLog<'_>> = if lost_dev.is_empty() {
        losses_in_log(&dm)
    } else {
        Vec::new()
    };
    if !lost_dev.is_empty() || !lost_before.is_empty() {
        // What led to the loss: the most recent fault or hang on a lost device. Another
        // device's incident, however recent, is not the cause (a device named only `aigpu`, a
        // kernel line without its device, may be any of them).
        let lost_names: Vec<&str> = lost_dev
            .iter()
            .map(|d| d.name.as_str())
            .chain(lost_before.iter().map(|l| l.device.as_str()))
            .collect();
        let on_lost = |i: &&Incident| {
            i.device == "aigpu"
                || lost_names
                    .iter()
                    .any(|n| *n == "aigpu" || *n == i.device.as_str())
        };
        let last = kernel_side.iter().filter(on_lost).max_by_key(|i| i.time);
        // libumd's own record of the loss (a process on the kernel backend), when it came after
        // that fault.
        let lost_log: Option<&Rec> = procs
            .iter()
            .filter(|p| p.backend() != Some("sim"))
            .flat_map(|p| p.facts.iter())
            .filter(|(f, r)| {
                *f == Fact::DeviceLost && last.and_then(|i| i.time).is_none_or(|t| r.wall >= t)
            })
            .map(|(_, r)| *r)
            .next_back();
        let at = lost_log.map(|r| r.wall).or(last.and_then(|i| i.time));
        let mut e = Vec::new();
        for d in &lost_dev {
            if let Some(dfs) = &d.debugfs {
                if let Some(st) = &dfs.status {
                    e.push(ev(format!("{}/status", dfs.dir), st.line.clone()));
                }
            }
        }
        for l in &lost_before {
            e.push(dmesg_ev(&l.failed.0, &l.failed.1));
        }
        if let Some(r) = lost_log {
            e.push(log_ev(r));
        }
        if let Some(i) = last {
            e.push(i.evidence.clone());
        }
        let when = at.map(|t| format!(" at {}", t.hms())).unwrap_or_default();
        let since = if lost_before.iter().any(|l| l.reinit.is_some()) {
            " (re-initialised since)"
        } else {
            ""
        };
        out.push(finding(
            match last {
                Some(i) => format!("device lost{when} after {} {}{since}", i.what(), i.place()),
                None => format!("device lost{when} (no fault or hang recorded before it){since}"),
            },
            e,
        ));
    }
    // 2. The kernel's faults and hangs, most recent first.
    let mut sorted: Vec<&Incident> = kernel_side.iter().collect();
    sorted.sort_by_key(|i| std::cmp::Reverse(i.time));
    for i in sorted {
        out.push(incident_finding(i));
    }
    // 3. Each process's own log: its faults and hangs when the kernel's view has none, the
    //    calls libumd refused, leaks, how it ended.
    out.extend(process::findings(procs, kernel_side.is_empty()));
    if !out.is_empty() {
        return Status::Findings(out);
    }
    if procs.is_empty() && s.view.devices.is_empty() {
        return Status::NotChecked("no aigpu device and no libumd log".into());
    }
    let mut seen = Vec::new();
    if !s.ks.debugfs.devices().is_empty() {
        seen.push("debugfs contexts and crash dumps".to_string());
    }
    if s.dmesg.is_some() {
        seen.push("dmesg".into());
    }
    if !s.logs.files.is_empty() {
        seen.push(format!(
            "{} libumd log file{}",
            s.logs.files.len(),
            if s.logs.files.len() == 1 { "" } else { "s" }
        ));
    }
    Status::Ok(format!(
        "no faults, hangs, refused calls or leaks in {}",
        if seen.is_empty() {
            "anything readable".to_string()
        } else {
            seen.join(", ")
        }
    ))
}

fn incident_finding(i: &Incident) -> Finding {
    let when = i
        .time
        .map(|t| format!(" at {}", t.human()))
        .unwrap_or_default();
    let text = match i.kind {
        "page fault" => format!(
            "{} {} on {}{when}{} — the context was banned; other contexts keep running",
            i.what(),
            i.place(),
            i.device,
            if i.detail.trim().is_empty() || i.detail.trim() == "- -" {
                String::new()
            } else {
                format!(" ({})", i.detail.trim())
            }
        ),
        _ => format!(
            "{} {} on {}{when} — the engine was reset and the context banned",
            i.what(),
            i.place(),
            i.device
        ),
    };
    finding(text, vec![i.evidence.clone()])
}
