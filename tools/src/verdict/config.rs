//! Configuration: the settings each process ran with, from its own `process start` and `setting`
//! records (not the shell triage runs in), judged next to what happened: a non-default job
//! timeout next to a job timeout, a small memory size next to an out-of-memory, the simulator
//! forced where a kernel device exists, a value libumd refused.

use super::{
    any_device, application, device_names, ev, finding, log_ev, pid64, process, Facts, Finding,
    Status,
};
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};

/// The configuration layer.
pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
    let mut out = kernel_short_timeouts(s);
    let mut looked = Vec::new();
    for p in procs.iter().rev() {
        let Some((Fact::Start { env, why, .. }, start)) = p.start() else {
            continue;
        };
        looked.push(p);
        let pid = pid64(p);
        let pid_s = p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
        out.extend(short_timeout(p));
        out.extend(small_memory(p));
        if why == "bad_config" {
            out.push(
                finding(
                    format!("pid {pid_s}: a libumd variable in its environment has a value libumd refuses (every call fails with UMD_ERR_INIT_BAD_CONFIG)"),
                    vec![log_ev(start)],
                )
                .with(Facts {
                    kind: "bad_config",
                    pid,
                    setting: env
                        .iter()
                        .find(|(k, _)| k == "UMD_BACKEND")
                        .map(|(k, v)| format!("{k}={v}")),
                    fix: "correct the value (docs/libumd.md lists every variable and its range)".into(),
                    ..Facts::default()
                }),
            );
        }
        if p.chose_sim() && any_device(s) {
            out.push(
                finding(
                    format!(
                        "pid {pid_s} ran on the simulator because UMD_BACKEND=sim is in its environment, not on {}",
                        device_names(s).join(", ")
                    ),
                    vec![log_ev(start)],
                )
                .with(Facts {
                    kind: "backend_forced_sim",
                    pid,
                    setting: Some("UMD_BACKEND=sim".into()),
                    fix: "unset UMD_BACKEND (or set it to kmd) in the service's environment".into(),
                    ..Facts::default()
                }),
            );
        }
    }
    // Without any process's own settings: the environment triage was run in.
    if looked.is_empty() {
        if let Some((_, v)) = s.env.iter().find(|(k, _)| k == "UMD_BACKEND") {
            match v.as_str() {
                "sim" if any_device(s) => out.push(finding(
                    format!(
                        "UMD_BACKEND=sim is set: libumd uses the simulator, not {}",
                        device_names(s).join(", ")
                    ),
                    vec![ev("environment", format!("UMD_BACKEND={v}"))],
                )),
                "" | "auto" | "kmd" | "sim" => {}
                other => out.push(finding(
                    format!("UMD_BACKEND={other:?} is not one of auto, kmd, sim: every libumd call fails with UMD_ERR_INIT_BAD_CONFIG"),
                    vec![ev("environment", format!("UMD_BACKEND={v}"))],
                )),
            }
        }
    }
    if !out.is_empty() {
        return Status::Findings(out);
    }
    if looked.is_empty() {
        return Status::NotChecked(
            "no libumd log with a process start record (the settings a process ran with)".into(),
        );
    }
    let parts: Vec<String> = looked
        .iter()
        .map(|p| {
            let nd: Vec<String> = p
                .facts
                .iter()
                .filter_map(|(f, _)| match f {
                    Fact::Setting {
                        name,
                        value,
                        src,
                        variable,
                        ..
                    } if src != "default" => Some(format!("{name} {value} ({variable})")),
                    _ => None,
                })
                .collect();
            format!(
                "pid {}: {}",
                p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into()),
                if nd.is_empty() {
                    "every setting default".to_string()
                } else {
                    format!("non-default {}", nd.join(" "))
                }
            )
        })
        .collect();
    Status::Ok(format!(
        "{}; nothing that happened points at them",
        parts.join("; ")
    ))
}

