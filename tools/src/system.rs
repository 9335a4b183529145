//! The machine around the driver: the loaded module (`/sys/module/aigpu`, `/proc/modules`),
//! device nodes with owners and modes, `/sys/class/drm`, the processes holding a node, and the
//! environment variables that steer libumd.
//!
//! The `/proc` and `/sys` reads are kept by hand rather than taken from the procfs crate: every
//! path goes through `Host` so that `--root` can stand a recorded tree for `/` (the fixture
//! machines, a report read on another machine), which procfs' fixed `/proc` does not allow.

use crate::host::{Host, Notes, ReadErr};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// `/sys/module/aigpu` and the `/proc/modules` line.
#[derive(Clone, Debug, Default)]
pub struct ModuleState {
    /// `/sys/module/aigpu` exists.
    pub loaded: bool,
    /// `initstate` (`live`, `coming`, `going`).
    pub initstate: Option<String>,
    /// `version` (when the module publishes one).
    pub version: Option<String>,
    /// `srcversion`.
    pub srcversion: Option<String>,
    /// `taint` flags of the module.
    pub taint: Option<String>,
    /// `refcnt`.
    pub refcnt: Option<String>,
    /// `parameters/*`.
    pub params: Vec<(String, String)>,
    /// The `aigpu` line of `/proc/modules`.
    pub proc_modules: Option<String>,
}

/// Reads the module's sysfs directory and `/proc/modules`.
pub fn module_state(host: &Host, notes: &mut Notes) -> ModuleState {
    let base = "/sys/module/aigpu";
    let mut m = ModuleState {
        loaded: host.exists(base),
        ..ModuleState::default()
    };
    if m.loaded {
        m.initstate = host.read_trim(&format!("{base}/initstate"));
        m.version = host.read_trim(&format!("{base}/version"));
        m.srcversion = host.read_trim(&format!("{base}/srcversion"));
        m.taint = host.read_trim(&format!("{base}/taint"));
        m.refcnt = host.read_trim(&format!("{base}/refcnt"));
        match host.list(&format!("{base}/parameters")) {
            Ok(names) => {
                for n in names {
                    match host.read(&format!("{base}/parameters/{n}")) {
                        Ok(v) => m.params.push((n, v.trim().to_string())),
                        Err(e) => {
                            notes.add(format!("{base}/parameters/{n}"), e.describe());
                        }
                    }
                }
            }
            Err(ReadErr::Missing) => {}
            Err(e) => notes.add(format!("{base}/parameters"), e.describe()),
        }
    }
    match host.read("/proc/modules") {
        Ok(t) => {
            m.proc_modules = t
                .lines()
                .find(|l| l.split_whitespace().next() == Some("aigpu"))
                .map(str::to_string)
        }
        Err(e) => notes.add("/proc/modules", e.describe()),
    }
    m
}

/// `/proc/modules` formatted like `lsmod`.
pub fn lsmod(text: &str) -> String {
    let mut out = format!("{:<24}{:>8}  Used by\n", "Module", "Size");
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 {
            continue;
        }
        let users = f[3].trim_end_matches(',').trim_matches('-');
        let users = users.trim_end_matches(',');
        out += &format!("{:<24}{:>8}  {}", f[0], f[1], f[2]);
        if !users.is_empty() {
            out += &format!(" {users}");
        }
        out.push('\n');
    }
    out
}

/// A file in `/dev/dri`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Machine path.
    pub path: String,
    /// File name.
    pub name: String,
    /// `c` (character device), `-`, `l`, `d`, `?`.
    pub kind: char,
    /// Device number of a character device.
    pub rdev: Option<(u64, u64)>,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Group gid.
    pub gid: u32,
    /// Owner name (or the number).
    pub owner: String,
    /// Group name (or the number).
    pub group: String,
}

impl Node {
    /// `crw-rw---- root:render 226,128 /dev/dri/renderD128`.
    pub fn ls_line(&self) -> String {
        let dev = self
            .rdev
            .map(|(a, b)| format!(" {a},{b}"))
            .unwrap_or_default();
        format!(
            "{} {}:{}{} {}",
            mode_string(self.kind, self.mode),
            self.owner,
            self.group,
            dev,
            self.path
        )
    }
}

