//! The questions `umd-log` answers (seed 000 §4): which allocations were never freed, what went
//! wrong in what order, what one context did, which job was the last before a hang.
//!
//! Context ids in libumd's records are libumd's own (per process); records written by the
//! backend (`umd::backend::*`, e.g. the simulator's fault and timeout lines) carry the
//! backend's context id, which the `context created` record maps (`ctx=<umd id>
//! kmd_ctx=<backend id>`). Everything is keyed by (process, context).

use super::facts::{self, Fact};
use super::{LogSet, Rec, Src};
use crate::util::{self, Wall};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};

type CtxMap = HashMap<(Option<u32>, u64), u64>;

/// Backend context id → libumd context id, per process.
fn ctx_map(set: &LogSet) -> CtxMap {
    let mut m = HashMap::new();
    for r in &set.recs {
        if r.msg == "context created" && !is_backend(r) {
            if let (Some(u), Some(k)) = (r.ctx_u64(), r.field_u64("kmd_ctx")) {
                m.insert((r.pid, k), u);
            }
        }
    }
    m
}

fn is_backend(r: &Rec) -> bool {
    r.module.starts_with("umd::backend")
}

/// The libumd context a record belongs to.
fn ctx_of(r: &Rec, m: &CtxMap) -> Option<u64> {
    if is_backend(r) {
        // The backend names the kernel-side context in `kmd_ctx` (older logs: in `ctx`).
        let c = r.field_u64("kmd_ctx").or_else(|| r.ctx_u64())?;
        return Some(m.get(&(r.pid, c)).copied().unwrap_or(c));
    }
    r.ctx_u64()
}

fn pid_text(p: Option<u32>) -> String {
    p.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
}

/// One record as a timeline line: time, level, process, context, code, where, message,
/// parameters, and where it was read.
pub fn rec_line(r: &Rec, m: Option<&HashMap<(Option<u32>, u64), u64>>) -> String {
    let ctx = match m {
        Some(m) => ctx_of(r, m).map(|c| c.to_string()),
        None => r.ctx.clone(),
    };
    let mut s = format!(
        "{} {:<5} pid={} ctx={}",
        r.wall.rfc3339(),
        r.level.name(),
        pid_text(r.pid),
        ctx.as_deref().unwrap_or("-")
    );
    if let Some(c) = &r.code {
        s += &format!(" {c}");
    }
    s += &format!(" {}: {}", r.function.as_deref().unwrap_or(&r.module), r.msg);
    if !r.fields.is_empty() {
        s += &format!(" [{}]", r.fields_text());
    }
    s += &format!(" ({})", r.src);
    s
}

fn rec_json(r: &Rec, m: &CtxMap) -> Value {
    let fields: serde_json::Map<String, Value> = r.fields.iter().cloned().collect();
    json!({
        "ts": r.wall.rfc3339(),
        "mono_ns": r.mono,
        "level": r.level.name(),
        "pid": r.pid,
        "tid": r.tid,
        "module": r.module,
        "function": r.function,
        "file": r.file,
        "line": r.line,
        "ctx": ctx_of(r, m),
        "code": r.code,
        "msg": r.msg,
        "fields": fields,
        "source": r.src.to_string(),
    })
}

/// What was read, for the first line of every report.
pub fn read_summary(set: &LogSet) -> String {
    let procs: std::collections::BTreeSet<Option<u32>> = set.recs.iter().map(|r| r.pid).collect();
    let mut s = format!(
        "{} records from {} file{} ({} process{})",
        set.recs.len(),
        set.files.len(),
        if set.files.len() == 1 { "" } else { "s" },
        procs.len(),
        if procs.len() == 1 { "" } else { "es" }
    );
    if set.bad > 0 {
        if let Some((src, why)) = &set.first_bad {
            s += &format!(
                "; {} line{} not understood, first {src}: {why}",
                set.bad,
                if set.bad == 1 { "" } else { "s" }
            );
        }
    }
    s
}

