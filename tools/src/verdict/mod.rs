//! The layered verdict of `umd-smi triage` (docs/tools.md, "The verdict": localise layer by layer, bottom up,
//! never skipping one): for hardware, kernel module, user-space driver, configuration and
//! application, OK or the findings with the lines that prove them. Every finding carries its
//! facts as fields ([`Facts`]: kind, process, context, call, packet, address, size, fix), read
//! from fields of the records (docs/tools.md, "Fields the verdict reads"), never from their
//! words. One file per layer; the libumd log's per-process facts are [`crate::umdlog::facts`].

mod application;
mod config;
mod hardware;
mod kernel;
mod leaks;
mod process;
mod refused;
mod render;
mod userspace;

pub use render::{render_all, render_json, render_text};

use crate::dmesg::{self, Event, Found};
use crate::triage::Snapshot;
use crate::umdlog::facts::{self, Process};
use crate::umdlog::Rec;
use rules::rules::lost::LossCause;

/// The layers, bottom up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The (virtual) device.
    Hardware,
    /// aigpu.ko.
    KernelModule,
    /// libumd.
    UserSpace,
    /// The process's settings (environment, API) as its log states them.
    Configuration,
    /// The program using libumd.
    Application,
}

impl Layer {
    /// As printed.
    pub fn name(&self) -> &'static str {
        match self {
            Layer::Hardware => "hardware",
            Layer::KernelModule => "kernel module",
            Layer::UserSpace => "user-space driver",
            Layer::Configuration => "configuration",
            Layer::Application => "application",
        }
    }
}

/// A line that proves a finding, and where it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evidence {
    /// `dmesg`, a file path, `umd-4411.log:12`, `environment`, ...
    pub source: String,
    /// The line.
    pub line: String,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What is wrong, in one sentence.
    pub text: String,
    /// The proof.
    pub evidence: Vec<Evidence>,
    /// The same as fields.
    pub facts: Facts,
}

/// A finding's facts, as `verdict.json` gives them (docs/tools.md, "The verdict's fields").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// What kind of finding (`page_fault`, `job_timeout`, `use_after_free`, ...).
    pub kind: &'static str,
    /// The process.
    pub pid: Option<u64>,
    /// The context (libumd's id in the process; the kernel's in a kernel record).
    pub ctx: Option<u64>,
    /// The API call that failed.
    pub call: Option<String>,
    /// The packet, as far as known (`offset 24`).
    pub packet: Option<String>,
    /// The address concerned.
    pub va: Option<u64>,
    /// The size concerned (bytes).
    pub size: Option<u64>,
    /// The buffer concerned.
    pub buffer: Option<u64>,
    /// The context that caused it when not `ctx` (the holder of the memory of an OOM).
    pub culprit: Option<u64>,
    /// Contexts that were not at fault, and what happened to their work.
    pub innocent: Vec<(u64, String)>,
    /// The setting concerned (`UMD_SIM_JOB_TIMEOUT_MS=10`).
    pub setting: Option<String>,
    /// The fatal signal that ended the process (`SIGSEGV`).
    pub signal: Option<String>,
    /// Why a device was lost (`rules::lost::LossCause`: `reset_failed`, `off_bus`).
    pub cause: Option<&'static str>,
    /// Whether a fault injection made the hardware event (`Some` where the record says).
    pub injected: Option<bool>,
    /// A job timeout's facts (`timeout::TimeoutFacts`): how long the job ran, ms.
    pub ran_ms: Option<u64>,
    /// What its queue was doing: `executing`, `waiting`, `hung`.
    pub state: Option<String>,
    /// What a waiting queue waited on (a WAIT_MEM's VA or an in-fence's PA) and for which value.
    pub wait_va: Option<u64>,
    pub wait_pa: Option<u64>,
    pub wait_value: Option<u64>,
    /// The timeout in force and where it came from.
    pub timeout_ms: Option<u64>,
    pub timeout_source: Option<String>,
    /// The run times of the context's last completed jobs, ms, oldest first.
    pub recent_ms: Option<Vec<u64>>,
    /// The application's call that allocated the buffer concerned
    /// ([`crate::umdlog::symbolize::CallSite::describe`]).
    pub allocated_at: Option<String>,
    /// The application's call that freed it.
    pub freed_at: Option<String>,
    /// What to do.
    pub fix: String,
}

/// One layer's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// Nothing found; what was looked at.
    Ok(String),
    /// Findings, most important first.
    Findings(Vec<Finding>),
    /// Could not be judged, and why.
    NotChecked(String),
}

/// One layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerVerdict {
    /// Which.
    pub layer: Layer,
    /// Result.
    pub status: Status,
}

/// All four, bottom up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict(pub Vec<LayerVerdict>);

