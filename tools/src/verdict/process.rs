//! The application findings one process's own log proves, from its fact records
//! ([`crate::umdlog::facts`]): its contexts' faults and hangs, the calls libumd refused (use after
//! free, out of bounds, out of memory and who holds the memory), leaks, and how it ended.

use super::{finding, hex, leaks, log_ev, pid64, refused, Facts, Finding};
use crate::timeout::{Judgement, TimeoutFacts};
use crate::umdlog::facts::{Buf, Fact, Lost, Process};
use crate::util::bytes;

/// Every process's findings, the most recent process first. `incidents`: also the faults and
/// hangs (false when the kernel's records already tell them).
pub(super) fn findings(procs: &[Process<'_>], incidents: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut by_last: Vec<&Process<'_>> = procs.iter().collect();
    by_last.sort_by_key(|p| std::cmp::Reverse(p.facts.last().map(|(_, r)| r.wall)));
    for p in by_last {
        if incidents {
            out.extend(faults_and_hangs(p));
        }
        out.extend(refused::refused_calls(p));
        out.extend(leaks::leaks(p));
        out.extend(fatal_signal(p));
    }
    out
}

/// A process that died of a fatal signal (its black box's `process_exit` record, `how=signal`):
/// a crash in the application or a library it loaded, whatever the GPU did before.
fn fatal_signal(p: &Process<'_>) -> Option<Finding> {
    let (f, r) = p.exit()?;
    let Fact::Exit {
        how,
        signal,
        status,
        live_context_count,
        live_buffers,
        ..
    } = f
    else {
        return None;
    };
    if how != "signal" {
        return None;
    }
    let n = |k: u64, what: &str| format!("{k} {what}{}", if k == 1 { "" } else { "s" });
    Some(
        finding(
            format!(
                "pid {} died of {signal} (status {status}) with {} and {} still live",
                pid_s(p),
                n(*live_context_count, "context"),
                n(*live_buffers, "buffer")
            ),
            vec![log_ev(r)],
        )
        .with(Facts {
            kind: "fatal_signal",
            pid: pid64(p),
            signal: Some(signal.clone()),
            fix: "the process crashed: its black box (umd-blackbox-<pid>-*.log) holds its last \
                  warnings and errors; a core dump (ulimit -c unlimited) or a debugger gives the \
                  faulting stack"
                .into(),
            ..Facts::default()
        }),
    )
}

pub(super) fn pid_s(p: &Process<'_>) -> String {
    p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
}

/// The other contexts of the process and what became of their work.
pub(super) fn innocent(p: &Process<'_>, guilty: u64) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = p
        .facts
        .iter()
        .filter_map(|(f, _)| match f {
            Fact::CtxDestroyed {
                ctx,
                reset,
                submitted,
                completed,
            } if *ctx != guilty && *submitted > 0 => Some((
                *ctx,
                format!(
                    "{}; {completed} of {submitted} jobs completed",
                    match reset.as_str() {
                        "innocent" => "caught in the reset, its work resubmitted",
                        "none" => "not reset",
                        other => other,
                    }
                ),
            )),
            _ => None,
        })
        .collect();
    if let Some((Fact::Exit { live_contexts, .. }, _)) = p.exit() {
        for c in live_contexts {
            if *c != guilty && !v.iter().any(|(x, _)| x == c) {
                v.push((*c, "still live at exit".into()));
            }
        }
    }
    v
}

pub(super) fn innocent_text(v: &[(u64, String)]) -> String {
    if v.is_empty() {
        return String::new();
    }
    format!(
        "; other contexts: {}",
        v.iter()
            .map(|(c, w)| format!("context {c} {w}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// "<gap> B <where> buffer 6 (2.0 MiB at 0xc10000, context 2)", that buffer's id and size.
fn relation(gap: u64, place: &str, b: &Buf<'_>) -> (String, u64, u64) {
    let gap = if gap > FAR {
        bytes(gap)
    } else {
        format!("{gap} B")
    };
    (
        format!(
            "{gap} {place} buffer {} ({} at {}, context {})",
            b.1,
            bytes(b.2),
            hex(b.3),
            b.0
        ),
        b.1,
        b.2,
    )
}

/// Where `va` lies relative to the buffers live before fact `at`: "0 B past the end of buffer
/// 6 (2.0 MiB at 0xc10000, context 2)" and that buffer; gigabytes away is no relation, and
/// says so, naming the nearest all the same.
pub(super) fn nearest(p: &Process<'_>, at: usize, va: u64) -> Option<(String, u64, u64)> {
    let live = p.live_at(at);
    if let Some(b) = live.iter().find(|b| va >= b.3 && va < b.3 + b.2) {
        return Some(relation(va - b.3, "into", b));
    }
    let below = live
        .iter()
        .filter(|b| b.3 + b.2 <= va)
        .max_by_key(|b| b.3 + b.2);
    let above = live.iter().filter(|b| b.3 > va).min_by_key(|b| b.3);
    let (gap, near) = match (below, above) {
        (Some(b), a) if a.is_none_or(|a| va - (b.3 + b.2) <= a.3 - va) => {
            let gap = va - (b.3 + b.2);
            (gap, relation(gap, "past the end of", b))
        }
        (_, Some(a)) => (a.3 - va, relation(a.3 - va, "before", a)),
        _ => return None,
    };
    Some(if gap > FAR {
        (
            format!("in no live buffer and near none (the nearest: {})", near.0),
            near.1,
            near.2,
        )
    } else {
        near
    })
}

/// Farther than this from every buffer, an address is not "just past" one.
const FAR: u64 = 16 << 20;

/// The facts of the process's job timeout on context `ctx` (libumd's id): the backend's record.
pub(super) fn timeout_facts<'p>(p: &'p Process<'_>, ctx: u64) -> Option<&'p TimeoutFacts> {
    p.facts.iter().find_map(|(f, _)| match f {
        Fact::DevTimeout {
            kmd_ctx,
            facts: Some(t),
            ..
        } if p.umd_ctx(*kmd_ctx) == ctx => Some(t),
        _ => None,
    })
}

/// Why the process's job timeout on context `ctx` was too short for its job, when its facts say
/// so (`TimeoutFacts::judge`, with the setting's default): then the timeout is the
/// configuration layer's finding, not the application's. A record without the facts (an older
/// libumd) falls back to the setting alone: a non-default timeout below the default.
pub(super) fn timeout_too_short(p: &Process<'_>, ctx: u64) -> Option<String> {
    let setting = p.setting("job_timeout_ms");
    let default = setting.and_then(|(_, d, ..)| d.parse::<u64>().ok());
    match timeout_facts(p, ctx) {
        Some(t) => match t.judge(default) {
            Judgement::TooShort(why) => Some(why),
            _ => None,
        },
        None => setting
            .filter(|(v, _, src, ..)| {
                *src != "default"
                    && v.parse::<u64>()
                        .ok()
                        .zip(default)
                        .is_some_and(|(v, d)| v < d)
            })
            .map(|(v, d, ..)| format!("the timeout of {v} ms is below the default {d} ms")),
    }
}

/// One process's faults and hangs as its log tells them.
pub(super) fn faults_and_hangs(p: &Process<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut told: Vec<u64> = Vec::new();
    for (i, (f, r)) in p.facts.iter().enumerate() {
        // The context's own loss record, else the device's record of the fault or timeout.
        let lost: Lost = match f {
            Fact::CtxLost(l) => l.clone(),
            Fact::DevFault {
                kmd_ctx: Some(k),
                fault,
                access,
                va,
                offset,
                ..
            } if fault != uapi::regs::fault_kind_name(uapi::regs::FAULT_BUS_ERROR) => Lost {
                ctx: p.umd_ctx(*k),
                cause: "fault".into(),
                fault: fault.clone(),
                access: access.clone(),
                va: *va,
                offset: offset.unwrap_or(0),
                submitted: 0,
                completed: 0,
            },
            Fact::DevTimeout { kmd_ctx, .. } => Lost {
                ctx: p.umd_ctx(*kmd_ctx),
                cause: "hang".into(),
                fault: "-".into(),
                access: "-".into(),
                va: 0,
                offset: 0,
                submitted: 0,
                completed: 0,
            },
            _ => continue,
        };
        if told.contains(&lost.ctx) || lost.fault == "bus-error" {
            continue;
        }
        let mut e = vec![log_ev(r)];
        // The device's record of the same event, before the context's.
        if let Some((_, dr)) = p.facts[..i].iter().rev().find(|(g, _)| match g {
            Fact::DevFault {
                kmd_ctx: Some(k), ..
            }
            | Fact::DevTimeout { kmd_ctx: k, .. } => p.umd_ctx(*k) == lost.ctx,
            _ => false,
        }) {
            e.push(log_ev(dr));
        }
        let inn = innocent(p, lost.ctx);
        match lost.cause.as_str() {
            "fault" => {
                told.push(lost.ctx);
                let near = nearest(p, i, lost.va);
                let freed = p.freed_at(i, lost.va);
                let (kind, relation, buffer, size) = match (&freed, &near) {
                    (Some(fr), _) => {
                        e.push(log_ev(fr.5));
                        (
                            "use_after_free",
                            format!(
                                "memory of buffer {} ({} at {}, context {}), freed before the job ran",
                                fr.1,
                                bytes(fr.2),
                                hex(fr.3),
                                fr.0
                            ),
                            Some(fr.1),
                            Some(fr.2),
                        )
                    }
                    (None, Some((t, b, sz))) => ("page_fault", t.clone(), Some(*b), Some(*sz)),
                    (None, None) => (
                        "page_fault",
                        "no buffer of the process is near it".to_string(),
                        None,
                        None,
                    ),
                };
                out.push(
                    finding(
                        format!(
                            "GPU page fault ({} {}) at {} in context {} (pid {}), packet at offset {} of its command buffer: {relation}; the context was banned{}",
                            lost.fault,
                            lost.access,
                            hex(lost.va),
                            lost.ctx,
                            pid_s(p),
                            lost.offset,
                            innocent_text(&inn)
                        ),
                        e,
                    )
                    .with(Facts {
                        kind,
                        pid: pid64(p),
                        ctx: Some(lost.ctx),
                        packet: Some(format!("offset {}", lost.offset)),
                        va: Some(lost.va),
                        size,
                        buffer,
                        innocent: inn,
                        fix: "the packet's address is outside every live buffer of the context: check the device pointer it was recorded with (a freed or foreign buffer, a wrong offset or leading dimension)".into(),
                        ..Facts::default()
                    }),
                );
            }
            "hang" => {
                told.push(lost.ctx);
                if timeout_too_short(p, lost.ctx).is_some() {
                    continue; // the configuration layer's finding
                }
                let facts = timeout_facts(p, lost.ctx);
                let timeout = p.facts.iter().find_map(|(g, _)| match g {
                    Fact::DevTimeout { timeout_ms, .. } => Some(*timeout_ms),
                    _ => None,
                });
                let default = p
                    .setting("job_timeout_ms")
                    .map(|(v, d, src, ..)| (v, d, src));
                let hang_packets = p.setting("hang_debug").is_some_and(|(v, ..)| v == "true");
                let mut fields = Facts::default();
                if let Some(t) = facts {
                    t.apply(&mut fields);
                }
                let said = facts.map_or(String::new(), |t| match t.judge(None) {
                    Judgement::Hang(why) => format!("; a genuine hang: {why} ({})", t.text()),
                    _ => format!("; {}", t.text()),
                });
                out.push(
                    finding(
                        format!(
                            "context {} (pid {}) hung the GPU: its job did not complete within the job timeout{}; the engine was reset and the context banned{}{}{said}",
                            lost.ctx,
                            pid_s(p),
                            match (timeout, default) {
                                (Some(t), Some((_, _, "default"))) => format!(" of {t} ms (the default)"),
                                (Some(t), _) => format!(" of {t} ms"),
                                _ => String::new(),
                            },
                            if hang_packets {
                                " (debug HANG packets are allowed in this process: UMD_SIM_HANG_DEBUG=1)"
                            } else {
                                ""
                            },
                            innocent_text(&inn)
                        ),
                        e,
                    )
                    .with(Facts {
                        kind: "job_timeout",
                        pid: pid64(p),
                        ctx: Some(lost.ctx),
                        innocent: inn,
                        fix: "find what the job waits on or spins on (umd-log last-job names it; a WAIT_VALUE nobody writes, a HANG packet left in)".into(),
                        ..fields
                    }),
                );
            }
            _ => {}
        }
    }
    out
}
