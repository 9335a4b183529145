//! The simulator devices other processes publish (docs/debugfs.md, "Published simulator
//! devices"; the writer is `umd::backend::sim::publish`): `/tmp/aigpu-sim-<uid>/<pid>/dev<N>/`
//! and the same below `$UMD_SIM_DIR`. Each directory holds the debugfs texts, read with the
//! kernel's parsers (`debugfs::read_views`), and an `owner` file. A directory is a live device
//! only while its pid runs with the start time the owner file names; otherwise it is stale (the
//! process exited or was killed before it could remove it) and listed apart, never as a device.
//! Read-only: nothing here writes or removes anything.

use crate::debugfs::{self, DebugfsDevice};
use crate::host::{Host, Notes, ReadErr};
use umd::backend::sim::publish::{self, Owner};

/// A live published device.
#[derive(Clone, Debug)]
pub struct SimDevice {
    /// Its owner.
    pub owner: Owner,
    /// The views (`dir` is the machine path of `dev<N>`).
    pub views: DebugfsDevice,
}

/// A directory left by a process that is gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// Machine path of `dev<N>`.
    pub dir: String,
    /// The pid it names.
    pub pid: u32,
    /// Its command name, when the owner file says.
    pub comm: Option<String>,
    /// `exited` (no such process) or `pid_reused` (another process has the pid now).
    pub why: &'static str,
}

/// What the published directories hold.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// Live devices, by directory.
    pub live: Vec<SimDevice>,
    /// Stale directories.
    pub stale: Vec<Stale>,
}

/// The base directories looked in: `/tmp`, then `$UMD_SIM_DIR` when set to another absolute
/// path.
pub fn bases(sim_dir: Option<&str>) -> Vec<String> {
    let mut v = vec!["/tmp".to_string()];
    if let Some(d) = sim_dir.filter(|d| d.starts_with('/')) {
        let d = d.trim_end_matches('/').to_string();
        if !d.is_empty() && !v.contains(&d) {
            v.push(d);
        }
    }
    v
}

/// Reads every published device below `bases`.
pub fn scan(host: &Host, bases: &[String], notes: &mut Notes) -> Scan {
    let mut out = Scan::default();
    for base in bases {
        let Ok(entries) = host.list(base) else {
            continue;
        };
        for user in entries.iter().filter(|e| is_user_dir(e)) {
            let udir = format!("{base}/{user}");
            if is_symlink(host, &udir) {
                continue;
            }
            let pids = match host.list(&udir) {
                Ok(p) => p,
                Err(why) => {
                    notes.add(&udir, unreadable(&why));
                    continue;
                }
            };
            for pid in pids.iter().filter_map(|p| p.parse::<u32>().ok()) {
                let pdir = format!("{udir}/{pid}");
                let devs = match host.list(&pdir) {
                    Ok(d) => d,
                    Err(ReadErr::Missing) => continue,
                    Err(why) => {
                        notes.add(&pdir, unreadable(&why));
                        continue;
                    }
                };
                for dev in devs.iter().filter(|d| is_dev_dir(d)) {
                    read_dev(host, &format!("{pdir}/{dev}"), pid, &mut out, notes);
                }
            }
        }
    }
    out
}

fn is_user_dir(name: &str) -> bool {
    name.strip_prefix("aigpu-sim-")
        .is_some_and(|u| !u.is_empty() && u.bytes().all(|b| b.is_ascii_digit()))
}

fn is_dev_dir(name: &str) -> bool {
    name.strip_prefix("dev")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_symlink(host: &Host, abs: &str) -> bool {
    std::fs::symlink_metadata(host.path(abs)).is_ok_and(|m| m.file_type().is_symlink())
}

fn unreadable(why: &ReadErr) -> String {
    format!(
        "{} (another user's published simulator devices: run as root to see them)",
        why.describe()
    )
}

fn read_dev(host: &Host, dir: &str, pid: u32, out: &mut Scan, notes: &mut Notes) {
    let owner_text = match host.read(&format!("{dir}/owner")) {
        Ok(t) => t,
        // Being created (the owner file is written after the views) or being removed.
        Err(ReadErr::Missing) => return,
        Err(why) => {
            notes.add(format!("{dir}/owner"), unreadable(&why));
            return;
        }
    };
    let Some(owner) = Owner::parse(&owner_text).filter(|o| o.pid == pid) else {
        notes.add(
            format!("{dir}/owner"),
            "not an owner line of this directory's pid (docs/debugfs.md, \"Published simulator devices\")",
        );
        return;
    };
    let now = host
        .read(&format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| publish::running_start_time(&s));
    let why = match now {
        None => Some("exited"),
        Some(t) if t != owner.start_time => Some("pid_reused"),
        Some(_) => None,
    };
    if let Some(why) = why {
        out.stale.push(Stale {
            dir: dir.to_string(),
            pid,
            comm: Some(owner.comm),
            why,
        });
        return;
    }
    let name = host
        .read(&format!("{dir}/name"))
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|_| format!("aigpu dev={}", owner.device));
    let mut views = debugfs::read_views(host, dir, name, notes);
    views.files.push(("owner".into(), owner_text));
    out.live.push(SimDevice { owner, views });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(is_user_dir("aigpu-sim-1000"));
        assert!(!is_user_dir("aigpu-sim-"));
        assert!(!is_user_dir("aigpu-sim-x"));
        assert!(is_dev_dir("dev0") && !is_dev_dir("dev") && !is_dev_dir("devx"));
        assert_eq!(bases(Some("/srv/sim/")), vec!["/tmp", "/srv/sim"]);
        assert_eq!(bases(Some("/tmp")), vec!["/tmp"]);
        assert_eq!(bases(Some("rel")), vec!["/tmp"]);
    }
}
