//! The application findings one process's own log proves, from its fact records
//! ([`crate::umdlog::facts`]): its contexts' faults and hangs, the calls libumd refused (use after
//! free, out of bounds, out of memory and who holds the memory), leaks, and how it ended.

use super::{finding, hex, log_ev, pid64, Facts, Finding};
use crate::umdlog::facts::{Fact, Lost, Process};
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
        out.extend(refused_calls(p));
        out.extend(leaks(p));
    }
    out
}

fn pid_s(p: &Process<'_>) -> String {
    p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
}

/// The other contexts of the process and what became of their work.
fn innocent(p: &Process<'_>, guilty: u64) -> Vec<(u64, String)> {
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

fn innocent_text(v: &[(u64, String)]) -> String {
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

/// Where `va` lies relative to the buffers live before fact `at`: "0 B past the end of buffer
/// 6 (2.0 MiB at 0xc10000, context 2)" and that buffer.
fn nearest(p: &Process<'_>, at: usize, va: u64) -> Option<(String, u64, u64)> {
    let live = p.live_at(at);
    if let Some(b) = live.iter().find(|b| va >= b.3 && va < b.3 + b.2) {
        return Some((
            format!(
                "{} B into buffer {} ({} at {}, context {})",
                va - b.3,
                b.1,
                bytes(b.2),
                hex(b.3),
                b.0
            ),
            b.1,
            b.2,
        ));
    }
    let below = live
        .iter()
        .filter(|b| b.3 + b.2 <= va)
        .max_by_key(|b| b.3 + b.2);
    let above = live.iter().filter(|b| b.3 > va).min_by_key(|b| b.3);
    let near = match (below, above) {
        (Some(b), a) if a.is_none_or(|a| va - (b.3 + b.2) <= a.3 - va) => Some((
            format!(
                "{} B past the end of buffer {} ({} at {}, context {})",
                va - (b.3 + b.2),
                b.1,
                bytes(b.2),
                hex(b.3),
                b.0
            ),
            b.1,
            b.2,
        )),
        (_, Some(a)) => Some((
            format!(
                "{} B before buffer {} ({} at {}, context {})",
                a.3 - va,
                a.1,
                bytes(a.2),
                hex(a.3),
                a.0
            ),
            a.1,
            a.2,
        )),
        _ => None,
    };
    // Gigabytes away is no relation: say so, naming the nearest all the same.
    near.map(|(t, b, sz)| {
        let gap: u64 = t
            .split(' ')
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
        if gap > FAR {
            (
                format!(
                    "in no live buffer and near none (the nearest: {})",
                    t.replacen(&format!("{gap} B"), &bytes(gap), 1)
                ),
                b,
                sz,
            )
        } else {
            (t, b, sz)
        }
    })
}

/// Farther than this from every buffer, an address is not "just past" one.
const FAR: u64 = 16 << 20;

/// Whether the process's job timeout is a non-default, shorter setting: then a timeout is the
/// configuration layer's finding, not the application's.
fn timeout_is_configured_short(p: &Process<'_>) -> bool {
    p.setting("job_timeout_ms").is_some_and(|(v, d, src, ..)| {
        src != "default" && matches!((v.parse::<u64>(), d.parse::<u64>()), (Ok(v), Ok(d)) if v < d)
    })
}

fn faults_and_hangs(p: &Process<'_>) -> Vec<Finding> {
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
            } if fault != "bus-error" => Lost {
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
                if timeout_is_configured_short(p) {
                    continue; // the configuration layer's finding
                }
                let timeout = p.facts.iter().find_map(|(g, _)| match g {
                    Fact::DevTimeout { timeout_ms, .. } => Some(*timeout_ms),
                    _ => None,
                });
                let default = p
                    .setting("job_timeout_ms")
                    .map(|(v, d, src, ..)| (v, d, src));
                let hang_packets = p.setting("hang_debug").is_some_and(|(v, ..)| v == "true");
                out.push(
                    finding(
                        format!(
                            "context {} (pid {}) hung the GPU: its job did not complete within the job timeout{}; the engine was reset and the context banned{}{}",
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
                        ..Facts::default()
                    }),
                );
            }
            _ => {}
        }
    }
    out
}