pub(crate) fn ev(source: impl Into<String>, line: impl Into<String>) -> Evidence {
    Evidence {
        source: source.into(),
        line: line.into(),
    }
}

pub(crate) fn finding(text: impl Into<String>, evidence: Vec<Evidence>) -> Finding {
    Finding {
        text: text.into(),
        evidence,
        facts: Facts::default(),
    }
}

impl Finding {
    /// With its facts.
    pub(crate) fn with(mut self, facts: Facts) -> Finding {
        self.facts = facts;
        self
    }
}

/// The libumd side of the UAPI contract: (major, minor, least kernel minor).
pub type LibUapi = (u32, u32, u32);

/// This build's libumd UAPI.
pub fn libumd_uapi() -> LibUapi {
    (uapi::UAPI_MAJOR, uapi::UAPI_MINOR, uapi::MIN_KERNEL_MINOR)
}

/// "libumd UAPI 1.4 needs kernel UAPI ≥ 1.3, found 1.2".
pub fn uapi_text(lib: (u32, u32, u32), kernel: (u32, u32)) -> String {
    if kernel.0 == lib.0 {
        format!(
            "libumd UAPI {}.{} needs kernel UAPI ≥ {}.{}, found {}.{}",
            lib.0, lib.1, lib.0, lib.2, kernel.0, kernel.1
        )
    } else {
        format!(
            "libumd UAPI {}.{} needs kernel UAPI {}.x with x ≥ {}, found {}.{} (a different major version)",
            lib.0, lib.1, lib.0, lib.2, kernel.0, kernel.1
        )
    }
}

pub(crate) fn compatible(lib: (u32, u32, u32), k: (u32, u32)) -> bool {
    k.0 == lib.0 && k.1 >= lib.2
}

pub(crate) fn parse_ver(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once('.')?;
    let b: String = b.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((a.trim().parse().ok()?, b.parse().ok()?))
}

pub(crate) fn log_ev(r: &Rec) -> Evidence {
    ev(format!("umd log {}", r.src), r.raw.trim_end())
}

pub(crate) fn dmesg_ev(source: &str, f: &Found) -> Evidence {
    ev(source, f.line.trim_end())
}

pub(crate) fn who(pid: Option<u64>, comm: Option<&str>) -> String {
    match (pid, comm) {
        (Some(p), Some(c)) => format!("pid {p}, {c}"),
        (Some(p), None) => format!("pid {p}"),
        (None, Some(c)) => c.to_string(),
        (None, None) => "process unknown".into(),
    }
}

/// Computes the verdict.
pub fn verdict(s: &Snapshot) -> Verdict {
    let procs = facts::processes(&s.logs);
    let v = |layer, status| LayerVerdict { layer, status };
    Verdict(vec![
        v(Layer::Hardware, hardware::judge(s, &procs)),
        v(Layer::KernelModule, kernel::judge(s, &procs)),
        v(Layer::UserSpace, userspace::judge(s, &procs)),
        v(Layer::Configuration, config::judge(s, &procs)),
        v(Layer::Application, application::judge(s, &procs)),
    ])
}