fn files_json(set: &LogSet) -> Value {
    json!({
        "files": set.files.iter().map(|f| f.path.display().to_string()).collect::<Vec<_>>(),
        "records": set.recs.len(),
        "bad_lines": set.bad,
        "first_bad": set.first_bad.as_ref().map(|(s, w)| format!("{s}: {w}")),
    })
}

// ---------------------------------------------------------------------------------------------
// leaks

/// An allocation without its free.
#[derive(Clone, Debug)]
pub struct Leak {
    /// Process.
    pub pid: Option<u32>,
    /// Context.
    pub ctx: Option<u64>,
    /// Buffer id.
    pub buffer: u64,
    /// Bytes.
    pub size: Option<u64>,
    /// GPU address.
    pub va: Option<String>,
    /// Allocation tag, when given.
    pub tag: Option<String>,
    /// When it was allocated.
    pub wall: Wall,
    /// Age at the end of that process's log, µs.
    pub age_us: i128,
    /// The application's call site, when recorded.
    pub site: Option<String>,
    /// How to get the call site recorded, when libumd says.
    pub site_hint: Option<String>,
    /// The alloc record's own location (in libumd).
    pub libumd_site: String,
    /// Where the alloc record was read.
    pub src: Src,
    /// libumd's own leak report for it (at context destroy or device close), if any.
    pub reported: Option<String>,
}

/// The result of pairing allocs and frees.
#[derive(Clone, Debug, Default)]
pub struct LeakReport {
    /// Unpaired allocations, in allocation order.
    pub leaks: Vec<Leak>,
    /// alloc records read.
    pub allocs: usize,
    /// free records read.
    pub frees: usize,
    /// Frees whose alloc is not in the files read (older than the oldest rotated file).
    pub unmatched_frees: Vec<(Option<u32>, u64, Src)>,
}

/// Pairs every `alloc` with its `free` by (process, buffer). A buffer that libumd reported as
/// leaked (`leak: ...` WARN records, written when it frees what the application forgot) stays
/// a leak even though libumd's own free follows.
pub fn leaks(set: &LogSet) -> LeakReport {
    let m = ctx_map(set);
    let mut rep = LeakReport::default();
    let mut live: BTreeMap<(Option<u32>, u64), (usize, Leak)> = BTreeMap::new();
    let mut reported: HashMap<(Option<u32>, u64), String> = HashMap::new();
    let mut end: HashMap<Option<u32>, Wall> = HashMap::new();
    let mut done: Vec<(usize, Leak)> = Vec::new();
    for (i, r) in set.recs.iter().enumerate() {
        end.insert(r.pid, r.wall);
        let Some(buf) = r.field_u64("buffer") else {
            continue;
        };
        let key = (r.pid, buf);
        if r.msg == "alloc" {
            rep.allocs += 1;
            // The application's call (file:line from its DWARF when the module has it), else
            // the history's backtrace.
            let site = super::symbolize::CallSite::of(r)
                .map(|c| c.describe())
                .or_else(|| r.field_str("site"))
                .filter(|s| !s.is_empty() && !s.starts_with('-'));
            live.insert(
                key,
                (
                    i,
                    Leak {
                        pid: r.pid,
                        ctx: ctx_of(r, &m),
                        buffer: buf,
                        size: r.field_u64("size"),
                        va: r.field_str("va"),
                        tag: r.field_str("tag").filter(|t| !t.is_empty()),
                        wall: r.wall,
                        age_us: 0,
                        site,
                        site_hint: None,
                        libumd_site: r.site(),
                        src: r.src.clone(),
                        reported: None,
                    },
                ),
            );
        } else if r.msg == "free" {
            rep.frees += 1;
            match live.remove(&key) {
                Some((i, mut l)) => {
                    if let Some(msg) = reported.remove(&key) {
                        l.reported = Some(msg);
                        done.push((i, l));
                    }
                }
                None => rep.unmatched_frees.push((r.pid, buf, r.src.clone())),
            }
        } else if matches!(facts::of(r), Some(Fact::Leak { .. })) {
            // libumd's leak report may know the application's call site (UMD_POOL_HISTORY).
            let site = r.field_str("site").filter(|s| !s.is_empty());
            if let (Some(site), Some((_, l))) = (&site, live.get_mut(&key)) {
                if l.site.is_none() {
                    match site.strip_prefix('-') {
                        Some(hint) => {
                            let h = hint.trim().trim_start_matches('(').trim_end_matches(')');
                            if !h.is_empty() {
                                l.site_hint = Some(h.to_string());
                            }
                        }
                        None => l.site = Some(site.clone()),
                    }
                }
            }
            reported.insert(key, r.msg.clone());
        }
    }
    for (key, (i, mut l)) in live {
        if let Some(msg) = reported.remove(&key) {
            l.reported = Some(msg);
        }
        done.push((i, l));
    }
    done.sort_by_key(|(i, _)| *i);
    rep.leaks = done
        .into_iter()
        .map(|(_, mut l)| {
            if let Some(e) = end.get(&l.pid) {
                l.age_us = e.micros() - l.wall.micros();
            }
            l
        })
        .collect();
    rep
}

