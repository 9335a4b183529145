//! The layered verdict of `umd-smi triage` (seed 002 §3: localise layer by layer, bottom up,
//! never skipping one): for hardware, kernel module, user-space driver and application, OK or
//! the first finding with the line that proves it.

use crate::debugfs::CrashDump;
use crate::dmesg::{self, Event, Found};
use crate::smi::Access;
use crate::triage::Snapshot;
use crate::umdlog::{self, Rec};
use crate::util::Wall;
use serde_json::{json, Value};
use umd::backend::select::NoKernelDevice;

/// The four layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// The (virtual) device.
    Hardware,
    /// aigpu.ko.
    KernelModule,
    /// libumd.
    UserSpace,
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

fn ev(source: impl Into<String>, line: impl Into<String>) -> Evidence {
    Evidence {
        source: source.into(),
        line: line.into(),
    }
}

fn finding(text: impl Into<String>, evidence: Vec<Evidence>) -> Finding {
    Finding {
        text: text.into(),
        evidence,
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

fn compatible(lib: (u32, u32, u32), k: (u32, u32)) -> bool {
    k.0 == lib.0 && k.1 >= lib.2
}

fn parse_ver(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once('.')?;
    let b: String = b.chars().take_while(|c| c.is_ascii_digit()).collect();
    Some((a.trim().parse().ok()?, b.parse().ok()?))
}

/// libumd's version-mismatch sentence (`NoKernelDevice::VersionMismatch::describe`): "kernel
/// aigpu UAPI 1.2 cannot be driven by this libumd (UAPI 1.4, needs kernel 1.3+)" → (lib,
/// kernel).
pub fn parse_mismatch(text: &str) -> Option<(LibUapi, (u32, u32))> {
    let i = text.find("kernel aigpu UAPI ")?;
    let rest = &text[i + "kernel aigpu UAPI ".len()..];
    let kernel = parse_ver(rest.split_whitespace().next()?)?;
    let j = rest.find("this libumd (UAPI ")?;
    let rest = &rest[j + "this libumd (UAPI ".len()..];
    let lib = parse_ver(rest.split(',').next()?)?;
    let k = rest.find("needs kernel ")?;
    let need = parse_ver(rest[k + "needs kernel ".len()..].trim_end_matches([')', '.', '+']))?;
    Some(((lib.0, lib.1, need.1), kernel))
}

fn log_ev(r: &Rec) -> Evidence {
    ev(format!("umd log {}", r.src), r.raw.trim_end())
}

fn dmesg_ev(source: &str, f: &Found) -> Evidence {
    ev(source, f.line.trim_end())
}

fn who(pid: Option<u64>, comm: Option<&str>) -> String {
    match (pid, comm) {
        (Some(p), Some(c)) => format!("pid {p}, {c}"),
        (Some(p), None) => format!("pid {p}"),
        (None, Some(c)) => c.to_string(),
        (None, None) => "process unknown".into(),
    }
}

/// Computes the verdict.
pub fn verdict(s: &Snapshot) -> Verdict {
    Verdict(vec![
        LayerVerdict {
            layer: Layer::Hardware,
            status: hardware(s),
        },
        LayerVerdict {
            layer: Layer::KernelModule,
            status: kernel_module(s),
        },
        LayerVerdict {
            layer: Layer::UserSpace,
            status: user_space(s),
        },
        LayerVerdict {
            layer: Layer::Application,
            status: application(s),
        },
    ])
}

/// The driver's lines of this boot that concern the devices as they are now: a line about a
/// device from before that device's most recent probe (the module was reloaded since: a device
/// lost, faulted or hung then is a new device now) is history, and so is a module load error
/// followed by a successful probe. The report keeps the whole log (`dmesg-aigpu.txt`).
fn dmesg_found(s: &Snapshot) -> Vec<(String, Found)> {
    let mut v = Vec::new();
    if let Some(l) = &s.dmesg {
        for f in dmesg::classify(l) {
            v.push((l.source.clone(), f));
        }
    }
    current_instance(v)
}

fn current_instance(v: Vec<(String, Found)>) -> Vec<(String, Found)> {
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
            Event::Fault
            | Event::Hang
            | Event::Lost
            | Event::ResetFailed
            | Event::Reinit
            | Event::OffBus
            | Event::MemError => {
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

fn journal_found(s: &Snapshot) -> Vec<(String, Found)> {
    let mut v = Vec::new();
    if let Some(l) = &s.journal {
        for f in dmesg::classify(l) {
            v.push((l.source.clone(), f));
        }
    }
    v
}

/// The device a driver line names (`aigpu aigpu0: ...` → `aigpu0`).
fn dmesg_device(f: &Found) -> Option<String> {
    dmesg::body(&f.line)
        .split_whitespace()
        .nth(1)
        .filter(|d| d.starts_with("aigpu"))
        .map(|d| d.trim_end_matches(':').to_string())
}

/// A device loss the kernel log records: the device, the `engine reset failed` line, and the
/// `device re-initialised` line after it when the device has been power-cycled since (the kernel
/// does that at the next open once no context is left on the lost device).
struct LostInLog<'a> {
    device: String,
    failed: &'a (String, Found),
    reinit: Option<&'a (String, Found)>,
}

/// The most recent loss of each device in the kernel log.
fn losses_in_log(dm: &[(String, Found)]) -> Vec<LostInLog<'_>> {
    let mut out: Vec<LostInLog<'_>> = Vec::new();
    for (i, x) in dm.iter().enumerate() {
        if x.1.event != Event::ResetFailed {
            continue;
        }
        let device = dmesg_device(&x.1).unwrap_or_else(|| "aigpu".into());
        let reinit = dm[i + 1..].iter().find(|(_, f)| {
            f.event == Event::Reinit && dmesg_device(f).unwrap_or_else(|| "aigpu".into()) == device
        });
        out.retain(|l| l.device != device);
        out.push(LostInLog {
            device,
            failed: x,
            reinit,
        });
    }
    out
}

fn device_names(s: &Snapshot) -> Vec<String> {
    s.view.devices.iter().map(|d| d.name.clone()).collect()
}

fn any_device(s: &Snapshot) -> bool {
    !s.view.devices.is_empty()
}

// ---------------------------------------------------------------------------------------------

fn hardware(s: &Snapshot) -> Status {
    if !any_device(s) {
        return Status::NotChecked(if s.ks.module.loaded {
            "no aigpu device to look at (see the kernel module layer)".into()
        } else {
            "the aigpu devices are created by the kernel module, which is not loaded".into()
        });
    }
    let mut out = Vec::new();
    let dm = dmesg_found(s);
    for (src, f) in dm.iter().rev() {
        match f.event {
            Event::OffBus => out.push(finding(
                "the device fell off the bus (its registers read all ones)",
                vec![dmesg_ev(src, f)],
            )),
            Event::MemError => out.push(finding(
                "uncorrectable device memory error",
                vec![dmesg_ev(src, f)],
            )),
            _ => {}
        }
    }
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
            if c.registers
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
            let failed = dm.iter().rev().find(|(_, f)| f.event == Event::ResetFailed);
            let mut e = Vec::new();
            if let Some((src, f)) = failed {
                e.push(dmesg_ev(src, f));
            }
            if let Some(st) = &dfs.status {
                e.push(ev(format!("{}/status", dfs.dir), st.line.clone()));
            }
            out.push(finding(
                format!(
                    "{} is lost: the engine did not come back from a reset (every ioctl fails with ENODEV; the next open after the last context is gone power-cycles it)",
                    d.name
                ),
                e,
            ));
        }
    }
    if out.is_empty() {
        for l in losses_in_log(&dm).iter().rev() {
            let (src, f) = l.failed;
            match l.reinit {
                // Lost, and power-cycled since: it works now, but the work on it then was lost.
                Some((rsrc, r)) => out.push(finding(
                    format!(
                        "{} was lost (an engine reset failed) and has been re-initialised since",
                        l.device
                    ),
                    vec![dmesg_ev(src, f), dmesg_ev(rsrc, r)],
                )),
                None => out.push(finding(
                    "an engine reset failed: the device is lost",
                    vec![dmesg_ev(src, f)],
                )),
            }
        }
    }
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

// ---------------------------------------------------------------------------------------------

fn kernel_module(s: &Snapshot) -> Status {
    let m = &s.ks.module;
    let release = s.uname_r.clone().unwrap_or_else(|| "?".into());
    let mut out = Vec::new();
    let dm = dmesg_found(s);
    if !m.loaded {
        // The most recent load attempt explains best.
        for (src, f) in dm.iter().rev() {
            let e = vec![dmesg_ev(src, f)];
            match &f.event {
                Event::VersionMagic { built, running } => out.push(finding(
                    format!("aigpu.ko built for {built} but running kernel is {running} — version magic mismatch"),
                    e,
                )),
                Event::UnknownSymbol(sym) => out.push(finding(
                    format!("aigpu.ko needs symbol {sym}, which the running kernel {release} does not export — unknown symbol (module built for another kernel or configuration)"),
                    e,
                )),
                Event::SymbolVersion(sym) => out.push(finding(
                    format!("aigpu.ko and the running kernel {release} disagree about the version of symbol {sym} — symbol version mismatch"),
                    e,
                )),
                Event::LoadError => out.push(finding(
                    format!("aigpu.ko refused to load: {}", dmesg::body(&f.line)),
                    e,
                )),
                _ => {}
            }
        }
        match &s.modinfo {
            Ok(mi) => {
                if let (Some(built), Some(run)) = (mi.built_for(), s.uname_r.as_deref()) {
                    if built != run {
                        out.push(finding(
                            format!("aigpu.ko built for {built} but running kernel is {run} — version magic mismatch"),
                            vec![ev(
                                format!("modinfo {}", mi.path),
                                format!("vermagic: {}", mi.get("vermagic").unwrap_or("")),
                            )],
                        ));
                    }
                }
            }
            Err(why) if s.uname_r.is_some() => out.push(finding(
                format!("no usable aigpu.ko for the running kernel {release}: {why}"),
                vec![ev(format!("/lib/modules/{release}"), why.clone())],
            )),
            Err(_) => {}
        }
        let nd = NoKernelDevice::ModuleNotLoaded;
        out.push(finding(
            nd.describe(),
            vec![ev(
                "/sys/module",
                "no aigpu entry (lsmod does not list aigpu)".to_string(),
            )],
        ));
        return Status::Findings(out);
    }
    if let Some(st) = m.initstate.as_deref().filter(|st| *st != "live") {
        out.push(finding(
            format!("aigpu is '{st}': its load or unload did not finish"),
            vec![ev("/sys/module/aigpu/initstate", st)],
        ));
    }
    for (src, f) in dm.iter().rev() {
        match f.event {
            Event::Splat => out.push(finding(
                format!("kernel error report in aigpu: {}", dmesg::body(&f.line)),
                vec![dmesg_ev(src, f)],
            )),
            Event::Leak => out.push(finding(
                "aigpu reported resources still accounted at device release",
                vec![dmesg_ev(src, f)],
            )),
            _ => {}
        }
    }
    // Render nodes: none in sysfs, or sysfs has one that /dev lacks.
    let aigpu_render: Vec<&crate::system::DrmEntry> =
        s.ks.drm
            .as_ref()
            .map(|v| {
                v.iter()
                    .filter(|e| e.is_aigpu() && e.name.starts_with("renderD"))
                    .collect()
            })
            .unwrap_or_default();
    if matches!(s.ks.probe, Err(NoKernelDevice::NodeMissing)) && aigpu_render.is_empty() {
        let listing =
            s.ks.drm
                .as_ref()
                .map(|v| {
                    v.iter()
                        .map(|e| format!("{} -> {}", e.name, e.device.as_deref().unwrap_or("?")))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|e| e.describe());
        out.push(finding(
            NoKernelDevice::NodeMissing.describe(),
            vec![ev(
                "/sys/class/drm",
                if listing.is_empty() {
                    "no card or renderD entries".to_string()
                } else {
                    listing
                },
            )],
        ));
    }
    for e in aigpu_render {
        let node = format!("/dev/dri/{}", e.name);
        if !s.host.exists(&node) {
            out.push(finding(
                format!(
                    "{node} does not exist although the kernel registered /sys/class/drm/{} for {}",
                    e.name,
                    e.device.as_deref().unwrap_or("?")
                ),
                vec![ev(
                    "/dev/dri",
                    s.ks.nodes
                        .as_ref()
                        .map(|v| {
                            v.iter()
                                .map(|n| n.name.clone())
                                .collect::<Vec<_>>()
                                .join(" ")
                        })
                        .unwrap_or_else(|e| e.describe()),
                )],
            ));
        }
    }
    if !out.is_empty() {
        return Status::Findings(out);
    }
    let nodes: Vec<String> = s
        .view
        .devices
        .iter()
        .map(|d| format!("{} ({})", d.node.as_deref().unwrap_or("no node"), d.name))
        .collect();
    Status::Ok(format!(
        "aigpu{} loaded for kernel {release}{}; {}",
        m.version
            .as_deref()
            .map(|v| format!(" {v}"))
            .unwrap_or_default(),
        m.initstate
            .as_deref()
            .map(|i| format!(" ({i})"))
            .unwrap_or_default(),
        if nodes.is_empty() {
            "no devices".to_string()
        } else {
            nodes.join(", ")
        }
    ))
}

// ---------------------------------------------------------------------------------------------

fn user_space(s: &Snapshot) -> Status {
    let lib = libumd_uapi();
    let mut out = Vec::new();
    // 1. Node access and UAPI from libumd's own probe.
    match &s.ks.probe {
        Err(NoKernelDevice::PermissionDenied(node)) => {
            let shown = s.host.show(std::path::Path::new(node));
            let ls =
                s.ks.nodes
                    .as_ref()
                    .ok()
                    .and_then(|v| v.iter().find(|n| n.path == shown))
                    .map(|n| n.ls_line())
                    .unwrap_or_else(|| shown.clone());
            out.push(finding(
                NoKernelDevice::PermissionDenied(shown).describe(),
                vec![ev(
                    "ls -l /dev/dri",
                    format!("{ls} (this process: {})", s.identity),
                )],
            ));
        }
        Err(NoKernelDevice::VersionMismatch { kernel }) => out.push(finding(
            uapi_text(lib, *kernel),
            vec![ev(
                "libumd probe (query ioctl)",
                NoKernelDevice::VersionMismatch { kernel: *kernel }.describe(),
            )],
        )),
        _ => {}
    }
    for d in &s.view.devices {
        if let Access::No(why) = &d.access {
            if why.contains("permission denied") && out.is_empty() {
                out.push(finding(why.clone(), vec![ev("libumd probe", why.clone())]));
            }
        }
    }
    // 2. The kernel's UAPI as debugfs and dmesg tell it.
    for d in &s.view.devices {
        if let Some(dfs) = &d.debugfs {
            if let Some(st) = &dfs.status {
                if let Some(k) = st.get("uapi").and_then(parse_ver) {
                    if !compatible(lib, k) {
                        out.push(finding(
                            uapi_text(lib, k),
                            vec![ev(format!("{}/status", dfs.dir), st.line.clone())],
                        ));
                    }
                }
            }
        }
    }
    for (src, f) in dmesg_found(s) {
        if let Event::Probe { uapi: Some(k), .. } = f.event {
            if !compatible(lib, k) {
                out.push(finding(uapi_text(lib, k), vec![dmesg_ev(&src, &f)]));
            }
        }
    }
    // 3. What libumd itself logged.
    for r in s.logs.recs.iter().rev() {
        let text = format!("{} {}", r.msg, r.fields_text());
        if let Some((l, k)) = parse_mismatch(&text) {
            out.push(finding(uapi_text(l, k), vec![log_ev(r)]));
        } else if r.msg.contains("using the simulator backend") {
            out.push(finding(
                format!(
                    "libumd in pid {} ran on the simulator, not the GPU: {}",
                    r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                    r.field_str("reason")
                        .unwrap_or_else(|| "no kernel device".into())
                ),
                vec![log_ev(r)],
            ));
        } else if r
            .code
            .as_deref()
            .is_some_and(|c| c.starts_with("UMD_ERR_INIT_"))
        {
            out.push(finding(
                format!(
                    "libumd in pid {} could not start: {} {}",
                    r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
                    r.code.as_deref().unwrap_or(""),
                    r.msg
                ),
                vec![log_ev(r)],
            ));
        }
    }
    // 4. The environment.
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
    if !out.is_empty() {
        return Status::Findings(out);
    }
    if !any_device(s) {
        return Status::NotChecked("no aigpu device to drive (see the kernel module layer)".into());
    }
    let parts: Vec<String> = s
        .view
        .devices
        .iter()
        .map(|d| {
            let access = match &d.access {
                Access::Ok => "this user can open it",
                Access::Offline => "node access not checked: offline",
                Access::Sim => "simulator",
                Access::No(_) => "libumd cannot open it",
            };
            format!(
                "{} UAPI {} ({access})",
                d.name,
                d.uapi().unwrap_or_else(|| "unknown".into())
            )
        })
        .collect();
    Status::Ok(format!(
        "libumd UAPI {}.{} drives {}",
        lib.0,
        lib.1,
        parts.join(", ")
    ))
}

// ---------------------------------------------------------------------------------------------

/// A fault or hang, from whichever source saw it.
#[derive(Clone, Debug)]
struct Incident {
    kind: &'static str, // "page fault" | "job timeout" | "memory error"
    device: String,
    time: Option<Wall>,
    ctx: Option<String>,
    pid: Option<u64>,
    comm: Option<String>,
    va: Option<String>,
    detail: String,
    evidence: Evidence,
}

impl Incident {
    fn what(&self) -> String {
        match self.kind {
            "page fault" => format!(
                "a page fault at {}",
                self.va.as_deref().unwrap_or("an unknown address")
            ),
            "job timeout" => "a job timeout (GPU hang)".into(),
            k => format!("a {k}"),
        }
    }

    fn place(&self) -> String {
        format!(
            "in context {} ({})",
            self.ctx.as_deref().unwrap_or("?"),
            who(self.pid, self.comm.as_deref())
        )
    }
}

fn crash_incident(device: &str, c: &CrashDump) -> Option<Incident> {
    let kind = match c.kind.as_str() {
        "page_fault" => "page fault",
        "hang" => "job timeout",
        _ => return None,
    };
    Some(Incident {
        kind,
        device: device.to_string(),
        time: c.time,
        ctx: c.ctx.map(|x| x.to_string()),
        pid: c.pid,
        comm: c.comm.clone(),
        va: c.va.clone(),
        detail: match (&c.fault, &c.access) {
            (Some(f), Some(a)) => format!("{f} {a}"),
            _ => String::new(),
        },
        evidence: ev(c.source.clone(), c.evidence.clone()),
    })
}

/// The backend each process ran on, from its `device opened` record (`sim`, `kmd`).
fn backends(s: &Snapshot) -> std::collections::HashMap<Option<u32>, String> {
    let mut m = std::collections::HashMap::new();
    for r in &s.logs.recs {
        if r.msg == "device opened" {
            if let Some(b) = r.field_str("backend") {
                m.insert(r.pid, b);
            }
        }
    }
    m
}

fn pid_of(r: &Rec) -> String {
    r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
}

fn application(s: &Snapshot) -> Status {
    // The kernel's view: crash dumps, then live contexts without a dump, else dmesg lines.
    let mut kernel_side: Vec<Incident> = Vec::new();
    for d in &s.view.devices {
        let Some(dfs) = &d.debugfs else { continue };
        let mut crash_ctx = Vec::new();
        for c in &dfs.crashes {
            if let Some(i) = crash_incident(&d.name, c) {
                crash_ctx.push(i.ctx.clone());
                kernel_side.push(i);
            }
        }
        for c in &dfs.contexts {
            let ctx = c.get("ctx").map(str::to_string);
            if crash_ctx.contains(&ctx) {
                continue;
            }
            let kind = if c.get("fault").is_some() {
                "page fault"
            } else if c.get("hung") == Some("1") {
                "job timeout"
            } else {
                continue;
            };
            kernel_side.push(Incident {
                kind,
                device: d.name.clone(),
                time: None,
                ctx,
                pid: c.num("pid"),
                comm: c.get("comm").map(str::to_string),
                va: c.get("va").map(str::to_string),
                detail: format!("{} {}", c.or_dash("fault"), c.or_dash("access")),
                evidence: ev(format!("{}/contexts", dfs.dir), c.line.clone()),
            });
        }
    }
    if kernel_side.is_empty() {
        for (src, f) in dmesg_found(s).iter().chain(journal_found(s).iter()) {
            let kind = match f.event {
                Event::Fault => "page fault",
                Event::Hang => "job timeout",
                _ => continue,
            };
            let device = dmesg_device(f).unwrap_or_else(|| "aigpu".into());
            kernel_side.push(Incident {
                kind,
                device,
                time: None,
                ctx: dmesg::loose(&f.line, &["ctx", "context"]),
                pid: dmesg::loose(&f.line, &["pid"]).and_then(|p| p.parse().ok()),
                comm: dmesg::loose(&f.line, &["comm"]),
                va: dmesg::loose(&f.line, &["va", "at", "address"]),
                detail: String::new(),
                evidence: dmesg_ev(src, f),
            });
        }
    }
    // libumd's view, per process: faults and hangs it logged, and device losses.
    let back = backends(s);
    let is_sim = |r: &Rec| back.get(&r.pid).is_some_and(|b| b == "sim");
    let log_inc = umdlog::analyze::incidents(&s.logs);
    let log_incident = |k: &str, r: &Rec, ctx: Option<u64>| -> Option<Incident> {
        let kind = match k {
            "GPU fault" => "page fault",
            "job timeout" => "job timeout",
            // libumd's own words for a lost context: "GPU fault '<type>' (<access> access) at VA
            // 0x..." or "it hung the GPU (job timeout)".
            "context lost" if r.msg.contains("GPU fault") => "page fault",
            "context lost" if r.msg.contains("hung the GPU") => "job timeout",
            _ => return None,
        };
        let va = r.field_str("va").or_else(|| {
            r.msg
                .split("at VA ")
                .nth(1)
                .and_then(|t| t.split([',', ' ', ';']).next())
                .map(str::to_string)
        });
        let detail = r.field_str("fault").unwrap_or_else(|| {
            // "GPU fault 'unmapped' (read access)" → "unmapped read"
            let q: Vec<&str> = r.msg.split('\'').collect();
            let access = r
                .msg
                .split(" access)")
                .next()
                .and_then(|t| t.rsplit('(').next())
                .unwrap_or("");
            match q.get(1) {
                Some(t) if kind == "page fault" => format!("{t} {access}").trim().to_string(),
                _ => String::new(),
            }
        });
        Some(Incident {
            kind,
            device: if is_sim(r) {
                "the simulator".into()
            } else {
                "device".into()
            },
            time: Some(r.wall),
            ctx: ctx.map(|c| c.to_string()),
            pid: r.pid.map(u64::from),
            comm: None,
            va,
            detail,
            evidence: log_ev(r),
        })
    };
    let mut out = Vec::new();
    // 1. A device the kernel reports lost: after its most recent fault or hang.
    let lost_dev: Vec<&crate::smi::DeviceView> = s
        .view
        .devices
        .iter()
        .filter(|d| d.state() == "lost")
        .collect();
    // A device lost earlier and re-initialised since (the kernel log says both): the loss is
    // still what happened to the application that was using it.
    let dm = dmesg_found(s);
    let lost_before: Vec<LostInLog<'_>> = if lost_dev.is_empty() {
        losses_in_log(&dm)
    } else {
        Vec::new()
    };
    if !lost_dev.is_empty() || !lost_before.is_empty() {
        let last = kernel_side.iter().max_by_key(|i| i.time);
        // libumd's own record of the loss (a process on the kernel backend), when it came after
        // that fault.
        let lost_log: Option<&Rec> = log_inc
            .iter()
            .rev()
            .find(|(k, r, _)| {
                *k == "device lost"
                    && !is_sim(r)
                    && last.and_then(|i| i.time).is_none_or(|t| r.wall >= t)
            })
            .map(|(_, r, _)| *r);
        let at = lost_log.map(|r| r.wall).or(last.and_then(|i| i.time));
        let mut e = Vec::new();
        for d in &lost_dev {
            if let Some(dfs) = &d.debugfs {
                if let Some(st) = &dfs.status {
                    e.push(ev(format!("{}/status", dfs.dir), st.line.clone()));
                }
            }
        }
        for l in &lost_before {
            e.push(dmesg_ev(&l.failed.0, &l.failed.1));
        }
        if let Some(r) = lost_log {
            e.push(log_ev(r));
        }
        if let Some(i) = last {
            e.push(i.evidence.clone());
        }
        let when = at.map(|t| format!(" at {}", t.hms())).unwrap_or_default();
        let since = if lost_before.iter().any(|l| l.reinit.is_some()) {
            " (re-initialised since)"
        } else {
            ""
        };
        out.push(finding(
            match last {
                Some(i) => format!("device lost{when} after {} {}{since}", i.what(), i.place()),
                None => format!("device lost{when} (no fault or hang recorded before it){since}"),
            },
            e,
        ));
    }
    // 2. The kernel's faults and hangs, most recent first.
    let mut sorted: Vec<&Incident> = kernel_side.iter().collect();
    sorted.sort_by_key(|i| std::cmp::Reverse(i.time));
    for i in sorted {
        out.push(incident_finding(i));
    }
    // 3. Without the kernel's view: what libumd logged, most recent first, one device loss per
    //    process (with the fault or hang before it in that process) and one incident per
    //    context.
    //    Processes on the kernel backend first: the simulator's troubles are not the GPU's.
    let mut sim_out = Vec::new();
    if kernel_side.is_empty() {
        let mut seen_lost = std::collections::HashSet::new();
        let mut seen_ctx = std::collections::HashSet::new();
        for (idx, (k, r, ctx)) in log_inc.iter().enumerate().rev() {
            if *k == "device lost" {
                if !seen_lost.insert(r.pid) {
                    continue;
                }
                let before = log_inc[..idx]
                    .iter()
                    .rev()
                    .filter(|(_, x, _)| x.pid == r.pid)
                    .find_map(|(k2, x, c2)| log_incident(k2, x, *c2));
                let who = if is_sim(r) {
                    format!("the simulated device of pid {}", pid_of(r))
                } else {
                    format!("device lost in pid {}", pid_of(r))
                };
                let mut e = vec![log_ev(r)];
                let text = match &before {
                    Some(i) => {
                        e.push(i.evidence.clone());
                        if is_sim(r) {
                            format!(
                                "{who} was lost at {} after {} in context {}",
                                r.wall.hms(),
                                i.what(),
                                i.ctx.as_deref().unwrap_or("?")
                            )
                        } else {
                            format!(
                                "{who} at {} after {} in context {}",
                                r.wall.hms(),
                                i.what(),
                                i.ctx.as_deref().unwrap_or("?")
                            )
                        }
                    }
                    None if is_sim(r) => format!("{who} was lost at {}", r.wall.hms()),
                    None => format!("{who} at {}", r.wall.hms()),
                };
                if is_sim(r) { &mut sim_out } else { &mut out }.push(finding(text, e));
            } else if let Some(i) = log_incident(k, r, *ctx) {
                if seen_ctx.insert((r.pid, i.ctx.clone())) {
                    if is_sim(r) { &mut sim_out } else { &mut out }.push(incident_finding(&i));
                }
            }
        }
    }
    out.append(&mut sim_out);
    // 4. Errors libumd returned to applications: one per process and code, most recent first.
    // ((pid, code), how many, the last record)
    type PerCode<'a> = ((Option<u32>, String), usize, &'a Rec);
    let mut codes: Vec<PerCode> = Vec::new();
    for r in s.logs.recs.iter() {
        if !umdlog::analyze::is_error(r) || r.msg.contains("simulator") {
            continue;
        }
        let Some(code) = r.code.as_deref() else {
            continue;
        };
        if code.starts_with("UMD_ERR_INIT_")
            || code == "UMD_ERR_DEVICE_LOST"
            || code == "UMD_ERR_CTX_LOST"
        {
            continue;
        }
        let key = (r.pid, code.to_string());
        match codes.iter_mut().find(|(k, _, _)| *k == key) {
            Some(x) => {
                x.1 += 1;
                x.2 = r;
            }
            None => codes.push((key, 1, r)),
        }
    }
    codes.sort_by_key(|(_, _, r)| std::cmp::Reverse(r.wall));
    for ((_, code), n, r) in codes {
        out.push(finding(
            format!(
                "libumd returned {code} to pid {}{}{}: {}",
                pid_of(r),
                r.function
                    .as_deref()
                    .map(|f| format!(" in {f}"))
                    .unwrap_or_default(),
                if n > 1 {
                    format!(" ({n} times, the last at {})", r.wall.hms())
                } else {
                    String::new()
                },
                r.msg
            ),
            vec![log_ev(r)],
        ));
    }
    if !out.is_empty() {
        return Status::Findings(out);
    }
    if !any_device(s) && s.logs.recs.is_empty() {
        return Status::NotChecked("no aigpu device and no libumd log".into());
    }
    let mut seen = Vec::new();
    if !s.ks.debugfs.devices().is_empty() {
        seen.push("debugfs contexts and crash dumps".to_string());
    }
    if s.dmesg.is_some() {
        seen.push("dmesg".into());
    }
    if !s.logs.files.is_empty() {
        seen.push(format!(
            "{} libumd log file{}",
            s.logs.files.len(),
            if s.logs.files.len() == 1 { "" } else { "s" }
        ));
    }
    Status::Ok(format!(
        "no faults, hangs or errors in {}",
        if seen.is_empty() {
            "anything readable".to_string()
        } else {
            seen.join(", ")
        }
    ))
}