fn refused_calls(p: &Process<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    // Other codes: one finding per code, with how many times.
    let mut others: Vec<(String, usize, usize)> = Vec::new();
    for (i, (f, r)) in p.facts.iter().enumerate() {
        let Fact::ApiError {
            ctx,
            code,
            function,
            va,
        } = f
        else {
            continue;
        };
        let (ctx, va) = (*ctx, *va);
        match code.as_str() {
            "UMD_ERR_MEM_USE_AFTER_FREE" => {
                let fr = p.freed_at(i, va);
                let mut e = vec![log_ev(r)];
                let what = match &fr {
                    Some(fr) => {
                        e.push(log_ev(fr.4));
                        e.push(log_ev(fr.5));
                        format!(
                            "memory of buffer {} ({} at {}, context {}), allocated at {} and freed at {}",
                            fr.1,
                            bytes(fr.2),
                            hex(fr.3),
                            fr.0,
                            fr.4.src,
                            fr.5.src
                        )
                    }
                    None => "memory freed before the call".into(),
                };
                out.push(
                    finding(
                        format!(
                            "use after free: {function} in context {ctx} (pid {}) uses {}, {what}; libumd refused the call",
                            pid_s(p),
                            hex(va)
                        ),
                        e,
                    )
                    .with(Facts {
                        kind: "use_after_free",
                        pid: pid64(p),
                        ctx: Some(ctx),
                        call: Some(function.clone()),
                        va: Some(va),
                        size: fr.as_ref().map(|f| f.2),
                        buffer: fr.as_ref().map(|f| f.1),
                        fix: "free a buffer only after the last submit that uses it: a command buffer that records it may be replayed until it is destroyed".into(),
                        ..Facts::default()
                    }),
                );
            }
            "UMD_ERR_MEM_OUT_OF_BOUNDS" => {
                let near = nearest(p, i, va);
                let inn = innocent(p, ctx);
                out.push(
                    finding(
                        format!(
                            "out-of-bounds access: {function} in context {ctx} (pid {}) records an access that crosses {}: {}; libumd refused the call{}",
                            pid_s(p),
                            hex(va),
                            near.as_ref().map(|n| n.0.clone()).unwrap_or_else(|| "no live buffer near it".into()),
                            innocent_text(&inn)
                        ),
                        vec![log_ev(r)],
                    )
                    .with(Facts {
                        kind: "out_of_bounds",
                        pid: pid64(p),
                        ctx: Some(ctx),
                        call: Some(function.clone()),
                        va: Some(va),
                        size: near.as_ref().map(|n| n.2),
                        buffer: near.as_ref().map(|n| n.1),
                        innocent: inn,
                        fix: "size the buffer for the access the packet makes (a GEMM's C holds m x ldc int32 values: 4 bytes each) or correct the packet's size or leading dimension".into(),
                        ..Facts::default()
                    }),
                );
            }
            "UMD_ERR_MEM_OUT_OF_MEMORY" => out.push(oom(p, i, ctx, function)),
            c if c.starts_with("UMD_ERR_INIT_")
                || c == "UMD_ERR_DEVICE_LOST"
                || c == "UMD_ERR_CTX_LOST" => {}
            _ => match others.iter_mut().find(|(c, _, _)| c == code) {
                Some(x) => {
                    x.1 += 1;
                    x.2 = i;
                }
                None => others.push((code.clone(), 1, i)),
            },
        }
    }
    for (code, n, i) in others.into_iter().rev() {
        let (f, r) = &p.facts[i];
        let (ctx, function) = match f {
            Fact::ApiError { ctx, function, .. } => (*ctx, function.clone()),
            _ => continue,
        };
        out.push(
            finding(
                format!(
                    "libumd returned {code} to pid {} in {function}{}: {}",
                    pid_s(p),
                    if n > 1 {
                        format!(" ({n} times, the last at {})", r.wall.hms())
                    } else {
                        String::new()
                    },
                    r.msg
                ),
                vec![log_ev(r)],
            )
            .with(Facts {
                kind: "api_error",
                pid: pid64(p),
                ctx: (ctx != 0).then_some(ctx),
                call: Some(function),
                fix: "see the error's action (umdGetErrorAction) and detail".into(),
                ..Facts::default()
            }),
        );
    }
    out
}

