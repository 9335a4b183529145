//! Pending device coredumps of aigpu devices: `/sys/class/devcoredump/devcd<N>/data`, one per
//! device until it is dismissed (written to) or 5 minutes pass, with the text of the debugfs crash
//! dump of the same event (docs/kmd.md, "Device coredump"). Reading does not dismiss a dump.
//! `data` is root-only: an unreadable one is noted.

use crate::debugfs::{self, CrashDump};
use crate::host::{Host, Notes, ReadErr};

/// The class directory.
pub const DIR: &str = "/sys/class/devcoredump";

/// One pending devcoredump of an aigpu device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDump {
    /// `devcd3`.
    pub name: String,
    /// The device it was filed under (`failing_device`'s last component: `aigpu0`, a PCI
    /// address), when the link is readable.
    pub failing_device: Option<String>,
    /// The dump, parsed as debugfs crash dumps are.
    pub dump: CrashDump,
}

/// The pending aigpu devcoredumps (other drivers' are left out: their text is not an aigpu
/// crash dump).
pub fn scan(host: &Host, notes: &mut Notes) -> Vec<PendingDump> {
    let Ok(mut names) = host.list(DIR) else {
        return Vec::new(); // no devcoredump class: the kernel has none, or nothing is pending
    };
    names.retain(|n| n.starts_with("devcd"));
    names.sort_by(|a, b| crate::host::natural_cmp(a, b));
    let mut out = Vec::new();
    for name in names {
        let data = format!("{DIR}/{name}/data");
        let text = match host.read(&data) {
            Ok(t) => t,
            Err(ReadErr::Missing) => continue, // dismissed meanwhile
            Err(why) => {
                notes.add(
                    data,
                    format!("{} (devcoredumps are root-only)", why.describe()),
                );
                continue;
            }
        };
        if !text.starts_with("aigpu crash dump ") {
            continue;
        }
        let failing_device = std::fs::read_link(host.path(&format!("{DIR}/{name}/failing_device")))
            .ok()
            .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()));
        let dump = debugfs::parse_crash(&name, &data, &text);
        out.push(PendingDump {
            name,
            failing_device,
            dump,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_aigpu_dumps_only() {
        let root = std::env::temp_dir().join(format!("devcd-test-{}", std::process::id()));
        let class = root.join("sys/class/devcoredump");
        for (n, text) in [
            ("devcd1", "aigpu crash dump 4\nkernel=7.3.4 driver=0.1.0 uapi=1.0 device=aigpu0\nkind=hang\nprocess pid=77 comm=train client=2\ncontext ctx=3 queue=1 prio=normal submitted=1 completed=0\nend\n"),
            ("devcd2", "iwlwifi firmware dump\n"),
        ] {
            std::fs::create_dir_all(class.join(n)).unwrap();
            std::fs::write(class.join(n).join("data"), text).unwrap();
        }
        std::os::unix::fs::symlink(
            "../../../devices/faux/aigpu0",
            class.join("devcd1/failing_device"),
        )
        .unwrap();
        let host = Host {
            root: root.clone(),
            offline: true,
            ..Host::default()
        };
        let mut notes = Notes::default();
        let got = scan(&host, &mut notes);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "devcd1");
        assert_eq!(got[0].failing_device.as_deref(), Some("aigpu0"));
        assert_eq!(got[0].dump.number, 4);
        assert_eq!(got[0].dump.kind, "hang");
        assert_eq!(got[0].dump.pid, Some(77));
        assert_eq!(got[0].dump.ctx, Some(3));
        assert!(notes.0.is_empty());
    }
}