fn incident_finding(i: &Incident) -> Finding {
    let when = i
        .time
        .map(|t| format!(" at {}", t.human()))
        .unwrap_or_default();
    let text = match i.kind {
        "page fault" => format!(
            "{} {} on {}{when}{} — the context was banned; other contexts keep running",
            i.what(),
            i.place(),
            i.device,
            if i.detail.trim().is_empty() || i.detail.trim() == "- -" {
                String::new()
            } else {
                format!(" ({})", i.detail.trim())
            }
        ),
        _ => format!(
            "{} {} on {}{when} — the engine was reset and the context banned",
            i.what(),
            i.place(),
            i.device
        ),
    };
    finding(text, vec![i.evidence.clone()])
}

// ---------------------------------------------------------------------------------------------

/// The verdict for people: one line per layer (OK or the first finding), its evidence lines
/// indented below.
pub fn render_text(v: &Verdict) -> String {
    let mut out =
        String::from("verdict (bottom up: the first finding of each layer, with its evidence):\n");
    for l in &v.0 {
        match &l.status {
            Status::Ok(basis) => out += &format!("  {}: OK — {basis}\n", l.layer.name()),
            Status::NotChecked(why) => {
                out += &format!("  {}: not checked — {why}\n", l.layer.name())
            }
            Status::Findings(fs) => {
                if let Some(f) = fs.first() {
                    out += &format!("  {}: {}\n", l.layer.name(), f.text);
                    for e in &f.evidence {
                        out += &format!("    evidence ({}): {}\n", e.source, e.line);
                    }
                    if fs.len() > 1 {
                        out += &format!(
                            "    ({} more finding{}: see \"all findings\" in summary.txt)\n",
                            fs.len() - 1,
                            if fs.len() == 2 { "" } else { "s" }
                        );
                    }
                }
            }
        }
    }
    out
}