/// Processes whose log says they ran on the simulator by their own choice (`UMD_BACKEND=sim`)
/// — and none that looked for the kernel device: then nothing the kernel module does concerns
/// them.
pub(crate) fn all_chose_sim(procs: &[Process<'_>]) -> bool {
    let started: Vec<&Process<'_>> = procs.iter().filter(|p| p.start().is_some()).collect();
    !started.is_empty() && started.iter().all(|p| p.chose_sim())
}

/// The live simulator devices other processes publish (`simdir.rs`), not the kernel's.
pub(crate) fn sim_devices(s: &Snapshot) -> impl Iterator<Item = &crate::smi::DeviceView> {
    s.view.devices.iter().filter(|d| d.owner.is_some())
}

/// The pids of the live simulator devices whose owner asked for the simulator
/// (`backend_why=requested`: `UMD_BACKEND=sim`), when every such device's owner did; empty
/// otherwise.
pub(crate) fn live_sims_by_choice(s: &Snapshot) -> Vec<u32> {
    let owners: Vec<&umd::backend::sim::publish::Owner> =
        sim_devices(s).filter_map(|d| d.owner.as_ref()).collect();
    if owners.iter().any(|o| o.backend_why != "requested") {
        return Vec::new();
    }
    let mut pids: Vec<u32> = owners.iter().map(|o| o.pid).collect();
    pids.dedup();
    pids
}

/// `0x..`.
pub(crate) fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// The pid of a process, for facts.
pub(crate) fn pid64(p: &Process<'_>) -> Option<u64> {
    p.pid.map(u64::from)
}

/// The driver's lines of this boot that concern the devices as they are now: a line about a
/// device from before that device's most recent probe (the module was reloaded since: a device
/// lost, faulted or hung then is a new device now) is history, and so is a module load error
/// followed by a successful probe. The report keeps the whole log (`dmesg-aigpu.txt`).
pub(crate) fn dmesg_found(s: &Snapshot) -> Vec<(String, Found)> {
    let mut v = Vec::new();
    if let Some(l) = &s.dmesg {
        for f in dmesg::classify(l) {
            v.push((l.source.clone(), f));
        }
    }
    current_instance(v)
}

pub(crate) fn current_instance(v: Vec<(String, Found)>) -> Vec<(String, Found)> {
    // One pass: the index of the latest probe of each device, and of any device.
    let mut last_any = None;
    let mut last_of: Vec<(String, usize)> = Vec::new();
    for (i, (_, f)) in v.iter().enumerate() {
        if let Event::Probe { device, .. } = &f.event {
            last_any = Some(i);
            match last_of.iter_mut().find(|(d, _)| d == device) {
                Some(e) => e.1 = i,
                None => last_of.push((device.clone(), i)),
            }
        }
    }
    let after = |p: Option<usize>, i: usize| p.is_none_or(|p| p < i);
    v.into_iter()
        .enumerate()
        .filter(|(i, (_, f))| match &f.event {
            // Load errors name no device: history once any device probed after them.
            Event::VersionMagic { .. }
            | Event::UnknownSymbol(_)
            | Event::SymbolVersion(_)
            | Event::LoadError => after(last_any, *i),
            // What happened to a device: history once that device probed again.
            Event::Fault(_)
            | Event::Hang
            | Event::Lost { .. }
            | Event::Reinit { .. }
            | Event::Wedged { .. } => {
                let dev = dmesg_device(f);
                let p = dev.and_then(|d| last_of.iter().find(|(x, _)| *x == d).map(|e| e.1));
                after(p.or(last_any), *i)
            }
            // Probes, kernel warnings naming the module and its leak reports stay: a reload
            // does not make a kernel bug or a leak go away.
            _ => true,
        })
        .map(|(_, x)| x)
        .collect()
}

pub(crate) fn journal_found(s: &Snapshot) -> Vec<(String, Found)> {
    let mut v = Vec::new();
    if let Some(l) = &s.journal {
        for f in dmesg::classify(l) {
            v.push((l.source.clone(), f));
        }
    }
    v
}

/// The device a driver line names (`aigpu aigpu0: ...` → `aigpu0`).
pub(crate) fn dmesg_device(f: &Found) -> Option<String> {
    dmesg::body(&f.line)
        .split_whitespace()
        .nth(1)
        .filter(|d| d.starts_with("aigpu"))
        .map(|d| d.trim_end_matches(':').to_string())
}

/// A device loss the kernel log records: the device, the `device lost` line (`rules::lost::LostLine`)
/// with its cause, and the `device re-initialised` line after it when the device has been
/// power-cycled since (the kernel does that at the next open once no context is left on the
/// lost device).
pub(crate) struct LostInLog<'a> {
    pub(crate) device: String,
    pub(crate) failed: &'a (String, Found),
    pub(crate) cause: LossCause,
    pub(crate) injected: bool,
    pub(crate) reinit: Option<&'a (String, Found)>,
}

/// The most recent loss of each device in the kernel log.
pub(crate) fn losses_in_log(dm: &[(String, Found)]) -> Vec<LostInLog<'_>> {
    let mut out: Vec<LostInLog<'_>> = Vec::new();
    for (i, x) in dm.iter().enumerate() {
        let Event::Lost { cause, injected } = x.1.event else {
            continue;
        };
        let device = dmesg_device(&x.1).unwrap_or_else(|| "aigpu".into());
        let reinit = dm[i + 1..].iter().find(|(_, f)| {
            matches!(f.event, Event::Reinit { .. })
                && dmesg_device(f).unwrap_or_else(|| "aigpu".into()) == device
        });
        out.retain(|l| l.device != device);
        out.push(LostInLog {
            device,
            failed: x,
            cause,
            injected,
            reinit,
        });
    }
    out
}

/// The kernel's devices (a published simulator device is another process's own, not one a
/// process could have been given instead of the simulator).
pub(crate) fn device_names(s: &Snapshot) -> Vec<String> {
    kernel_devices(s).map(|d| d.name.clone()).collect()
}

pub(crate) fn any_device(s: &Snapshot) -> bool {
    kernel_devices(s).next().is_some()
}

fn kernel_devices(s: &Snapshot) -> impl Iterator<Item = &crate::smi::DeviceView> {
    s.view.devices.iter().filter(|d| d.owner.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uapi_sentences() {
        assert_eq!(
            uapi_text((1, 4, 3), (1, 2)),
            "libumd UAPI 1.4 needs kernel UAPI ≥ 1.3, found 1.2"
        );
    }
}