/// `umd-log leaks` for people.
pub fn leaks_text(set: &LogSet, rep: &LeakReport) -> String {
    let mut out = format!("umd-log leaks: {}\n", read_summary(set));
    let total: u64 = rep.leaks.iter().filter_map(|l| l.size).sum();
    out += &format!(
        "{} alloc{}, {} free{}: {} buffer{} never freed ({})\n",
        rep.allocs,
        if rep.allocs == 1 { "" } else { "s" },
        rep.frees,
        if rep.frees == 1 { "" } else { "s" },
        rep.leaks.len(),
        if rep.leaks.len() == 1 { "" } else { "s" },
        util::bytes(total)
    );
    let mut groups: BTreeMap<(Option<u32>, Option<u64>), Vec<&Leak>> = BTreeMap::new();
    for l in &rep.leaks {
        groups.entry((l.pid, l.ctx)).or_default().push(l);
    }
    for ((pid, ctx), ls) in groups {
        let sum: u64 = ls.iter().filter_map(|l| l.size).sum();
        out += &format!(
            "pid {} ctx {}: {} buffer{}, {}\n",
            pid_text(pid),
            ctx.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            ls.len(),
            if ls.len() == 1 { "" } else { "s" },
            util::bytes(sum)
        );
        for l in ls {
            out += &format!(
                "  buffer {}: {} B at {}{}, allocated {}, age {} at end of log ({})\n",
                l.buffer,
                l.size.map(|s| s.to_string()).unwrap_or_else(|| "?".into()),
                l.va.as_deref().unwrap_or("?"),
                l.tag
                    .as_deref()
                    .map(|t| format!(", tag {t:?}"))
                    .unwrap_or_default(),
                l.wall.rfc3339(),
                util::age(l.age_us),
                l.src
            );
            out += &match (&l.site, &l.site_hint) {
                (Some(s), _) => format!("    call site: {s}\n"),
                (None, Some(h)) => format!(
                    "    call site: not recorded ({h}); libumd logged the alloc at {}\n",
                    l.libumd_site
                ),
                (None, None) => format!(
                    "    call site: not recorded; libumd logged the alloc at {}\n",
                    l.libumd_site
                ),
            };
            if let Some(r) = &l.reported {
                out += &format!("    libumd reported it: {r}\n");
            }
        }
    }
    if !rep.unmatched_frees.is_empty() {
        out += &format!(
            "{} free{} without an alloc in these files (allocated before the oldest file), first: pid {} buffer {} ({})\n",
            rep.unmatched_frees.len(),
            if rep.unmatched_frees.len() == 1 { "" } else { "s" },
            pid_text(rep.unmatched_frees[0].0),
            rep.unmatched_frees[0].1,
            rep.unmatched_frees[0].2
        );
    }
    out
}

