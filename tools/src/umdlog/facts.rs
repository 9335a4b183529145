//! libumd's fact records as typed values (docs/tools.md, "Fact records" and
//! "Fields the verdict reads"): what the verdict and `umd-log` decide on. A record is a fact by
//! its `event` field, its result `code`, or (the backend's records, which carry no `event` yet)
//! its module and the fields it has; never by the words of its message.

use super::{LogSet, Rec};

/// One fact.
#[derive(Clone, Debug, PartialEq)]
pub enum Fact {
    /// `event=process_start`: the backend and why, the non-default settings, the environment.
    Start {
        /// `kmd`, `sim` or `none`.
        backend: String,
        /// `default` or `environment`.
        backend_src: String,
        /// Why not the kernel device: `module_not_loaded`, `node_missing`,
        /// `permission_denied`, `version_mismatch`, `lost`, `bad_config`, `other`; empty when
        /// the process asked for the backend it got.
        why: String,
        /// The render node concerned, when known.
        node: String,
        /// The kernel's UAPI (`major.minor`) on a mismatch.
        kernel_uapi: String,
        /// The process's libumd: (UAPI major, minor, least kernel minor); `None` in logs
        /// written before the field.
        libumd: Option<(u32, u32, u32)>,
        /// The set `UMD_*` variables: (name, value).
        env: Vec<(String, String)>,
    },
    /// `event=setting`: one effective setting.
    Setting {
        /// `job_timeout_ms`, `mem_mib`, `hang_debug`, ...
        name: String,
        /// Effective value.
        value: String,
        /// The built-in default.
        default: String,
        /// `default` or `environment`.
        src: String,
        /// The variable that sets it.
        variable: String,
    },
    /// `event=process_exit`.
    Exit {
        /// `exit` (the record of `exit()`), or `signal` (a fatal signal's, from the black box:
        /// umd/src/log/signals.rs).
        how: String,
        /// The signal's name (`SIGSEGV`) when `how` is `signal`; empty otherwise.
        signal: String,
        /// The exit status (for a signal, 128 + its number, as a shell reports it).
        status: i64,
        /// Contexts still live (empty for a signal: its record only counts them).
        live_contexts: Vec<u64>,
        /// How many contexts were still live.
        live_context_count: u64,
        /// Buffers still live.
        live_buffers: u64,
        /// Their bytes.
        live_bytes: u64,
    },
    /// `event=ctx_lost`: what the driver says happened to a context.
    CtxLost(Lost),
    /// `event=ctx_destroyed`: how a context ended.
    CtxDestroyed {
        /// Context.
        ctx: u64,
        /// `none`, `guilty`, `innocent`, `-` (not asked).
        reset: String,
        /// Last submitted seqno.
        submitted: u64,
        /// Last completed seqno.
        completed: u64,
    },
    /// `event=device_lost`.
    DeviceLost,
    /// `event=leak`: one buffer the application did not free.
    Leak {
        /// Context.
        ctx: u64,
        /// Buffer id.
        buffer: u64,
        /// Bytes.
        size: u64,
        /// Tag (`-`: none).
        tag: String,
    },
    /// `event=leak_summary`.
    LeakSummary {
        /// Context (0: a device close).
        ctx: u64,
        /// Buffers.
        buffers: u64,
        /// Bytes.
        bytes: u64,
    },
    /// `event=oom`: who holds the device memory when an allocation is refused.
    Oom {
        /// The refused context.
        ctx: u64,
        /// Requested bytes.
        size: u64,
        /// Device memory.
        mem_total: u64,
        /// (context, bytes held), largest first.
        holders: Vec<(u64, u64)>,
    },
    /// `event=fault_injected`: a test hook's fault (`UMD_DEBUG_FAULT_*`).
    FaultInjected {
        /// 1 memory error, 2 reset failure, 3 fall off the bus.
        fault: u64,
    },
    /// `event=version_mismatch`.
    VersionMismatch {
        /// Kernel UAPI.
        kernel_uapi: String,
        /// libumd UAPI.
        libumd_uapi: String,
    },
    /// A failed call (`code=` and `function`): what libumd returned to the application.
    ApiError {
        /// Context (0: none).
        ctx: u64,
        /// Result code name.
        code: String,
        /// API function.
        function: String,
        /// Address concerned (0: none).
        va: u64,
    },
    /// `alloc` (the pool's record: `buffer size va`).
    Alloc {
        /// Context.
        ctx: u64,
        /// Buffer id.
        buffer: u64,
        /// Bytes.
        size: u64,
        /// GPU address.
        va: u64,
    },
    /// `free`.
    Free {
        /// Buffer id.
        buffer: u64,
    },
    /// The backend's fault record (`fault` field): a page fault or a hardware error.
    DevFault {
        /// The backend's context id, when a job of one faulted.
        kmd_ctx: Option<u64>,
        /// Fault type name (`unmapped`, `permission`, ..., `bus-error`).
        fault: String,
        /// Access.
        access: String,
        /// Address.
        va: u64,
        /// Packet offset in the command buffer.
        offset: Option<u64>,
        /// `injected`: a fault injection made it (`None` from an older libumd).
        injected: Option<bool>,
    },
    /// The backend's device-loss record (`cause`, one of `rules::lost::LossCause`'s names, the
    /// field of aigpu.ko's `device lost` line).
    DevLost {
        /// Why the device was lost.
        cause: rules::rules::lost::LossCause,
        /// A fault injection did it.
        injected: bool,
    },
    /// The backend's job-timeout record (`timeout_ms` and `kmd_ctx`).
    DevTimeout {
        /// The backend's context id.
        kmd_ctx: u64,
        /// The job's seqno.
        seqno: u64,
        /// The timeout in force.
        timeout_ms: u64,
        /// The job's facts (`ran_ms`, `state`, ...; `None` from an older libumd).
        facts: Option<crate::timeout::TimeoutFacts>,
    },
}

