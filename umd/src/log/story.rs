//! The process's own story in its log (docs/tools.md, "The process's story"): one
//! `process start` record with the effective settings and where each came from, and one
//! `process exit` record with how the process ended and what was still live.
//!
//! Both carry `event=` (`process_start`, `process_exit`) and typed fields only; `umd-smi triage`
//! reads the failing process's environment and settings from them instead of the shell it runs
//! in (docs/tools.md, "Fields the verdict reads").

use crate::backend::select::{NoKernelDevice, Resolved};
use crate::error::UmdResult;
use std::sync::Once;

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing set it.
    Default,
    /// An environment variable.
    Environment,
    /// A call of the C ABI.
    Api,
}

impl Source {
    /// As logged.
    pub fn name(self) -> &'static str {
        match self {
            Source::Default => "default",
            Source::Environment => "environment",
            Source::Api => "api",
        }
    }

    fn of(var: &str) -> Source {
        if std::env::var_os(var).is_some() {
            Source::Environment
        } else {
            Source::Default
        }
    }
}

static STARTED: Once = Once::new();

/// The set `UMD_*` variables libumd reads, `NAME=value` joined by `;` (values with `;` keep it:
/// the names are known, so a reader splits on `;UMD_`).
fn environment() -> String {
    super::config::VARIABLES
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(";")
}

/// Why there is no kernel device, as a name (`module_not_loaded`, `node_missing`,
/// `permission_denied`, `version_mismatch`, `lost`, `other`) with the node and the kernel's
/// UAPI when known.
fn no_kernel_device(d: &NoKernelDevice) -> (&'static str, String, String) {
    let (node, kernel) = match d {
        NoKernelDevice::PermissionDenied(n) | NoKernelDevice::Lost(n) => (n.clone(), String::new()),
        NoKernelDevice::VersionMismatch { kernel } => {
            (String::new(), format!("{}.{}", kernel.0, kernel.1))
        }
        _ => (String::new(), String::new()),
    };
    (d.name(), node, kernel)
}

/// The backend (`kmd` / `sim` / `none`) and, when it is not the kernel's although `auto` or
/// `kmd` looked for it, why: libumd's own probe asked again, so the reason is a name, not a
/// sentence (this runs once, on the fallback or failure path only).
fn backend(r: &UmdResult<Resolved>) -> (&'static str, (&'static str, String, String)) {
    let why = || match crate::backend::kmd::probe() {
        Ok(_) => ("other", String::new(), String::new()),
        Err(d) => no_kernel_device(&d),
    };
    match r {
        Ok(Resolved::Kmd(_)) => ("kmd", ("", String::new(), String::new())),
        Ok(Resolved::Sim(None)) => ("sim", ("", String::new(), String::new())),
        Ok(Resolved::Sim(Some(_))) => ("sim", why()),
        Err(e) if e.code == crate::error::umdResult::UMD_ERR_INIT_BAD_CONFIG => {
            ("none", ("bad_config", String::new(), String::new()))
        }
        Err(_) => ("none", why()),
    }
}

/// The backend the process asked for, as its `backend` setting: `UMD_BACKEND` as given (`auto`
/// when unset). Which backend it got is the `process_start` record's `backend` field; a setting
/// that said what the process ended with would report `UMD_BACKEND=kmd` on a machine without the
/// module as "backend none".
fn requested_backend() -> String {
    use crate::backend::select::{choice, Choice};
    match choice() {
        Ok(Choice::Auto) => "auto".into(),
        Ok(Choice::Kmd) => "kmd".into(),
        Ok(Choice::Sim) => "sim".into(),
        Err(_) => std::env::var("UMD_BACKEND").unwrap_or_default(),
    }
}

/// The directory the per-user directory of the published simulator devices is in.
fn dir_of(c: &crate::backend::sim::config::SimConfig) -> String {
    c.publish_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("/tmp"))
        .display()
        .to_string()
}