/// `crw-rw----`.
pub fn mode_string(kind: char, mode: u32) -> String {
    let mut s = String::new();
    s.push(kind);
    for shift in [6, 3, 0] {
        let b = (mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// Names of users and groups from the machine's `/etc/passwd` and `/etc/group`.
#[derive(Clone, Debug, Default)]
pub struct Ids {
    users: Vec<(u32, String)>,
    groups: Vec<(u32, String, Vec<String>)>,
}

impl Ids {
    /// Reads `/etc/passwd` and `/etc/group` below the root (missing files: numbers are shown).
    pub fn read(host: &Host) -> Ids {
        let mut ids = Ids::default();
        if let Ok(t) = host.read("/etc/passwd") {
            for l in t.lines() {
                let f: Vec<&str> = l.split(':').collect();
                if let (Some(n), Some(Ok(id))) = (f.first(), f.get(2).map(|s| s.parse())) {
                    ids.users.push((id, n.to_string()));
                }
            }
        }
        if let Ok(t) = host.read("/etc/group") {
            for l in t.lines() {
                let f: Vec<&str> = l.split(':').collect();
                if let (Some(n), Some(Ok(id))) = (f.first(), f.get(2).map(|s| s.parse())) {
                    let members = f
                        .get(3)
                        .map(|m| {
                            m.split(',')
                                .filter(|s| !s.is_empty())
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    ids.groups.push((id, n.to_string(), members));
                }
            }
        }
        ids
    }

    /// User name of `uid`, or the number.
    pub fn user(&self, uid: u32) -> String {
        self.users
            .iter()
            .find(|(i, _)| *i == uid)
            .map(|(_, n)| n.clone())
            .unwrap_or_else(|| uid.to_string())
    }

    /// Group name of `gid`, or the number.
    pub fn group(&self, gid: u32) -> String {
        self.groups
            .iter()
            .find(|(i, _, _)| *i == gid)
            .map(|(_, n, _)| n.clone())
            .unwrap_or_else(|| gid.to_string())
    }
}

/// The files of `/dev/dri`.
pub fn dev_nodes(host: &Host, ids: &Ids) -> Result<Vec<Node>, ReadErr> {
    let names = host.list("/dev/dri")?;
    let mut out = Vec::new();
    for name in names {
        let abs = format!("/dev/dri/{name}");
        let Ok(md) = std::fs::symlink_metadata(host.path(&abs)) else {
            continue;
        };
        let ft = md.file_type();
        let kind = if ft.is_char_device() {
            'c'
        } else if ft.is_symlink() {
            'l'
        } else if ft.is_dir() {
            'd'
        } else if ft.is_file() {
            '-'
        } else {
            '?'
        };
        let rdev = (kind == 'c').then(|| {
            let r = md.rdev();
            (
                ((r >> 8) & 0xfff) | ((r >> 32) & !0xfff),
                (r & 0xff) | ((r >> 12) & !0xff),
            )
        });
        out.push(Node {
            path: abs,
            name,
            kind,
            rdev,
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            owner: ids.user(md.uid()),
            group: ids.group(md.gid()),
        });
    }
    Ok(out)
}

/// An entry of `/sys/class/drm` (`card0`, `renderD128`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrmEntry {
    /// `renderD128`.
    pub name: String,
    /// The device it belongs to (`aigpu0`), from its `device` link.
    pub device: Option<String>,
    /// The `device` link's target as read.
    pub link: Option<String>,
    /// `dev` (`226:128`).
    pub dev: Option<String>,
    /// The bus driver its device is bound to (`device/driver`'s last component: `aigpu` for a
    /// PCI function aigpu.ko drives, `faux_driver` for a faux device).
    pub driver: Option<String>,
}

impl DrmEntry {
    /// True when the device is an aigpu one: a bus device bound to the driver aigpu.ko
    /// registers (a PCI function, docs/kmd.md "Attachments": its device is named by its PCI
    /// address), or a faux device aigpu.ko created (`aigpuN`; the faux bus's one driver is not
    /// aigpu's).
    pub fn is_aigpu(&self) -> bool {
        self.driver.as_deref() == Some(uapi::version::DRIVER_NAME)
            || self
                .device
                .as_deref()
                .is_some_and(|d| d.starts_with(uapi::version::DRIVER_NAME))
    }
}

/// The `card*` and `renderD*` entries of `/sys/class/drm`.
pub fn drm_class(host: &Host) -> Result<Vec<DrmEntry>, ReadErr> {
    let names = host.list("/sys/class/drm")?;
    let mut out = Vec::new();
    for name in names {
        if !(name.starts_with("card") || name.starts_with("renderD")) || name.contains('-') {
            continue;
        }
        let base = format!("/sys/class/drm/{name}");
        let link = std::fs::read_link(host.path(&format!("{base}/device")))
            .ok()
            .map(|p| p.display().to_string());
        let device = link.as_ref().and_then(|l| {
            std::path::Path::new(l)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        });
        let driver = std::fs::read_link(host.path(&format!("{base}/device/driver")))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        out.push(DrmEntry {
            dev: host.read_trim(&format!("{base}/dev")),
            driver,
            name,
            device,
            link,
        });
    }
    Ok(out)
}

/// A process with an open file on `/dev/dri`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Process id.
    pub pid: u64,
    /// Command name.
    pub comm: String,
    /// Real uid.
    pub uid: Option<u32>,
    /// File descriptor.
    pub fd: String,
    /// What it points at.
    pub target: String,
}

/// Processes holding a `/dev/dri` node (from `/proc/<pid>/fd`); processes whose descriptors
/// cannot be read are counted in a note.
pub fn holders(host: &Host, notes: &mut Notes) -> Vec<Holder> {
    let pids = match host.list("/proc") {
        Ok(v) => v,
        Err(e) => {
            notes.add("/proc", e.describe());
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    let mut denied = 0;
    for p in pids {
        let Ok(pid) = p.parse::<u64>() else { continue };
        let fds = match host.list(&format!("/proc/{p}/fd")) {
            Ok(v) => v,
            Err(ReadErr::Denied) => {
                denied += 1;
                continue;
            }
            Err(_) => continue,
        };
        for fd in fds {
            let Ok(t) = std::fs::read_link(host.path(&format!("/proc/{p}/fd/{fd}"))) else {
                continue;
            };
            let target = t.display().to_string();
            if !target.starts_with("/dev/dri/") {
                continue;
            }
            let comm = host
                .read_trim(&format!("/proc/{p}/comm"))
                .unwrap_or_else(|| "?".into());
            let uid = host.read(&format!("/proc/{p}/status")).ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|u| u.split_whitespace().next().and_then(|x| x.parse().ok()))
            });
            out.push(Holder {
                pid,
                comm,
                uid,
                fd,
                target,
            });
        }
    }
    if denied > 0 {
        notes.add(
            "/proc/<pid>/fd",
            format!(
                "permission denied for {denied} process{} (run as root to see every process holding the device)",
                if denied == 1 { "" } else { "es" }
            ),
        );
    }
    out
}

/// The variables that steer libumd (and where its log goes), from `vars`.
pub fn umd_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = vars
        .filter(|(k, _)| {
            k.starts_with("UMD_")
                || k.starts_with("AIGPU_")
                || matches!(
                    k.as_str(),
                    "LD_LIBRARY_PATH" | "LD_PRELOAD" | "XDG_STATE_HOME" | "HOME"
                )
        })
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sysfs tree like the guest's: renderD128 on the PCI function aigpu drives, renderD129 on
    /// aigpu's faux device, renderD130 on a PCI function another driver drives.
    #[test]
    fn aigpu_nodes_are_found_on_pci_and_faux() {
        use std::os::unix::fs::symlink;
        let root = std::env::temp_dir().join(format!("tools-drm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mk = |d: &str| std::fs::create_dir_all(root.join(d)).unwrap();
        for d in [
            "sys/bus/pci/drivers/aigpu",
            "sys/bus/pci/drivers/virtio-pci",
            "sys/bus/faux/drivers/faux_driver",
            "sys/devices/pci0000:00/0000:00:04.0/drm/renderD128",
            "sys/devices/pci0000:00/0000:00:05.0/drm/renderD130",
            "sys/devices/faux/aigpu1/drm/renderD129",
            "sys/class/drm",
        ] {
            mk(d);
        }
        let link = |to: &str, at: &str| symlink(to, root.join(at)).unwrap();
        for (dev, drv) in [
            ("pci0000:00/0000:00:04.0", "../../../bus/pci/drivers/aigpu"),
            (
                "pci0000:00/0000:00:05.0",
                "../../../bus/pci/drivers/virtio-pci",
            ),
            ("faux/aigpu1", "../../../bus/faux/drivers/faux_driver"),
        ] {
            link(drv, &format!("sys/devices/{dev}/driver"));
        }
        for (node, dev) in [
            ("renderD128", "pci0000:00/0000:00:04.0"),
            ("renderD129", "faux/aigpu1"),
            ("renderD130", "pci0000:00/0000:00:05.0"),
        ] {
            link(
                &format!("../../devices/{dev}/drm/{node}"),
                &format!("sys/class/drm/{node}"),
            );
            link(
                &format!("../../../{}", dev.rsplit('/').next().unwrap()),
                &format!("sys/devices/{dev}/drm/{node}/device"),
            );
        }
        let host = Host {
            root: root.clone(),
            offline: true,
            ..Host::default()
        };
        let found: Vec<(String, bool, Option<String>)> = drm_class(&host)
            .unwrap()
            .into_iter()
            .map(|e| (e.name.clone(), e.is_aigpu(), e.driver))
            .collect();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            found,
            [
                ("renderD128".to_string(), true, Some("aigpu".to_string())),
                (
                    "renderD129".to_string(),
                    true,
                    Some("faux_driver".to_string())
                ),
                (
                    "renderD130".to_string(),
                    false,
                    Some("virtio-pci".to_string())
                ),
            ]
        );
    }

    #[test]
    fn modes_and_lsmod() {
        assert_eq!(mode_string('c', 0o660), "crw-rw----");
        assert_eq!(mode_string('-', 0o644), "-rw-r--r--");
        assert_eq!(
            lsmod("aigpu 45056 0 - Live 0x0000000000000000 (O)\ndrm 700416 2 aigpu,drm_kms_helper, Live 0x0\n"),
            "Module                      Size  Used by\naigpu                      45056  0\ndrm                       700416  2 aigpu,drm_kms_helper\n"
        );
    }
}