/// A lost context (`event=ctx_lost`).
#[derive(Clone, Debug, PartialEq)]
pub struct Lost {
    /// Context.
    pub ctx: u64,
    /// `fault`, `hang` or `reset`.
    pub cause: String,
    /// Fault type (`-` for none).
    pub fault: String,
    /// Access.
    pub access: String,
    /// Faulting address.
    pub va: u64,
    /// Packet offset of the fault in its command buffer.
    pub offset: u64,
    /// Last submitted seqno.
    pub submitted: u64,
    /// Last completed seqno.
    pub completed: u64,
}

fn s(r: &Rec, k: &str) -> String {
    r.field_str(k).unwrap_or_default()
}

fn n(r: &Rec, k: &str) -> u64 {
    r.field_u64(k).unwrap_or(0)
}

fn list(v: &str) -> Vec<u64> {
    v.split(',').filter_map(|x| x.trim().parse().ok()).collect()
}

/// `UMD_A=1;UMD_B=x` → pairs (values may hold `;`: a pair starts at `;UMD_`).
fn env_pairs(v: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for part in v.split(';') {
        match part.split_once('=') {
            Some((k, val)) if k.starts_with("UMD_") => out.push((k.into(), val.into())),
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1 = format!("{};{part}", last.1);
                }
            }
        }
    }
    out
}

