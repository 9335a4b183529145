//! The kernel module: loaded or why not (version magic, unknown symbols), its own error
//! reports, its render nodes.

use super::{
    all_chose_sim, dmesg_ev, dmesg_found, ev, finding, live_sims_by_choice, log_ev, pid64,
    sim_devices, Facts, Status,
};
use crate::dmesg::{self, Event};
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};
use umd::backend::select::NoKernelDevice;

/// The kernel-module layer. Not judged for processes that chose the simulator themselves
/// (their log says so, or the owner file of the device they publish): a missing module is no
/// finding for them.
pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
    let m = &s.ks.module;
    let live = live_sims_by_choice(s);
    let logged = procs.iter().any(|p| p.start().is_some());
    if !m.loaded && !logged && !live.is_empty() {
        let pids: Vec<String> = live.iter().map(u32::to_string).collect();
        return Status::NotChecked(format!(
            "not involved: pid {} runs on the simulator it asked for (UMD_BACKEND=sim: backend_why=requested in the owner file of its published device)",
            pids.join(", ")
        ));
    }
    // (`live` is empty when one of them fell back to the simulator.)
    let sims_fine = sim_devices(s).next().is_none() || !live.is_empty();
    if !m.loaded && all_chose_sim(procs) && sims_fine {
        let pids: Vec<String> = procs
            .iter()
            .filter_map(|p| p.pid.map(|x| x.to_string()))
            .collect();
        return Status::NotChecked(format!(
            "not involved: pid {} chose the simulator (UMD_BACKEND=sim in its environment)",
            pids.join(", ")
        ));
    }
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
            Err(why) if s.uname_r.is_some() => out.push(
                finding(
                    format!("no usable aigpu.ko for the running kernel {release}: {why}"),
                    vec![ev(format!("/lib/modules/{release}"), why.clone())],
                )
                .with(Facts {
                    kind: "module_not_installed",
                    fix: format!("install aigpu.ko for {release} (scripts/install-kmod.sh, DKMS: docs/kmd.md)"),
                    ..Facts::default()
                }),
            ),
            Err(_) => {}
        }
        let nd = NoKernelDevice::ModuleNotLoaded;
        // The processes that looked for it and what became of them.
        let mut e = vec![ev(
            "/sys/module",
            "no aigpu entry (lsmod does not list aigpu)".to_string(),
        )];
        let mut pid = None;
        for p in procs {
            if let Some((Fact::Start { why, .. }, r)) = p.start() {
                if why == "module_not_loaded" {
                    e.push(log_ev(r));
                    pid = pid.or(pid64(p));
                }
            }
        }
        // The live simulator devices of processes that fell back to the simulator for it.
        for d in sim_devices(s) {
            let (Some(o), Some(dfs)) = (&d.owner, &d.debugfs) else {
                continue;
            };
            if o.backend_why == nd.name() {
                e.push(ev(format!("{}/owner", dfs.dir), o.to_string().trim_end()));
                pid = pid.or(Some(u64::from(o.pid)));
            }
        }
        out.push(finding(nd.describe(), e).with(Facts {
            kind: "module_not_loaded",
            pid,
            fix: "modprobe aigpu (and check dmesg for why it did not load: docs/kmd.md)".into(),
            ..Facts::default()
        }));
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
