//! Hardware: bus, memory and reset errors, judged from hardware events only (a memory error is
//! never a page fault), on both backends; an injected fault says so.

use super::{
    any_device, dmesg_ev, dmesg_found, ev, finding, hex, log_ev, losses_in_log, pid64, sim_devices,
    who, Facts, Finding, Status,
};
use crate::dmesg::Event;
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};

/// The hardware layer: the kernel's view of its devices (dmesg, debugfs), and the hardware
/// events in the logs of processes on the simulator.
pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
    let from_logs = log_events(procs);
    if !any_device(s) {
        if !from_logs.is_empty() {
            return Status::Findings(from_logs);
        }
        if let Some(st) = published(s) {
            return st;
        }
        let sims = procs.iter().filter(|p| p.backend() == Some("sim")).count();
        if sims > 0 {
            return Status::Ok(format!(
                "the simulated device of {sims} process{}: no memory, bus or reset errors in {}",
                if sims == 1 { "" } else { "es" },
                if sims == 1 { "its log" } else { "their logs" }
            ));
        }
        return Status::NotChecked(if s.ks.module.loaded {
            "no aigpu device to look at (see the kernel module layer)".into()
        } else {
            "the aigpu devices are created by the kernel module, which is not loaded".into()
        });
    }
    let mut out = Vec::new();
    let dm = dmesg_found(s);
    for (src, f) in dm.iter().rev() {
        match f.event {
            Event::OffBus => out.push(finding(
                "the device fell off the bus (its registers read all ones)",
                vec![dmesg_ev(src, f)],
            )),
            Event::MemError => out.push(finding(
                "uncorrectable device memory error",
                vec![dmesg_ev(src, f)],
            )),
            _ => {}
        }
    }
    for d in &s.view.devices {
        let Some(dfs) = &d.debugfs else { continue };
        for c in dfs.crashes.iter().rev() {
            if c.kind == "mem_error" {
                out.push(finding(
                    format!(
                        "uncorrectable memory error on {}{} in context {} ({})",
                        d.name,
                        c.time
                            .map(|t| format!(" at {}", t.hms()))
                            .unwrap_or_default(),
                        c.ctx.map(|x| x.to_string()).unwrap_or_else(|| "?".into()),
                        who(c.pid, c.comm.as_deref())
                    ),
                    vec![ev(c.source.clone(), c.evidence.clone())],
                ));
            }
            // A dump of the loss itself (`kind=lost`, docs/kmd.md "Standard interfaces") is made
            // after the reset that failed: its registers read all ones whatever the cause, so
            // they say nothing about the bus; the finding below says what is known.
            if c.kind != "lost"
                && c.registers
                    .as_deref()
                    .is_some_and(|r| r.contains("STATUS=0xffffffff"))
            {
                out.push(finding(
                    format!("{} fell off the bus (registers read all ones)", d.name),
                    vec![ev(
                        c.source.clone(),
                        c.registers.clone().unwrap_or_default(),
                    )],
                ));
            }
        }
        if d.state() == "lost" {
            let failed = dm.iter().rev().find(|(_, f)| f.event == Event::ResetFailed);
            let mut e = Vec::new();
            if let Some((src, f)) = failed {
                e.push(dmesg_ev(src, f));
            }
            if let Some(st) = &dfs.status {
                e.push(ev(format!("{}/status", dfs.dir), st.line.clone()));
            }
            out.push(finding(
                format!(
                    "{} is lost: the engine did not come back from a reset (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)",
                    d.name
                ),
                e,
            ));
        }
    }
    if out.is_empty() {
        for l in losses_in_log(&dm).iter().rev() {
            let (src, f) = l.failed;
            match l.reinit {
                // Lost, and power-cycled since: it works now, but the work on it then was lost.
                Some((rsrc, r)) => out.push(finding(
                    format!(
                        "{} was lost (an engine reset failed) and has been re-initialised since",
                        l.device
                    ),
                    vec![dmesg_ev(src, f), dmesg_ev(rsrc, r)],
                )),
                None => out.push(finding(
                    "an engine reset failed: the device is lost",
                    vec![dmesg_ev(src, f)],
                )),
            }
        }
    }
    out.extend(from_logs);
    if !out.is_empty() {
        return Status::Findings(out);
    }
    let states: Vec<String> = s
        .view
        .devices
        .iter()
        .map(|d| format!("{} state {}", d.name, d.state()))
        .collect();
    let mut looked = Vec::new();
    if s.dmesg.is_none() {
        looked.push("dmesg not read");
    }
    if s.ks.debugfs.devices().is_empty() {
        looked.push("debugfs not read");
    }
    Status::Ok(format!(
        "{}; no bus, memory or reset errors{}",
        states.join(", "),
        if looked.is_empty() {
            String::new()
        } else {
            format!(" (as far as visible: {})", looked.join(", "))
        }
    ))
}