/// The fact a record states, if any.
pub fn of(r: &Rec) -> Option<Fact> {
    if let Some(ev) = r.field_str("event") {
        let ctx = r.ctx_u64().unwrap_or(0);
        return Some(match ev.as_str() {
            "process_start" => Fact::Start {
                backend: s(r, "backend"),
                backend_src: s(r, "backend_src"),
                why: s(r, "backend_why"),
                node: s(r, "node"),
                kernel_uapi: s(r, "kernel_uapi"),
                libumd: s(r, "libumd_uapi").split_once('.').and_then(|(a, b)| {
                    Some((
                        a.parse().ok()?,
                        b.parse().ok()?,
                        r.field_u64("min_kernel_minor")? as u32,
                    ))
                }),
                env: env_pairs(&s(r, "env")),
            },
            "setting" => Fact::Setting {
                name: s(r, "name"),
                value: s(r, "value"),
                default: s(r, "default"),
                src: s(r, "src"),
                variable: s(r, "variable"),
            },
            "process_exit" => Fact::Exit {
                how: s(r, "how"),
                signal: s(r, "signal"),
                status: r.field("status").and_then(|v| v.as_i64()).unwrap_or(0),
                live_contexts: list(&s(r, "live_contexts")),
                live_context_count: r
                    .field_u64("live_context_count")
                    .unwrap_or_else(|| list(&s(r, "live_contexts")).len() as u64),
                live_buffers: n(r, "live_buffers"),
                live_bytes: n(r, "live_bytes"),
            },
            "ctx_lost" => Fact::CtxLost(Lost {
                ctx,
                cause: s(r, "cause"),
                fault: s(r, "fault"),
                access: s(r, "access"),
                va: n(r, "va"),
                offset: n(r, "offset"),
                submitted: n(r, "submitted"),
                completed: n(r, "completed"),
            }),
            "ctx_destroyed" => Fact::CtxDestroyed {
                ctx,
                reset: s(r, "reset"),
                submitted: n(r, "submitted"),
                completed: n(r, "completed"),
            },
            "device_lost" => Fact::DeviceLost,
            "leak" => Fact::Leak {
                ctx,
                buffer: n(r, "buffer"),
                size: n(r, "size"),
                tag: s(r, "tag"),
            },
            "leak_summary" => Fact::LeakSummary {
                ctx,
                buffers: n(r, "buffers"),
                bytes: n(r, "bytes"),
            },
            "oom" => Fact::Oom {
                ctx,
                size: n(r, "size"),
                mem_total: n(r, "mem_total"),
                holders: s(r, "holders")
                    .split(',')
                    .filter_map(|p| {
                        let (c, b) = p.split_once(':')?;
                        Some((c.parse().ok()?, b.parse().ok()?))
                    })
                    .collect(),
            },
            "fault_injected" => Fact::FaultInjected {
                fault: n(r, "fault"),
            },
            "version_mismatch" => Fact::VersionMismatch {
                kernel_uapi: s(r, "kernel_uapi"),
                libumd_uapi: s(r, "libumd_uapi"),
            },
            _ => return None,
        });
    }
    if let (Some(code), Some(function)) = (&r.code, &r.function) {
        return Some(Fact::ApiError {
            ctx: r.ctx_u64().unwrap_or(0),
            code: code.clone(),
            function: function.clone(),
            va: n(r, "va"),
        });
    }
    if r.module.starts_with("umd::backend") {
        if let Some(fault) = r.field_str("fault") {
            return Some(Fact::DevFault {
                kmd_ctx: r.field_u64("kmd_ctx"),
                fault,
                access: s(r, "access"),
                va: n(r, "va"),
                offset: r.field_u64("offset"),
                injected: r.field_u64("injected").map(|v| v == 1),
            });
        }
        if let Some(cause) = r
            .field_str("cause")
            .and_then(|c| rules::rules::lost::LossCause::from_name(&c))
        {
            return Some(Fact::DevLost {
                cause,
                injected: r.field_u64("injected") == Some(1),
            });
        }
        if let (Some(t), Some(k)) = (r.field_u64("timeout_ms"), r.field_u64("kmd_ctx")) {
            return Some(Fact::DevTimeout {
                kmd_ctx: k,
                seqno: n(r, "seqno"),
                timeout_ms: t,
                facts: crate::timeout::TimeoutFacts::from_fields(|key| r.field_str(key)),
            });
        }
        return None;
    }
    // The pool's records name their event in the message, which is one declared word.
    match (r.msg.as_str(), r.field_u64("buffer")) {
        ("alloc", Some(buffer)) => Some(Fact::Alloc {
            ctx: r.ctx_u64().unwrap_or(0),
            buffer,
            size: n(r, "size"),
            va: n(r, "va"),
        }),
        ("free", Some(buffer)) => Some(Fact::Free { buffer }),
        _ => None,
    }
}

/// Every fact of the set, with the record that states it, in log order.
pub fn all(set: &LogSet) -> Vec<(Fact, &Rec)> {
    set.recs
        .iter()
        .filter_map(|r| of(r).map(|f| (f, r)))
        .collect()
}

/// One process's facts.
pub struct Process<'a> {
    /// Its pid.
    pub pid: Option<u32>,
    /// Its facts in order.
    pub facts: Vec<(Fact, &'a Rec)>,
}

impl<'a> Process<'a> {
    /// The start record.
    pub fn start(&self) -> Option<(&Fact, &'a Rec)> {
        self.facts
            .iter()
            .find(|(f, _)| matches!(f, Fact::Start { .. }))
            .map(|(f, r)| (f, *r))
    }

    /// A setting: (value, default, src, variable, record).
    pub fn setting(&self, name: &str) -> Option<(&str, &str, &str, &str, &'a Rec)> {
        self.facts.iter().find_map(|(f, r)| match f {
            Fact::Setting {
                name: n,
                value,
                default,
                src,
                variable,
            } if n == name => Some((
                value.as_str(),
                default.as_str(),
                src.as_str(),
                variable.as_str(),
                *r,
            )),
            _ => None,
        })
    }

    /// The backend it ran on (`kmd`, `sim`, `none`), from its start record.
    pub fn backend(&self) -> Option<&str> {
        match self.start()? {
            (Fact::Start { backend, .. }, _) => Some(backend.as_str()),
            _ => None,
        }
    }

