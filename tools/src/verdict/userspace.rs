//! The user-space driver (libumd): can it open the node, does it speak the kernel's UAPI, which
//! backend did each process get and why.

use super::{
    any_device, compatible, dmesg_ev, dmesg_found, ev, finding, libumd_uapi, log_ev, parse_ver,
    pid64, uapi_text, Facts, Finding, Status,
};
use crate::dmesg::Event;
use crate::smi::Access;
use crate::triage::Snapshot;
use crate::umdlog::facts::{Fact, Process};
use umd::backend::select::NoKernelDevice;

fn permission_facts(pid: Option<u64>) -> Facts {
    Facts {
        kind: "permission_denied",
        pid,
        fix: "add the service's user to the group of the render node (usually 'render'), or install the udev rule of packaging/kmod".into(),
        ..Facts::default()
    }
}

fn mismatch_facts(pid: Option<u64>) -> Facts {
    Facts {
        kind: "version_mismatch",
        pid,
        fix: "install the libumd and aigpu.ko of one release (umd-smi shows both UAPI versions)"
            .into(),
        ..Facts::default()
    }
}

/// What a `backend_why` name means, in the words libumd's probe uses.
fn why_text(why: &str, node: &str) -> String {
    match why {
        "module_not_loaded" => NoKernelDevice::ModuleNotLoaded.describe(),
        "node_missing" => NoKernelDevice::NodeMissing.describe(),
        "permission_denied" => NoKernelDevice::PermissionDenied(node.to_string()).describe(),
        "lost" => NoKernelDevice::Lost(node.to_string()).describe(),
        "bad_config" => "a libumd variable has a value it does not accept".into(),
        other => format!("no usable kernel device ({other})"),
    }
}

/// One finding per process whose log says it did not get the kernel device it looked for.
fn from_logs(s: &Snapshot, procs: &[Process<'_>]) -> Vec<Finding> {
    let lib = libumd_uapi();
    let mut out = Vec::new();
    for p in procs.iter().rev() {
        let pid = pid64(p);
        let pid_s = p.pid.map(|x| x.to_string()).unwrap_or_else(|| "?".into());
        // A UAPI mismatch found at open (the record names both versions).
        if let Some((kernel, r)) = p.facts.iter().find_map(|(f, r)| match f {
            Fact::VersionMismatch { kernel_uapi, .. } => parse_ver(kernel_uapi).map(|k| (k, *r)),
            _ => None,
        }) {
            out.push(finding(uapi_text(lib, kernel), vec![log_ev(r)]).with(mismatch_facts(pid)));
            continue;
        }
        let Some((
            Fact::Start {
                backend,
                backend_src,
                why,
                node,
                kernel_uapi,
                libumd,
                ..
            },
            r,
        )) = p.start()
        else {
            continue;
        };
        if why.is_empty() {
            continue;
        }
        let mut e = vec![log_ev(r)];
        // The call that failed for it.
        if let Some((_, fr)) = p.facts.iter().find(
            |(f, _)| matches!(f, Fact::ApiError { code, .. } if code.starts_with("UMD_ERR_INIT_")),
        ) {
            e.push(log_ev(fr));
        }
        let (text, facts) = match why.as_str() {
            "version_mismatch" => {
                let k = parse_ver(kernel_uapi).unwrap_or((0, 0));
                (uapi_text(libumd.unwrap_or(lib), k), mismatch_facts(pid))
            }
            "permission_denied" => (why_text(why, node), permission_facts(pid)),
            _ => (
                why_text(why, node),
                Facts {
                    kind: if why == "module_not_loaded" {
                        "module_not_loaded"
                    } else {
                        "no_kernel_device"
                    },
                    pid,
                    fix: "see the kernel module layer".into(),
                    ..Facts::default()
                },
            ),
        };
        let text = if backend == "sim" {
            format!(
                "libumd in pid {pid_s} ran on the simulator, not the GPU (UMD_BACKEND={}): {text}",
                if backend_src == "environment" {
                    "from the environment"
                } else {
                    "auto"
                }
            )
        } else {
            format!("libumd in pid {pid_s} could not open the kernel device: {text}")
        };
        // A kernel device the triage itself can use now makes a process's old failure history;
        // say it all the same (it is what that process saw).
        let _ = s;
        out.push(finding(text, e).with(facts));
    }
    out
}

/// The user-space driver layer: node access and UAPI (libumd's probe, debugfs, dmesg, the
/// processes' logs), and the backend each process got.
pub(super) fn judge(s: &Snapshot, procs: &[Process<'_>]) -> Status {
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
            out.push(
                finding(
                    NoKernelDevice::PermissionDenied(shown).describe(),
                    vec![ev(
                        "ls -l /dev/dri",
                        format!("{ls} (this process: {})", s.identity),
                    )],
                )
                .with(permission_facts(None)),
            );
        }
        Err(NoKernelDevice::VersionMismatch { kernel }) => out.push(
            finding(
                uapi_text(lib, *kernel),
                vec![ev(
                    "libumd probe (query ioctl)",
                    NoKernelDevice::VersionMismatch { kernel: *kernel }.describe(),
                )],
            )
            .with(mismatch_facts(None)),
        ),
        _ => {}
    }
    // 2. The kernel's UAPI as debugfs and dmesg tell it.
    for d in &s.view.devices {
        if let Some(dfs) = &d.debugfs {
            if let Some(st) = &dfs.status {
                if let Some(k) = st.get("uapi").and_then(parse_ver) {
                    if !compatible(lib, k) {
                        out.push(
                            finding(
                                uapi_text(lib, k),
                                vec![ev(format!("{}/status", dfs.dir), st.line.clone())],
                            )
                            .with(mismatch_facts(None)),
                        );
                    }
                }
            }
        }
    }
    for (src, f) in dmesg_found(s) {
        if let Event::Probe { uapi: Some(k), .. } = f.event {
            if !compatible(lib, k) {
                out.push(
                    finding(uapi_text(lib, k), vec![dmesg_ev(&src, &f)]).with(mismatch_facts(None)),
                );
            }
        }
    }
    // 3. What each process's log says about the backend it got and why.
    out.extend(from_logs(s, procs));
    if !out.is_empty() {
        return Status::Findings(out);
    }
    if !any_device(s) {
        let sims: Vec<String> = procs
            .iter()
            .filter(|p| p.backend() == Some("sim"))
            .filter_map(|p| p.pid.map(|x| x.to_string()))
            .collect();
        if !sims.is_empty() {
            return Status::Ok(format!(
                "libumd UAPI {}.{} ran on the simulator in pid {} as asked",
                lib.0,
                lib.1,
                sims.join(", ")
            ));
        }
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
