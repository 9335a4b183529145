//! Hardware: bus, memory and reset errors, judged from hardware events only (a memory error is
//! never a page fault), on both backends; an injected fault says so.

use super::{
    any_device, dmesg_ev, dmesg_found, ev, finding, hex, log_ev, losses_in_log, pid64, sim_devices,
    who, Facts, Finding, Status,
};
use crate::dmesg::{Event, FaultFacts, Found};
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};
use rules::rules::lost::LossCause;

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
        if let Event::Fault(x) = &f.event {
            if x.mem_error() {
                out.push(kernel_mem_error(src, f, x));
            }
        }
    }
    let losses = losses_in_log(&dm);
    let mut told = Vec::new();
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
            // they say nothing about the bus; the loss's line says why (`cause`).
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
            // The line of this device's loss (a line without its device may be any device's).
            let line = losses
                .iter()
                .rev()
                .find(|l| l.device == d.name || l.device == "aigpu");
            let mut e = Vec::new();
            if let Some(l) = line {
                e.push(dmesg_ev(&l.failed.0, &l.failed.1));
            }
            if let Some(st) = &dfs.status {
                e.push(ev(format!("{}/status", dfs.dir), st.line.clone()));
            }
            let injected = line.map(|l| l.injected);
            // Without its `device lost` line the cause is not known: said so, not guessed.
            let why = match line.map(|l| l.cause) {
                Some(LossCause::ResetFailed) => "the engine did not come back from a reset",
                Some(LossCause::OffBus) => "it fell off the bus",
                None => "the cause is not in the kernel log read (its `device lost` line is not there: rotated out of the ring buffer, or dmesg not readable)",
            };
            let inj = line
                .map(|l| injected_note(l.injected, kernel_injection(l.cause)))
                .unwrap_or_default();
            out.push(
                finding(
                    format!(
                        "{} is lost: {why}{inj} (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)",
                        d.name,
                    ),
                    e,
                )
                .with(loss_facts(line.map(|l| l.cause), injected)),
            );
            told.push(d.name.clone());
        }
    }
    // Losses the log records of devices not lost now (re-initialised since), or whose state is
    // not visible (no debugfs).
    for l in losses.iter().rev().filter(|l| !told.contains(&l.device)) {
        let (src, f) = l.failed;
        let why = match l.cause {
            LossCause::ResetFailed => "an engine reset failed",
            LossCause::OffBus => "it fell off the bus",
        };
        let inj = injected_note(l.injected, kernel_injection(l.cause));
        out.push(
            match l.reinit {
                // Lost, and power-cycled since: it works now, but the work on it then was lost.
                Some((rsrc, r)) => finding(
                    format!(
                        "{} was lost ({why}{inj}) and has been re-initialised since",
                        l.device
                    ),
                    vec![dmesg_ev(src, f), dmesg_ev(rsrc, r)],
                ),
                None => finding(
                    format!("{} is lost: {why}{inj}", l.device),
                    vec![dmesg_ev(src, f)],
                ),
            }
            .with(loss_facts(Some(l.cause), Some(l.injected))),
        );
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

/// The root-only debugfs file that injects a loss of this cause (docs/kmd.md, "Faults, hangs,
/// reset and device loss").
fn kernel_injection(cause: LossCause) -> &'static str {
    match cause {
        LossCause::ResetFailed => "inject_reset_failure",
        LossCause::OffBus => "inject_fall_off_bus",
    }
}

/// What a finding of an injected event adds to its text.
fn injected_note(injected: bool, file: &str) -> String {
    if injected {
        format!(", injected through debugfs {file}")
    } else {
        String::new()
    }
}

/// The facts of a kernel device loss.
fn loss_facts(cause: Option<LossCause>, injected: Option<bool>) -> Facts {
    Facts {
        kind: "device_lost",
        cause: cause.map(LossCause::name),
        injected,
        fix: if injected == Some(true) {
            "none needed: the loss was injected by a test (debugfs); close every file of the device and the next open re-initialises it".into()
        } else {
            "close every file of the device (the next open power-cycles it; umd-smi triage lists the holders); a loss that repeats is the hardware's: take the device out of service".into()
        },
        ..Facts::default()
    }
}

