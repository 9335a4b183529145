//! The application: faults and hangs of its contexts (the kernel's view first), the calls
//! libumd refused and why (use after free, out of bounds, out of memory and who holds it),
//! leaks, how each process ended.

use super::{
    dmesg_device, dmesg_ev, dmesg_found, ev, finding, journal_found, log_ev, losses_in_log, pid64,
    process, who, Evidence, Facts, Finding, LostInLog, Status,
};
use crate::debugfs::CrashDump;
use crate::dmesg::{self, Event};
use crate::timeout::{Judgement, TimeoutFacts};
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};
use crate::umdlog::Rec;
use crate::util::Wall;
use uapi::regs;

/// A fault or hang, from whichever source saw it.
#[derive(Clone, Debug)]
pub(super) struct Incident {
    kind: &'static str, // "page fault" | "job timeout" | "memory error"
    pub(super) device: String,
    time: Option<Wall>,
    pub(super) ctx: Option<String>,
    pub(super) pid: Option<u64>,
    comm: Option<String>,
    va: Option<String>,
    /// The packet's offset in its command buffer, when the record says.
    offset: Option<u64>,
    detail: String,
    /// A job timeout's facts, when the record has them.
    pub(super) hang: Option<TimeoutFacts>,
    /// A test's fault injection made it (the record's `injected` field).
    injected: bool,
    pub(super) evidence: Evidence,
}

impl Incident {
    /// The debugfs file that injects this kind of incident.
    fn injection_file(&self) -> &'static str {
        if self.kind == "page fault" {
            "inject_page_fault"
        } else {
            "inject_hang"
        }
    }

    /// What an injected incident's finding adds to its text.
    fn injected_note(&self) -> String {
        format!(
            " — injected by a test through debugfs {}",
            self.injection_file()
        )
    }

    /// An injected incident's fix.
    fn injected_fix(&self) -> String {
        format!(
            "none needed: the {} was injected by a test (debugfs {}); the context that ran the injected job was banned as for a real one",
            self.kind,
            self.injection_file()
        )
    }

    /// A job timeout whose facts say the timeout was too short for the job (`timeout`).
    pub(super) fn too_short(&self) -> Option<String> {
        match self.hang.as_ref()?.judge(None) {
            Judgement::TooShort(why) => Some(why),
            _ => None,
        }
    }

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
        offset: c.offset,
        detail: match (&c.fault, &c.access) {
            (Some(f), Some(a)) => format!("{f} {a}"),
            _ => String::new(),
        },
        hang: c.hang.clone(),
        injected: c.injected,
        evidence: ev(c.source.clone(), c.evidence.clone()),
    })
}

/// The application layer: what the programs did wrong, from the kernel's records of its
/// contexts (crash dumps, debugfs, dmesg) and from each process's own log.
/// The kernel's view of the faults and hangs: crash dumps, then live contexts without a dump,
/// else the dmesg lines (their `rules::report` fields).
pub(super) fn kernel_incidents(s: &Snapshot) -> Vec<Incident> {
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
            // A context banned for a memory error is the hardware layer's, never a page fault.
            let kind = if c.get("fault") == Some(regs::fault_kind_name(regs::FAULT_BUS_ERROR)) {
                continue;
            } else if c.get("fault").is_some() {
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
                offset: c.num("offset"),
                detail: format!("{} {}", c.or_dash("fault"), c.or_dash("access")),
                hang: None,
                // The contexts line does not say; a crash dump or the dmesg line does.
                injected: false,
                evidence: ev(format!("{}/contexts", dfs.dir), c.line.clone()),
            });
        }
    }
    if kernel_side.is_empty() {
        for (src, f) in dmesg_found(s).iter().chain(journal_found(s).iter()) {
            let device = dmesg_device(f).unwrap_or_else(|| "aigpu".into());
            let incident = match &f.event {
                // A memory error is the hardware layer's (`hardware.rs`), never a page fault.
                Event::Fault(x) if !x.mem_error() => Incident {
                    kind: "page fault",
                    device,
                    time: None,
                    ctx: x.ctx.map(|c| c.to_string()),
                    pid: x.pid,
                    comm: x.comm.clone(),
                    va: x.va.map(|v| format!("{v:#x}")),
                    offset: x.offset,
                    detail: format!("{} {}", x.fault, x.access),
                    hang: None,
                    injected: x.injected,
                    evidence: dmesg_ev(src, f),
                },
                Event::Hang => {
                    let k = dmesg::report_fields(&f.line);
                    Incident {
                        kind: "job timeout",
                        device,
                        time: None,
                        ctx: k.get("ctx").map(str::to_string),
                        pid: k.num("pid"),
                        comm: k.get("comm").map(str::to_string),
                        va: None,
                        offset: k.num("offset"),
                        detail: String::new(),
                        hang: TimeoutFacts::from_kv(&k),
                        injected: k.num("injected") == Some(1),
                        evidence: dmesg_ev(src, f),
                    }
                }
                _ => continue,
            };
            kernel_side.push(incident);
        }
    }
    kernel_side
}

pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
    // The kernel's view; a job timeout its facts call too short is the configuration layer's.
    let kernel_side: Vec<Incident> = kernel_incidents(s)
        .into_iter()
        .filter(|i| i.too_short().is_none())
        .collect();
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
        out.push(incident_finding(i, procs));
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

/// A fault or hang the kernel recorded, with its facts; when the process's own log tells the
/// same one (same pid, the log's context bound to the kernel's), libumd's finding of it, which
/// knows more (its context id, the packet, the buffers near the address, the other contexts'
/// fate, the fix), named with the kernel's context and device.
fn incident_finding(i: &Incident, procs: &[Process<'_>]) -> Finding {
    let kernel = kernel_incident_finding(i);
    let (Some(pid), Some(k)) = (i.pid, i.ctx.as_deref().and_then(|c| c.parse::<u64>().ok())) else {
        return kernel;
    };
    let Some(p) = procs
        .iter()
        .find(|p| pid64(p) == Some(pid) && p.backend() != Some("sim"))
    else {
        return kernel;
    };
    let umd = p.umd_ctx(k);
    let same_kind = |f: &Finding| match i.kind {
        "page fault" => matches!(f.facts.kind, "page_fault" | "use_after_free"),
        _ => f.facts.kind == "job_timeout",
    };
    let Some(mut f) = process::faults_and_hangs(p)
        .into_iter()
        .find(|f| f.facts.ctx == Some(umd) && same_kind(f))
    else {
        return kernel;
    };
    let when = i
        .time
        .map(|t| format!(" at {}", t.human()))
        .unwrap_or_default();
    f.text = format!(
        "{} (the kernel's context {k} on {}{when})",
        f.text, i.device
    );
    let mut e = kernel.evidence;
    e.append(&mut f.evidence);
    f.evidence = e;
    if f.facts.packet.is_none() {
        f.facts.packet = kernel.facts.packet;
    }
    // The kernel's record of a timeout has its facts; libumd's (on the kernel backend) does not.
    if let (Some(h), None) = (&i.hang, f.facts.ran_ms) {
        f.text = format!("{} — {}", f.text, h.text());
        h.apply(&mut f.facts);
    }
    if i.injected {
        f.text = format!("{}{}", f.text, i.injected_note());
        f.facts.injected = Some(true);
        f.facts.fix = i.injected_fix();
    }
    f
}

/// A fault or hang as the kernel's record tells it.
fn kernel_incident_finding(i: &Incident) -> Finding {
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
            "{} {} on {}{when} — the engine was reset and the context banned{}",
            i.what(),
            i.place(),
            i.device,
            match &i.hang {
                Some(h) => match h.judge(None) {
                    Judgement::Hang(why) => format!("; a genuine hang: {why} ({})", h.text()),
                    _ => format!("; {}", h.text()),
                },
                None => String::new(),
            }
        ),
    };
    let text = format!(
        "{text}{}",
        if i.injected {
            i.injected_note()
        } else {
            String::new()
        }
    );
    let page_fault = i.kind == "page fault";
    let mut facts = Facts::default();
    if let Some(h) = &i.hang {
        h.apply(&mut facts);
    }
    if i.injected {
        facts.injected = Some(true);
    }
    finding(text, vec![i.evidence.clone()]).with(Facts {
        kind: if page_fault { "page_fault" } else { "job_timeout" },
        pid: i.pid,
        ctx: i.ctx.as_deref().and_then(|c| c.parse().ok()),
        packet: i.offset.map(|o| format!("offset {o}")),
        va: i
            .va
            .as_deref()
            .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()),
        fix: if i.injected {
            i.injected_fix()
        } else if page_fault {
            "the packet's address is not mapped in the context: check the device pointer it was recorded with (a freed or foreign buffer, a wrong offset or leading dimension); libumd's log of the process (umd-smi triage --log-dir) tells which buffer is near it".into()
        } else {
            "a job ran past the job timeout: find the kernel or packet that waits on or spins on something that never comes (libumd's log of the process tells the packet)".into()
        },
        ..facts
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::umdlog::{facts, parse_text};

    fn fault() -> Incident {
        Incident {
            kind: "page fault",
            device: "aigpu0".into(),
            time: None,
            ctx: Some("12".into()),
            pid: Some(4411),
            comm: Some("python".into()),
            va: Some("0x7f0010000".into()),
            offset: Some(24),
            detail: "unmapped read".into(),
            hang: None,
            injected: false,
            evidence: ev(
                "crash-3",
                "fault type=unmapped access=read va=0x7f0010000 offset=24 job=4711",
            ),
        }
    }

    #[test]
    fn a_kernel_fault_alone_has_its_facts() {
        let f = incident_finding(&fault(), &[]);
        assert_eq!(f.facts.kind, "page_fault");
        assert_eq!(f.facts.pid, Some(4411));
        assert_eq!(f.facts.ctx, Some(12), "the kernel's context");
        assert_eq!(f.facts.packet.as_deref(), Some("offset 24"));
        assert_eq!(f.facts.va, Some(0x7f0010000));
        assert!(f.facts.fix.contains("device pointer"), "{}", f.facts.fix);
        let mut hang = fault();
        hang.kind = "job timeout";
        hang.va = None;
        let h = incident_finding(&hang, &[]);
        assert_eq!(h.facts.kind, "job_timeout");
        assert!(
            h.facts.fix.contains("waits on or spins on"),
            "{}",
            h.facts.fix
        );
    }

    /// An injected hang or page fault (debugfs `inject_hang`, `inject_page_fault`) says so, in
    /// its text, its `injected` fact and its fix; a crash dump's `job ... injected=1` line and
    /// the dmesg line's `injected=1` field both set it.
    #[test]
    fn an_injected_incident_says_it_was_injected() {
        let mut hang = fault();
        hang.kind = "job timeout";
        hang.va = None;
        hang.injected = true;
        let h = incident_finding(&hang, &[]);
        assert_eq!(h.facts.kind, "job_timeout");
        assert_eq!(h.facts.injected, Some(true));
        assert!(
            h.text
                .ends_with(" — injected by a test through debugfs inject_hang"),
            "{}",
            h.text
        );
        assert!(
            h.facts.fix.starts_with(
                "none needed: the job timeout was injected by a test (debugfs inject_hang)"
            ),
            "{}",
            h.facts.fix
        );
        let mut pf = fault();
        pf.injected = true;
        let f = incident_finding(&pf, &[]);
        assert_eq!(f.facts.injected, Some(true));
        assert!(f.text.contains("debugfs inject_page_fault"), "{}", f.text);
        assert_eq!(incident_finding(&fault(), &[]).facts.injected, None);

        let dump = crate::debugfs::parse_crash(
            "crash-4",
            "/sys/kernel/debug/dri/aigpu0/crashdumps/crash-4",
            "kind=hang ctx=3\nprocess pid=50 comm=exec_test client=2\ncontext ctx=3 queue=0 prio=normal\nhang job=9 ran_ms=2100 state=executing offset=0 timeout_ms=2000 timeout_source=param\njob id=9 seqno=1 cmdbuf=0 va=0x100000 size=8 injected=1\n",
        );
        assert!(dump.injected, "{dump:?}");
        assert!(crash_incident("aigpu0", &dump).is_some_and(|i| i.injected));
    }

    #[test]
    fn a_kernel_fault_its_process_logged_has_libumds_facts() {
        let recs = [
            "2026-11-29T02:13:07.100000Z 7987600000000 INFO tid=4411 umd::context - - ctx=2 code=- \"context created\" kmd_ctx=11",
            "2026-11-29T02:13:07.159900Z 7987686445000 ERROR tid=4411 umd::context - umd/src/context.rs:156 ctx=1 code=- \"context lost\" event=ctx_lost kmd_ctx=12 cause=fault reset=guilty fault=unmapped access=read va=0x7f0010000 offset=24 submitted=57 completed=56",
            "2026-11-29T02:13:07.200000Z 7987700000000 INFO tid=4411 umd::context - - ctx=2 code=- \"context destroyed\" event=ctx_destroyed reset=innocent submitted=8 completed=8",
        ]
        .map(|l| parse_text(l).expect("parses"));
        let p = facts::Process {
            pid: Some(4411),
            facts: recs
                .iter()
                .filter_map(|r| facts::of(r).map(|f| (f, r)))
                .collect(),
        };
        let f = incident_finding(&fault(), &[p]);
        assert_eq!(f.facts.kind, "page_fault");
        assert_eq!(
            f.facts.ctx,
            Some(1),
            "libumd's context, bound to the kernel's 12"
        );
        assert_eq!(f.facts.packet.as_deref(), Some("offset 24"));
        assert_eq!(f.facts.va, Some(0x7f0010000));
        assert_eq!(f.facts.innocent.len(), 1, "{:?}", f.facts.innocent);
        assert_eq!(f.facts.innocent[0].0, 2);
        assert!(
            f.text.contains("the kernel's context 12 on aigpu0"),
            "{}",
            f.text
        );
        assert_eq!(
            f.evidence.len(),
            2,
            "the crash dump, then the log: {:?}",
            f.evidence
        );
        assert_eq!(f.evidence[0].source, "crash-3");
    }
}