/// `umd-log leaks --json`.
pub fn leaks_json(set: &LogSet, rep: &LeakReport) -> Value {
    json!({
        "command": "leaks",
        "input": files_json(set),
        "allocs": rep.allocs,
        "frees": rep.frees,
        "leaks": rep.leaks.iter().map(|l| json!({
            "pid": l.pid,
            "ctx": l.ctx,
            "buffer": l.buffer,
            "size": l.size,
            "va": l.va,
            "tag": l.tag,
            "allocated": l.wall.rfc3339(),
            "age_s": (l.age_us as f64 / 1e6),
            "site": l.site,
            "site_hint": l.site_hint,
            "libumd_site": l.libumd_site,
            "source": l.src.to_string(),
            "reported_by_libumd": l.reported,
        })).collect::<Vec<_>>(),
        "unmatched_frees": rep.unmatched_frees.iter().map(|(p, b, s)| json!({
            "pid": p, "buffer": b, "source": s.to_string()
        })).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------------------------
// errors

/// Records that belong on the error timeline: every ERROR, and every WARN that carries a result
/// code or reports a leak or a fallback.
pub fn is_error(r: &Rec) -> bool {
    match r.level {
        super::Level::Error => true,
        super::Level::Warn => {
            r.code.is_some()
                || matches!(
                    r.field_str("event").as_deref(),
                    Some("leak" | "leak_summary" | "leak_object")
                )
                || r.module == "umd::backend::select"
        }
        _ => false,
    }
}

/// `umd-log errors` for people.
pub fn errors_text(set: &LogSet) -> String {
    let m = ctx_map(set);
    let errs: Vec<&Rec> = set.recs.iter().filter(|r| is_error(r)).collect();
    let mut out = format!(
        "umd-log errors: {}\n{} error record{}\n",
        read_summary(set),
        errs.len(),
        if errs.len() == 1 { "" } else { "s" }
    );
    for r in errs {
        out += &rec_line(r, Some(&m));
        out.push('\n');
    }
    out
}

/// `umd-log errors --json`.
pub fn errors_json(set: &LogSet) -> Value {
    let m = ctx_map(set);
    json!({
        "command": "errors",
        "input": files_json(set),
        "errors": set.recs.iter().filter(|r| is_error(r)).map(|r| rec_json(r, &m)).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------------------------
// ctx

/// The records of context `ctx` (of process `pid`, or of every process).
pub fn ctx_records(set: &LogSet, ctx: u64, pid: Option<u32>) -> Vec<&Rec> {
    let m = ctx_map(set);
    set.recs
        .iter()
        .filter(|r| ctx_of(r, &m) == Some(ctx) && (pid.is_none() || r.pid == pid))
        .collect()
}

/// `umd-log ctx ID` for people.
pub fn ctx_text(set: &LogSet, ctx: u64, pid: Option<u32>) -> String {
    let m = ctx_map(set);
    let recs = ctx_records(set, ctx, pid);
    let pids: std::collections::BTreeSet<Option<u32>> = recs.iter().map(|r| r.pid).collect();
    let mut out = format!(
        "umd-log ctx {ctx}{}: {}\n{} record{}",
        pid.map(|p| format!(" (pid {p})")).unwrap_or_default(),
        read_summary(set),
        recs.len(),
        if recs.len() == 1 { "" } else { "s" },
    );
    if pids.len() > 1 {
        out += &format!(
            " in {} processes (context ids are per process: add --pid to pick one)",
            pids.len()
        );
    }
    out.push('\n');
    for r in recs {
        out += &rec_line(r, Some(&m));
        out.push('\n');
    }
    out
}

/// `umd-log ctx ID --json`.
pub fn ctx_json(set: &LogSet, ctx: u64, pid: Option<u32>) -> Value {
    let m = ctx_map(set);
    json!({
        "command": "ctx",
        "ctx": ctx,
        "pid": pid,
        "input": files_json(set),
        "records": ctx_records(set, ctx, pid).into_iter().map(|r| rec_json(r, &m)).collect::<Vec<_>>(),
    })
}

// ---------------------------------------------------------------------------------------------
// last-job

/// The event that ends the story.
#[derive(Clone, Debug)]
pub struct Event {
    /// `device lost`, `job timeout` or `GPU fault`.
    pub kind: &'static str,
    /// Index in `LogSet::recs`.
    pub index: usize,
}

/// Per context: the last job submitted and the last known completed before the event.
#[derive(Clone, Debug, Default)]
pub struct CtxJobs {
    /// Process.
    pub pid: Option<u32>,
    /// Context.
    pub ctx: u64,
    /// (seqno, record index) of the last submit.
    pub submitted: Option<(u64, usize)>,
    /// (seqno, record index) of the best evidence of completion.
    pub completed: Option<(u64, usize)>,
    /// (seqno, record index) of the job the GPU faulted or hung on.
    pub stuck: Option<(u64, usize)>,
    /// Record index of the first `UMD_ERR_CTX_LOST` libumd returned for it.
    pub lost: Option<usize>,
}

/// What `last-job` found.
#[derive(Clone, Debug, Default)]
pub struct LastJob {
    /// The device loss, else the last hang, else the last fault; none: end of log.
    pub event: Option<Event>,
    /// Contexts with jobs, by (pid, ctx).
    pub ctxs: Vec<CtxJobs>,
}

/// The event a record states, from its fields ([`super::facts`]).
fn event_kind(r: &Rec) -> Option<&'static str> {
    match facts::of(r)? {
        Fact::DeviceLost => Some("device lost"),
        Fact::DevTimeout { .. } => Some("job timeout"),
        Fact::DevFault { .. } => Some("GPU fault"),
        _ => None,
    }
}

/// A seqno this record says has completed (its `completed` field: the submit path's `wait
/// done`, the `ctx_lost` and `ctx_destroyed` records).
fn completed_seqno(r: &Rec) -> Option<u64> {
    r.field_u64("completed")
}

/// Finds the last submitted and last completed job of every context before a hang or device
/// loss.
pub fn last_job(set: &LogSet) -> LastJob {
    let m = ctx_map(set);
    let find = |kind: &str, last: bool| {
        let is = |r: &&Rec| event_kind(r) == Some(kind);
        if last {
            set.recs.iter().rposition(|r| is(&r))
        } else {
            set.recs.iter().position(|r| is(&r))
        }
    };
    // The first device loss; else the last hang; else the last fault.
    let ev = [
        ("device lost", false),
        ("job timeout", true),
        ("GPU fault", true),
    ]
    .into_iter()
    .find_map(|(k, last)| {
        find(k, last).map(|index| Event {
            kind: match k {
                "device lost" => "device lost",
                "job timeout" => "job timeout",
                _ => "GPU fault",
            },
            index,
        })
    });
    let end = ev.as_ref().map(|e| e.index + 1).unwrap_or(set.recs.len());
    let mut per: BTreeMap<(Option<u32>, u64), CtxJobs> = BTreeMap::new();
    for (i, r) in set.recs[..end].iter().enumerate() {
        let Some(ctx) = ctx_of(r, &m) else { continue };
        let e = per.entry((r.pid, ctx)).or_insert_with(|| CtxJobs {
            pid: r.pid,
            ctx,
            ..CtxJobs::default()
        });
        if r.msg == "submit" {
            if let Some(s) = r.field_u64("seqno") {
                e.submitted = Some((s, i));
            }
        }
        if let Some(c) = completed_seqno(r) {
            if e.completed.is_none_or(|(old, _)| c >= old) {
                e.completed = Some((c, i));
            }
        }
        if event_kind(r).is_some_and(|k| k != "device lost") {
            if let Some(s) = r.field_u64("seqno") {
                e.stuck = Some((s, i));
            }
        }
        if e.lost.is_none() && r.code.as_deref() == Some("UMD_ERR_CTX_LOST") {
            e.lost = Some(i);
        }
    }
    LastJob {
        event: ev,
        ctxs: per
            .into_values()
            .filter(|c| c.submitted.is_some() || c.stuck.is_some() || c.lost.is_some())
            .collect(),
    }
}

/// `umd-log last-job` for people.
pub fn last_job_text(set: &LogSet, lj: &LastJob) -> String {
    let mut out = format!("umd-log last-job: {}\n", read_summary(set));
    match &lj.event {
        Some(e) => {
            let r = &set.recs[e.index];
            out += &format!(
                "{} at {} (pid {}): {} ({})\n",
                e.kind,
                r.wall.rfc3339(),
                pid_text(r.pid),
                r.msg,
                r.src
            );
        }
        None => out +=
            "no hang, GPU fault or device loss in the log: the last jobs at the end of the log\n",
    }
    if lj.ctxs.is_empty() {
        out += "no submit records (libumd logs `submit` at DEBUG: run with UMD_LOG=debug or UMD_LOG_FILE=debug)\n";
    }
    for c in &lj.ctxs {
        out += &format!("pid {} ctx {}:\n", pid_text(c.pid), c.ctx);
        match c.submitted {
            Some((s, i)) => {
                let r = &set.recs[i];
                out += &format!(
                    "  last submitted: seqno {s} at {} ({})\n",
                    r.wall.rfc3339(),
                    r.src
                )
            }
            None => out += "  last submitted: not in the log\n",
        }
        match c.completed {
            Some((s, i)) => {
                let r = &set.recs[i];
                out += &format!(
                    "  last completed: seqno {s} (as of {}, {}{}) ({})\n",
                    r.wall.rfc3339(),
                    r.function.as_deref().unwrap_or(&r.msg),
                    r.code
                        .as_deref()
                        .map(|c| format!(" {c}"))
                        .unwrap_or_default(),
                    r.src
                )
            }
            None => out += "  last completed: not in the log\n",
        }
        if let Some(i) = c.lost {
            let r = &set.recs[i];
            out += &format!(
                "  context lost at {}: {} ({})\n",
                r.wall.rfc3339(),
                r.msg.split(';').next().unwrap_or(""),
                r.src
            );
        }
        if let Some((s, i)) = c.stuck {
            let r = &set.recs[i];
            out += &format!(
                "  {} on: seqno {s}{} ({})\n",
                event_kind(r).unwrap_or("stopped"),
                r.field_str("job")
                    .map(|j| format!(" job {j}"))
                    .unwrap_or_default(),
                r.src
            );
        }
    }
    out
}

/// `umd-log last-job --json`.
pub fn last_job_json(set: &LogSet, lj: &LastJob) -> Value {
    let m = ctx_map(set);
    let at = |x: Option<(u64, usize)>| {
        x.map(|(s, i)| {
            let r = &set.recs[i];
            json!({"seqno": s, "ts": r.wall.rfc3339(), "msg": r.msg, "source": r.src.to_string()})
        })
    };
    json!({
        "command": "last-job",
        "input": files_json(set),
        "event": lj.event.as_ref().map(|e| {
            let mut v = rec_json(&set.recs[e.index], &m);
            v["kind"] = Value::from(e.kind);
            v
        }),
        "contexts": lj.ctxs.iter().map(|c| json!({
            "pid": c.pid,
            "ctx": c.ctx,
            "last_submitted": at(c.submitted),
            "last_completed": at(c.completed),
            "stuck": at(c.stuck),
            "lost": c.lost.map(|i| rec_json(&set.recs[i], &m)),
        })).collect::<Vec<_>>(),
    })
}