/// A job timeout set in the environment that its job's facts call too short
/// (`process::timeout_too_short`: a job still executing after about as long as its recent
/// peers, or, with none, stopped by a timeout below the default; not a job waiting on a value
/// that never came).
fn short_timeout(p: &Process<'_>) -> Option<Finding> {
    let (value, default, _, variable, set) = p.setting("job_timeout_ms")?;
    let (i, (f, r)) = p.facts.iter().enumerate().find(|(_, (f, _))| {
        matches!(f, Fact::DevTimeout { .. }) || matches!(f, Fact::CtxLost(l) if l.cause == "hang")
    })?;
    let ctx = match f {
        Fact::DevTimeout { kmd_ctx, .. } => p.umd_ctx(*kmd_ctx),
        Fact::CtxLost(l) => l.ctx,
        _ => 0,
    };
    let why = process::timeout_too_short(p, ctx)?;
    let facts = process::timeout_facts(p, ctx);
    let hang_packets = p
        .setting("hang_debug")
        .map(|(v, ..)| v == "true")
        .unwrap_or(false);
    let mut e = vec![log_ev(set), log_ev(r)];
    if let Some((_, lost)) = p.facts[i..]
        .iter()
        .find(|(f, _)| matches!(f, Fact::CtxLost(_)))
    {
        e.push(log_ev(lost));
    }
    let mut fields = Facts::default();
    if let Some(t) = facts {
        t.apply(&mut fields);
    }
    Some(
        finding(
            format!(
                "job timeout {value} ms set by {variable}={value} in pid {}'s environment (default {default} ms): context {ctx}'s job was declared hung, but {why}{}{} — the setting is too short, not the job",
                p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into()),
                facts.map(|t| format!(" ({})", t.text())).unwrap_or_default(),
                if hang_packets {
                    ""
                } else {
                    "; the debug HANG packet is refused in this process (hang_debug false), so no job of it hangs on purpose"
                }
            ),
            e,
        )
        .with(Facts {
            kind: "job_timeout_too_short",
            pid: pid64(p),
            ctx: Some(ctx),
            setting: Some(format!("{variable}={value}")),
            fix: format!("remove {variable} from the service's environment (default {default} ms) or set it above the longest job"),
            ..fields
        }),
    )
}

/// A job timeout of aigpu.ko's (a crash dump's or dmesg's record) whose facts call the module's
/// `job_timeout_ms` too short for the job.
fn kernel_short_timeouts(s: &Snapshot) -> Vec<Finding> {
    application::kernel_incidents(s)
        .iter()
        .filter_map(|i| {
            let why = i.too_short()?;
            let h = i.hang.as_ref()?;
            let t = h.timeout_ms.unwrap_or(0);
            let mut fields = Facts::default();
            h.apply(&mut fields);
            Some(
                finding(
                    format!(
                        "aigpu's job timeout {t} ms ({}) on {}: context {}'s job was declared hung, but {why} ({}) — the setting is too short, not the job",
                        h.timeout_source.as_deref().unwrap_or("?"),
                        i.device,
                        i.ctx.as_deref().unwrap_or("?"),
                        h.text()
                    ),
                    vec![i.evidence.clone()],
                )
                .with(Facts {
                    kind: "job_timeout_too_short",
                    pid: i.pid,
                    ctx: i.ctx.as_deref().and_then(|c| c.parse().ok()),
                    setting: Some(format!("job_timeout_ms={t}")),
                    fix: "raise aigpu's job_timeout_ms (modprobe.d options, docs/kmd.md \"Module parameters\") above the longest job".into(),
                    ..fields
                }),
            )
        })
        .collect()
}

/// A device memory size below the default, set in the environment, next to an out-of-memory.
fn small_memory(p: &Process<'_>) -> Option<Finding> {
    let (value, default, src, variable, set) = p.setting("mem_mib")?;
    let (v, d) = (value.parse::<u64>().ok()?, default.parse::<u64>().ok()?);
    if src == "default" || v >= d {
        return None;
    }
    let (f, r) = p
        .facts
        .iter()
        .find(|(f, _)| matches!(f, Fact::Oom { .. }))?;
    let (ctx, size) = match f {
        Fact::Oom { ctx, size, .. } => (*ctx, *size),
        _ => (0, 0),
    };
    Some(
        finding(
            format!(
                "device memory {v} MiB set by {variable}={value} in pid {}'s environment (default {d} MiB), and context {ctx} ran out of it",
                p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
            ),
            vec![log_ev(set), log_ev(r)],
        )
        .with(Facts {
            kind: "memory_size_small",
            pid: pid64(p),
            ctx: Some(ctx),
            size: Some(size),
            setting: Some(format!("{variable}={value}")),
            fix: format!("remove {variable} (default {d} MiB) or size it for the workload"),
            ..Facts::default()
        }),
    )
}
