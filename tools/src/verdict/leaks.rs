//! Leaks: the buffers libumd reported at a context destroy or device close, and a clean exit
//! with buffers still allocated.

use super::process::pid_s;
use super::{finding, log_ev, pid64, Facts, Finding};
use crate::umdlog::facts::{Fact, Process};
use crate::umdlog::symbolize::CallSite;
use crate::util::bytes;

pub(super) fn leaks(p: &Process<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    let exit = p.exit().and_then(|(f, r)| match f {
        Fact::Exit {
            how,
            status,
            live_buffers,
            live_bytes,
            live_contexts,
            ..
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
        // Where the first listed leak was allocated, when its record names the call.
        let allocated_at = listed
            .first()
            .and_then(|l| CallSite::of(l.3))
            .map(|s| s.describe());
        let mut e = vec![log_ev(r)];
        e.extend(listed.iter().take(2).map(|l| log_ev(l.3)));
        if let Some(x) = &exit {
            e.push(log_ev(x.5));
        }
        out.push(
            finding(
                format!(
                    "leak: {} (pid {}) still had {buffers} buffer{} ({}{}{}) allocated when it was {}{ended}",
                    if *ctx == 0 { "a device".to_string() } else { format!("context {ctx}") },
                    pid_s(p),
                    if *buffers == 1 { "" } else { "s" },
                    bytes(*total),
                    if tags.is_empty() { String::new() } else { format!(", tag {}", tags.join(", ")) },
                    allocated_at.as_ref().map(|a| format!(", the first allocated at {a}")).unwrap_or_default(),
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
                allocated_at,
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
            // Where the oldest buffer still live was allocated, when its record names the call.
            let allocated_at = p
                .live_at(p.facts.len())
                .iter()
                .find_map(|b| CallSite::of(b.4))
                .map(|s| s.describe());
            out.push(
                finding(
                    format!(
                        "pid {} ended ({how}, status {status}) with {n} buffer{} ({}) of context{} {} still allocated{}",
                        pid_s(p),
                        if n == 1 { "" } else { "s" },
                        bytes(b),
                        if ctxs.len() == 1 { "" } else { "s" },
                        ctxs.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(", "),
                        allocated_at.as_ref().map(|a| format!(", the first allocated at {a}")).unwrap_or_default()
                    ),
                    vec![log_ev(r)],
                )
                .with(Facts {
                    kind: "live_at_exit",
                    pid: pid64(p),
                    ctx: ctxs.first().copied(),
                    size: Some(b),
                    allocated_at,
                    fix: "destroy contexts and close devices before exit, or ignore it for a process that ended on an error".into(),
                    ..Facts::default()
                }),
            );
        }
    }
    out
}