/// Without a kernel device: the simulator devices other processes publish, by their `status`.
fn published(s: &Snapshot) -> Option<Status> {
    let mut ok = Vec::new();
    let mut out = Vec::new();
    for d in sim_devices(s) {
        let (Some(o), Some(dfs)) = (&d.owner, &d.debugfs) else {
            continue;
        };
        let what = format!("{} of pid {} ({})", d.name, o.pid, o.comm);
        if d.state() == "lost" {
            out.push(
                finding(
                    format!("the simulated device {what} is lost: an engine reset failed or it fell off the bus; every later call fails with UMD_ERR_DEVICE_LOST"),
                    dfs.status
                        .iter()
                        .map(|st| ev(format!("{}/status", dfs.dir), st.line.clone()))
                        .collect(),
                )
                .with(Facts {
                    kind: "device_lost",
                    pid: Some(u64::from(o.pid)),
                    fix: "restart the process (the simulated device is the process's own)".into(),
                    ..Facts::default()
                }),
            );
        } else {
            ok.push(format!("{what} state {}", d.state()));
        }
    }
    if !out.is_empty() {
        return Some(Status::Findings(out));
    }
    (!ok.is_empty()).then(|| {
        Status::Ok(format!(
            "the simulated devices other processes publish: {}; no memory, bus or reset errors in their status",
            ok.join(", ")
        ))
    })
}

/// `UMD_DEBUG_FAULT_*` values (include/umd.h).
const INJECT_MEM_ERROR: u64 = 1;
const INJECT_RESET_FAILURE: u64 = 2;
const INJECT_FALL_OFF_BUS: u64 = 3;

/// Hardware events in the processes' own logs: the device's bus-error fault record, the device
/// loss after it, and the test hook's injections before them.
fn log_events(procs: &[Process<'_>]) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in procs {
        let sim = p.backend() == Some("sim");
        let injected = |what: u64, before: usize| {
            p.facts[..before]
                .iter()
                .any(|(f, _)| *f == Fact::FaultInjected { fault: what })
        };
        let device = if sim {
            format!("the simulated device of pid {}", p.pid.unwrap_or(0))
        } else {
            format!("the device of pid {}", p.pid.unwrap_or(0))
        };
        let mut mem_error: Option<usize> = None;
        for (i, (f, r)) in p.facts.iter().enumerate() {
            match f {
                Fact::DevFault { fault, va, .. } if fault == "bus-error" => {
                    mem_error = Some(i);
                    let inj = injected(INJECT_MEM_ERROR, i);
                    out.push(
                        finding(
                            format!(
                                "uncorrectable memory error on {device} at {}{}",
                                hex(*va),
                                if inj { " (injected by umdDebugInjectFault)" } else { "" }
                            ),
                            vec![log_ev(r)],
                        )
                        .with(Facts {
                            kind: "memory_error",
                            pid: pid64(p),
                            va: Some(*va),
                            fix: if inj {
                                "none needed: the fault was injected by a test hook (UMD_DEBUG_FAULT_MEM_ERROR)".into()
                            } else {
                                "a hardware fault: take the device out of service and check it (memory errors repeat)".into()
                            },
                            ..Facts::default()
                        }),
                    );
                }
                Fact::DeviceLost => {
                    let inj = injected(INJECT_RESET_FAILURE, i);
                    let bus = injected(INJECT_FALL_OFF_BUS, i);
                    let mut e = vec![log_ev(r)];
                    if let Some(m) = mem_error {
                        e.push(log_ev(p.facts[m].1));
                    }
                    let after = match (mem_error.is_some(), bus) {
                        (_, true) => "the device fell off the bus",
                        (true, _) => "the engine reset after the memory error failed",
                        _ => "an engine reset failed",
                    };
                    out.push(
                        finding(
                            format!(
                                "{device} is lost: {after}{}; every later call fails with UMD_ERR_DEVICE_LOST",
                                if inj || bus { " (injected by umdDebugInjectFault)" } else { "" }
                            ),
                            e,
                        )
                        .with(Facts {
                            kind: "device_lost",
                            pid: pid64(p),
                            fix: if sim {
                                "restart the process (the simulated device is the process's own)".into()
                            } else {
                                "the device works again once every process using it has closed it (the next open power-cycles it), or reload aigpu".into()
                            },
                            ..Facts::default()
                        }),
                    );
                }
                _ => {}
            }
        }
    }
    out
}