/// Every finding of every layer (summary.txt).
pub fn render_all(v: &Verdict) -> String {
    let mut out = String::new();
    for l in &v.0 {
        match &l.status {
            Status::Ok(b) => out += &format!("{}: OK — {b}\n", l.layer.name()),
            Status::NotChecked(w) => out += &format!("{}: not checked — {w}\n", l.layer.name()),
            Status::Findings(fs) => {
                for (i, f) in fs.iter().enumerate() {
                    out += &format!(
                        "{}{}: {}\n",
                        l.layer.name(),
                        if i == 0 { "" } else { " (also)" },
                        f.text
                    );
                    for e in &f.evidence {
                        out += &format!("    evidence ({}): {}\n", e.source, e.line);
                    }
                }
            }
        }
    }
    out
}

/// The verdict for machines.
pub fn render_json(v: &Verdict) -> Value {
    Value::from(
        v.0.iter()
            .map(|l| {
                let (status, text, findings) = match &l.status {
                    Status::Ok(b) => ("ok", b.clone(), Vec::new()),
                    Status::NotChecked(w) => ("not_checked", w.clone(), Vec::new()),
                    Status::Findings(fs) => (
                        "finding",
                        fs.first().map(|f| f.text.clone()).unwrap_or_default(),
                        fs.clone(),
                    ),
                };
                json!({
                    "layer": l.layer.name(),
                    "status": status,
                    "text": text,
                    "findings": findings.iter().map(|f| json!({
                        "text": f.text,
                        "evidence": f.evidence.iter().map(|e| json!({"source": e.source, "line": e.line})).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>(),
    )
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
        assert_eq!(
            parse_mismatch("UMD_BACKEND=kmd: kernel aigpu UAPI 1.2 cannot be driven by this libumd (UAPI 1.4, needs kernel 1.3+)."),
            Some(((1, 4, 3), (1, 2)))
        );
        let own = NoKernelDevice::VersionMismatch { kernel: (2, 0) }.describe();
        assert_eq!(
            parse_mismatch(&own),
            Some((libumd_uapi(), (2, 0))),
            "libumd's own sentence parses: {own}"
        );
    }
}