/// An out-of-memory: who was refused, and who holds the memory.
fn oom(p: &Process<'_>, i: usize, ctx: u64, function: &str) -> Finding {
    let r = p.facts[i].1;
    let said = p.facts[..i].iter().rev().find_map(|(f, r)| match f {
        Fact::Oom {
            ctx: c,
            size,
            mem_total,
            holders,
        } if *c == ctx => Some((*size, *mem_total, holders.clone(), *r)),
        _ => None,
    });
    let mut e = vec![log_ev(r)];
    let Some((size, total, holders, or)) = said else {
        return finding(
            format!(
                "context {ctx} (pid {}) was refused device memory in {function} (the log does not say who holds it)",
                pid_s(p)
            ),
            e,
        )
        .with(Facts {
            kind: "out_of_memory",
            pid: pid64(p),
            ctx: Some(ctx),
            call: Some(function.to_string()),
            fix: "free or trim buffers (umdMemTrim), or a smaller batch".into(),
            ..Facts::default()
        });
    };
    e.insert(0, log_ev(or));
    let own = holders.iter().find(|(c, _)| *c == ctx).map_or(0, |h| h.1);
    let culprit = holders
        .iter()
        .filter(|(c, b)| *c != ctx && *b > own)
        .max_by_key(|(_, b)| *b)
        .copied();
    let who = match culprit {
        Some((c, b)) => format!(
            "context {c} holds {} of the device's {}; context {ctx} holds {}",
            bytes(b),
            bytes(total),
            bytes(own)
        ),
        None => format!(
            "context {ctx} itself holds {} of the device's {}",
            bytes(own),
            bytes(total)
        ),
    };
    finding(
        format!(
            "out of device memory: context {ctx} (pid {}) was refused {} in {function}: {who}",
            pid_s(p),
            bytes(size)
        ),
        e,
    )
    .with(Facts {
        kind: "out_of_memory",
        pid: pid64(p),
        ctx: Some(ctx),
        call: Some(function.to_string()),
        size: Some(size),
        culprit: Some(culprit.map_or(ctx, |c| c.0)),
        fix: match culprit {
            Some((c, _)) => format!("bound what context {c} keeps (free or trim its buffers), or give the device's memory to the contexts that need it"),
            None => format!("context {ctx} needs less memory at once: free buffers, a smaller batch, umdMemTrim"),
        },
        ..Facts::default()
    })
}

fn leaks(p: &Process<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let exit = p.exit().and_then(|(f, r)| match f {
        Fact::Exit {
            how,
            status,
            live_buffers,
            live_bytes,
            live_contexts,
        } => Some((
            how.clone(),
            *status,
            *live_buffers,
            *live_bytes,
            live_contexts.clone(),
            r,
        )),
        _ => None,
    });
    let ended = match &exit {
        Some((how, status, ..)) if how == "exit" => {
            format!("; the process then exited with status {status}")
        }
        Some((how, ..)) => format!("; the process ended by {how}"),
        None => String::new(),
    };
    for (i, (f, r)) in p.facts.iter().enumerate() {
        let Fact::LeakSummary {
            ctx,
            buffers,
            bytes: total,
        } = f
        else {
            continue;
        };
        let listed: Vec<(u64, u64, String, &crate::umdlog::Rec)> = p.facts[..i]
            .iter()
            .filter_map(|(g, gr)| match g {
                Fact::Leak {
                    ctx: c,
                    buffer,
                    size,
                    tag,
                } if c == ctx || *ctx == 0 => Some((*buffer, *size, tag.clone(), *gr)),
                _ => None,
            })
            .collect();
        let mut tags: Vec<&str> = listed
            .iter()
            .map(|l| l.2.as_str())
            .filter(|t| !t.is_empty() && *t != "-")
            .collect();
        tags.dedup();
        let mut e = vec![log_ev(r)];
        e.extend(listed.iter().take(2).map(|l| log_ev(l.3)));
        if let Some(x) = &exit {
            e.push(log_ev(x.5));
        }
        out.push(
            finding(
                format!(
                    "leak: {} (pid {}) still had {buffers} buffer{} ({}{}) allocated when it was {}{ended}",
                    if *ctx == 0 { "a device".to_string() } else { format!("context {ctx}") },
                    pid_s(p),
                    if *buffers == 1 { "" } else { "s" },
                    bytes(*total),
                    if tags.is_empty() { String::new() } else { format!(", tag {}", tags.join(", ")) },
                    if *ctx == 0 { "closed" } else { "destroyed" }
                ),
                e,
            )
            .with(Facts {
                kind: "leak",
                pid: pid64(p),
                ctx: (*ctx != 0).then_some(*ctx),
                size: Some(*total),
                buffer: listed.first().map(|l| l.0),
                fix: "free every buffer when its work is done (umd-log leaks pairs each alloc with its free; UMD_POOL_HISTORY=N records the call sites)".into(),
                ..Facts::default()
            }),
        );
    }
    // Still live at exit, and not reported at a destroy or close.
    if let Some((how, status, n, b, ctxs, r)) = exit {
        // A process that ended on an error may leave its objects to the exit; a clean exit
        // with buffers still allocated is a leak.
        if n > 0 && out.is_empty() && how == "exit" && status == 0 {
            out.push(
                finding(
                    format!(
                        "pid {} ended ({how}, status {status}) with {n} buffer{} ({}) of context{} {} still allocated",
                        pid_s(p),
                        if n == 1 { "" } else { "s" },
                        bytes(b),
                        if ctxs.len() == 1 { "" } else { "s" },
                        ctxs.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                    vec![log_ev(r)],
                )
                .with(Facts {
                    kind: "live_at_exit",
                    pid: pid64(p),
                    ctx: ctxs.first().copied(),
                    size: Some(b),
                    fix: "destroy contexts and close devices before exit, or ignore it for a process that ended on an error".into(),
                    ..Facts::default()
                }),
            );
        }
    }
    out
}