    /// Whether it chose the simulator itself (`UMD_BACKEND=sim`).
    pub fn chose_sim(&self) -> bool {
        matches!(self.start(), Some((Fact::Start { backend, backend_src, .. }, _)) if backend == "sim" && backend_src == "environment")
    }

    /// The exit record.
    pub fn exit(&self) -> Option<(&Fact, &'a Rec)> {
        self.facts
            .iter()
            .find(|(f, _)| matches!(f, Fact::Exit { .. }))
            .map(|(f, r)| (f, *r))
    }

    /// The libumd context a backend context id belongs to (the `context created` record's
    /// `kmd_ctx`).
    pub fn umd_ctx(&self, kmd_ctx: u64) -> u64 {
        self.facts
            .iter()
            .find_map(|(_, r)| {
                (r.module == "umd::context" && r.field_u64("kmd_ctx") == Some(kmd_ctx))
                    .then(|| r.ctx_u64())
                    .flatten()
            })
            .unwrap_or(kmd_ctx)
    }

    /// Replays the `alloc` and `free` records before fact index `at`: the buffers still live,
    /// and the freed ones with their `free` record, in order.
    fn replay(&self, at: usize) -> Replayed<'a> {
        let mut live: Vec<Buf<'a>> = Vec::new();
        let mut freed: Vec<(Buf<'a>, &'a Rec)> = Vec::new();
        for (f, r) in &self.facts[..at.min(self.facts.len())] {
            match f {
                Fact::Alloc {
                    ctx,
                    buffer,
                    size,
                    va,
                } => live.push((*ctx, *buffer, *size, *va, *r)),
                Fact::Free { buffer } => {
                    if let Some(i) = live.iter().position(|l| l.1 == *buffer) {
                        freed.push((live.remove(i), *r));
                    }
                }
                _ => {}
            }
        }
        (live, freed)
    }

    /// The buffers live just before fact index `at`: (ctx, buffer, size, va, alloc record).
    pub fn live_at(&self, at: usize) -> Vec<Buf<'a>> {
        self.replay(at).0
    }

    /// The buffer freed before fact index `at` that covered `va` (the most recent): (ctx,
    /// buffer, size, start, alloc record, free record).
    pub fn freed_at(&self, at: usize, va: u64) -> Option<(u64, u64, u64, u64, &'a Rec, &'a Rec)> {
        self.replay(at)
            .1
            .into_iter()
            .rev()
            .find(|(b, _)| va >= b.3 && va < b.3 + b.2.max(1))
            .map(|(b, fr)| (b.0, b.1, b.2, b.3, b.4, fr))
    }
}

/// A buffer from its `alloc` record: (ctx, buffer, size, va, the record).
pub type Buf<'a> = (u64, u64, u64, u64, &'a Rec);

type Replayed<'a> = (Vec<Buf<'a>>, Vec<(Buf<'a>, &'a Rec)>);

/// The facts by process, in the order processes first appear.
pub fn processes(set: &LogSet) -> Vec<Process<'_>> {
    let mut out: Vec<Process<'_>> = Vec::new();
    for (f, r) in all(set) {
        match out.iter_mut().find(|p| p.pid == r.pid) {
            Some(p) => p.facts.push((f, r)),
            None => out.push(Process {
                pid: r.pid,
                facts: vec![(f, r)],
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_pairs_keep_semicolons_in_values() {
        assert_eq!(
            env_pairs("UMD_LOG=warn;x;UMD_BACKEND=sim"),
            vec![
                ("UMD_LOG".to_string(), "warn;x".to_string()),
                ("UMD_BACKEND".to_string(), "sim".to_string())
            ]
        );
    }

    #[test]
    fn a_record_is_a_fact_by_its_fields_not_its_words() {
        let r = super::super::parse_text(
            "2026-12-02T00:59:30.222696Z 1 ERROR tid=1 umd::context - - ctx=2 code=- \"anything at all\" event=ctx_lost cause=fault fault=unmapped access=write va=0x7f0000000 offset=24 submitted=1 completed=0",
        )
        .expect("parses");
        assert_eq!(
            of(&r),
            Some(Fact::CtxLost(Lost {
                ctx: 2,
                cause: "fault".into(),
                fault: "unmapped".into(),
                access: "write".into(),
                va: 0x7f0000000,
                offset: 24,
                submitted: 1,
                completed: 0
            }))
        );
        let r = super::super::parse_text(
            "2026-12-02T00:59:30.222696Z 1 ERROR tid=1 umd::backend::sim::gpu - - ctx=- code=- \"it hung the GPU\" device=0",
        )
        .expect("parses");
        assert_eq!(of(&r), None, "English alone states no fact");
    }
}