/// Logs the `process start` record once per process, when the backend is first resolved, and
/// arranges for the `process exit` record.
pub fn started(r: &UmdResult<Resolved>) {
    STARTED.call_once(|| {
        let (backend, (why, node, kernel_uapi)) = backend(r);
        let sim = crate::backend::sim::config::SimConfig::from_env().unwrap_or_default();
        let sim0 = crate::backend::sim::config::SimConfig::default();
        let pool = crate::memory::pool::config::Config::from_env().unwrap_or_default();
        let pool0 = crate::memory::pool::config::Config::default();
        // (name, variable, effective value, default value). The simulator's settings are the
        // device's only when the process runs on it; on the kernel backend the module's
        // parameters rule (debugfs `status`), so they are not claimed there.
        let on_sim = backend == "sim";
        let mut settings: Vec<(&str, &str, String, String)> = vec![(
            "backend",
            "UMD_BACKEND",
            requested_backend(),
            "auto".to_string(),
        )];
        if on_sim {
            settings.extend([
                (
                    "job_timeout_ms",
                    "UMD_SIM_JOB_TIMEOUT_MS",
                    sim.job_timeout_ms.to_string(),
                    sim0.job_timeout_ms.to_string(),
                ),
                (
                    "mem_mib",
                    "UMD_SIM_MEM_MIB",
                    (sim.mem_bytes >> 20).to_string(),
                    (sim0.mem_bytes >> 20).to_string(),
                ),
                (
                    "sim_devices",
                    "UMD_SIM_DEVICES",
                    sim.devices.to_string(),
                    sim0.devices.to_string(),
                ),
                (
                    "hang_debug",
                    "UMD_SIM_HANG_DEBUG",
                    sim.hang_debug.to_string(),
                    sim0.hang_debug.to_string(),
                ),
                (
                    "sim_publish",
                    "UMD_SIM_PUBLISH",
                    sim.publish.to_string(),
                    sim0.publish.to_string(),
                ),
                ("sim_dir", "UMD_SIM_DIR", dir_of(&sim), dir_of(&sim0)),
            ]);
        }
        settings.extend([
            (
                "log",
                "UMD_LOG",
                std::env::var("UMD_LOG").unwrap_or_default(),
                String::new(),
            ),
            (
                "pool",
                "UMD_POOL",
                pool.enabled.to_string(),
                pool0.enabled.to_string(),
            ),
            (
                "pool_history",
                "UMD_POOL_HISTORY",
                pool.history.to_string(),
                pool0.history.to_string(),
            ),
            (
                "pool_release_threshold",
                "UMD_POOL_RELEASE_THRESHOLD",
                pool.release_threshold.to_string(),
                pool0.release_threshold.to_string(),
            ),
        ]);
        let non_default = settings
            .iter()
            .filter(|(_, var, _, _)| Source::of(var) != Source::Default)
            .map(|(n, _, _, _)| *n)
            .collect::<Vec<_>>()
            .join(",");
        tracing::info!(
            event = "process_start",
            backend,
            backend_src = Source::of("UMD_BACKEND").name(),
            backend_why = why,
            node = node.as_str(),
            kernel_uapi = kernel_uapi.as_str(),
            libumd_uapi = %format_args!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR),
            min_kernel_minor = uapi::MIN_KERNEL_MINOR,
            non_default = non_default.as_str(),
            env = environment().as_str(),
            "process start"
        );
        for (name, var, value, default) in &settings {
            tracing::info!(
                event = "setting",
                name,
                value = value.as_str(),
                default = default.as_str(),
                src = Source::of(var).name(),
                variable = var,
                "setting"
            );
        }
        at_exit();
    });
}

/// A setting changed through the C ABI after the start: one `setting` record with `src=api`
/// (`name` as in the start's records; `value` as the call gave it).
pub fn set_by_api(name: &str, value: &str, call: &str) {
    tracing::info!(
        event = "setting",
        name,
        value,
        src = Source::Api.name(),
        call,
        "setting"
    );
}

/// Registers [`exited`] to run inside `exit()`.
fn at_exit() {
    crate::util::on_exit(exited);
}

/// The `process exit` record: how the process ended and what was still live. Runs inside
/// `exit()`; nothing here may unwind into C.
extern "C" fn exited(status: libc::c_int, _arg: *mut libc::c_void) {
    let _ = std::panic::catch_unwind(|| {
        use crate::registry::{BUFFERS, CONTEXTS, DEVICES};
        let ctxs = CONTEXTS.live();
        let bufs = BUFFERS.live();
        let live_bytes: u64 = bufs.iter().map(|(_, b)| b.size).sum();
        let live_contexts = ctxs
            .iter()
            .map(|(_, c)| c.id.to_string())
            .collect::<Vec<_>>()
            .join(",");
        tracing::info!(
            event = "process_exit",
            how = "exit",
            status,
            live_devices = DEVICES.live().len() as u64,
            live_contexts = live_contexts.as_str(),
            live_buffers = bufs.len() as u64,
            live_bytes,
            "process exit"
        );
    });
}
