//! The calls libumd refused, from the failed call's record and the facts before it: a use
//! after free and an out-of-bounds access with the buffer they concern, an out-of-memory with
//! who holds the memory, any other code with how often.

use super::process::{innocent, innocent_text, nearest, pid_s};
use super::{finding, hex, log_ev, pid64, Facts, Finding};
use crate::umdlog::facts::{Fact, Process};
use crate::umdlog::symbolize::CallSite;
use crate::util::bytes;

pub(super) fn refused_calls(p: &Process<'_>) -> Vec<Finding> {
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
                // The application's calls when the records carry them, else the records.
                let sites = fr.as_ref().map(|fr| {
                    let at = |r: &crate::umdlog::Rec| CallSite::of(r).map(|s| s.describe());
                    (at(fr.4), at(fr.5))
                });
                let (allocated_at, freed_at) = sites.clone().unwrap_or_default();
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
                            allocated_at.clone().unwrap_or_else(|| fr.4.src.to_string()),
                            freed_at.clone().unwrap_or_else(|| fr.5.src.to_string())
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
                        allocated_at,
                        freed_at,
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
            "UMD_ERR_MEM_TOO_LARGE" => out.push(too_large(p, i, ctx, function)),
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

/// What an `oom` record says: (size, device memory, holders, the record).
type OomSaid<'a> = (u64, u64, Vec<(u64, u64)>, &'a crate::umdlog::Rec);

/// The `oom` record before fact `i` for context `ctx`.
fn oom_record<'a>(p: &Process<'a>, i: usize, ctx: u64) -> Option<OomSaid<'a>> {
    p.facts[..i].iter().rev().find_map(|(f, r)| match f {
        Fact::Oom {
            ctx: c,
            size,
            mem_total,
            holders,
        } if *c == ctx => Some((*size, *mem_total, holders.clone(), *r)),
        _ => None,
    })
}

/// A request larger than the whole device.
fn too_large(p: &Process<'_>, i: usize, ctx: u64, function: &str) -> Finding {
    let r = p.facts[i].1;
    let said = oom_record(p, i, ctx);
    let mut e = vec![log_ev(r)];
    if let Some(x) = &said {
        e.insert(0, log_ev(x.3));
    }
    finding(
        format!(
            "context {ctx} (pid {}) asked {function} for {}, more than the device's {} in all: it can never succeed",
            pid_s(p),
            said.as_ref().map_or("?".into(), |x| bytes(x.0)),
            said.as_ref().map_or("?".into(), |x| bytes(x.1)),
        ),
        e,
    )
    .with(Facts {
        kind: "too_large",
        pid: pid64(p),
        ctx: Some(ctx),
        call: Some(function.to_string()),
        size: said.as_ref().map(|x| x.0),
        fix: "split the allocation, or run where the device has the memory (check the configured memory size)".into(),
        ..Facts::default()
    })
}

/// An out-of-memory: who was refused, and who holds the memory.
fn oom(p: &Process<'_>, i: usize, ctx: u64, function: &str) -> Finding {
    let r = p.facts[i].1;
    let said = oom_record(p, i, ctx);
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