/// The kernel's memory-error line (`rules::report::FaultLine` with the memory-error lead).
fn kernel_mem_error(src: &str, f: &Found, x: &FaultFacts) -> Finding {
    let on = super::dmesg_device(f).unwrap_or_else(|| "aigpu".into());
    let at = x.va.map(|v| format!(" at {}", hex(v))).unwrap_or_default();
    let ctx = match (x.ctx, x.pid) {
        (Some(c), _) => format!(" in context {c} ({})", who(x.pid, x.comm.as_deref())),
        _ => String::new(),
    };
    finding(
        format!(
            "uncorrectable device memory error on {on}{at}{ctx}{}",
            injected_note(x.injected, "inject_mem_error")
        ),
        vec![dmesg_ev(src, f)],
    )
    .with(Facts {
        kind: "memory_error",
        pid: x.pid,
        ctx: x.ctx,
        va: x.va,
        injected: Some(x.injected),
        fix: if x.injected {
            "none needed: the fault was injected by a test (debugfs inject_mem_error)".into()
        } else {
            "a hardware fault: take the device out of service and check it (memory errors repeat)"
                .into()
        },
        ..Facts::default()
    })
}

/// `UMD_DEBUG_FAULT_*` values (include/umd.h).
const INJECT_MEM_ERROR: u64 = 1;
const INJECT_RESET_FAILURE: u64 = 2;
const INJECT_FALL_OFF_BUS: u64 = 3;

/// Hardware events in the processes' own logs: the device's bus-error fault record, the device
/// loss after it, each with whether an injection made it (the record's `injected` field, else a
/// `fault_injected` record of that fault before it) and the loss with its cause (the simulated
/// driver's loss record, `cause`, else what came before it).
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
        // The backend's own record of the loss (the simulated driver's), for the loss after it.
        let mut dev_lost: Option<(LossCause, bool)> = None;
        let bus_error = uapi::regs::fault_kind_name(uapi::regs::FAULT_BUS_ERROR);
        for (i, (f, r)) in p.facts.iter().enumerate() {
            match f {
                Fact::DevLost { cause, injected } => dev_lost = Some((*cause, *injected)),
                Fact::DevFault {
                    fault,
                    va,
                    injected: said,
                    ..
                } if fault == bus_error => {
                    mem_error = Some(i);
                    let inj = said.unwrap_or_else(|| injected(INJECT_MEM_ERROR, i));
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
                            injected: Some(inj),
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
                    // The cause: the simulated driver's loss record; a process on aigpu.ko has
                    // only its own injections to go by (the kernel's line is in dmesg).
                    let (cause, inj) = dev_lost.unwrap_or_else(|| {
                        if injected(INJECT_FALL_OFF_BUS, i) {
                            (LossCause::OffBus, true)
                        } else {
                            (LossCause::ResetFailed, injected(INJECT_RESET_FAILURE, i))
                        }
                    });
                    let mut e = vec![log_ev(r)];
                    if let Some(m) = mem_error {
                        e.push(log_ev(p.facts[m].1));
                    }
                    let after = match (cause, mem_error.is_some()) {
                        (LossCause::OffBus, _) => "the device fell off the bus",
                        (LossCause::ResetFailed, true) => {
                            "the engine reset after the memory error failed"
                        }
                        (LossCause::ResetFailed, false) => "an engine reset failed",
                    };
                    out.push(
                        finding(
                            format!(
                                "{device} is lost: {after}{}; every later call fails with UMD_ERR_DEVICE_LOST",
                                if inj { " (injected by umdDebugInjectFault)" } else { "" }
                            ),
                            e,
                        )
                        .with(Facts {
                            kind: "device_lost",
                            pid: pid64(p),
                            cause: Some(cause.name()),
                            injected: Some(inj),
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
