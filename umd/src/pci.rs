//! The PCI address of a kernel device (docs/kmd.md, "Attachments"): the bus device its render
//! node's DRM device is attached to, read from sysfs the way libdrm reads it.

use std::path::Path;

/// The PCI address (`0000:00:04.0`) of the function the DRM device of `node` (a
/// `/dev/dri/renderD*` path) is attached to; `None` when that device is not on PCI (a faux
/// device) or `node` names no DRM device.
pub fn pci_address(node: &Path) -> Option<String> {
    pci_address_in(Path::new("/sys"), node.file_name()?.to_str()?)
}

/// [`pci_address`] for DRM node `name` (`renderD128`) under the sysfs root `sys`:
/// `<sys>/class/drm/<name>/device`, when its `subsystem` is `pci`, names the function.
pub fn pci_address_in(sys: &Path, name: &str) -> Option<String> {
    let dev = std::fs::canonicalize(sys.join("class/drm").join(name).join("device")).ok()?;
    let subsystem = std::fs::canonicalize(dev.join("subsystem")).ok()?;
    if subsystem.file_name()? != "pci" {
        return None;
    }
    dev.file_name()?.to_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree with render node 226:128 on a PCI function and 226:129 on a faux device.
    fn sysfs(name: &str) -> std::path::PathBuf {
        let r = std::env::temp_dir().join(format!("umd-pci-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&r);
        let r = r.as_path();
        for d in [
            "devices/pci0000:00/0000:00:04.0/drm/renderD128",
            "devices/faux/aigpu1/drm/renderD129",
            "bus/pci",
            "bus/faux",
            "class/drm",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        symlink(
            "../../../bus/pci",
            r.join("devices/pci0000:00/0000:00:04.0/subsystem"),
        )
        .unwrap();
        symlink("../../../bus/faux", r.join("devices/faux/aigpu1/subsystem")).unwrap();
        symlink(
            "../../devices/pci0000:00/0000:00:04.0/drm/renderD128",
            r.join("class/drm/renderD128"),
        )
        .unwrap();
        symlink(
            "../../devices/faux/aigpu1/drm/renderD129",
            r.join("class/drm/renderD129"),
        )
        .unwrap();
        symlink(
            "../../../0000:00:04.0",
            r.join("devices/pci0000:00/0000:00:04.0/drm/renderD128/device"),
        )
        .unwrap();
        symlink(
            "../../../aigpu1",
            r.join("devices/faux/aigpu1/drm/renderD129/device"),
        )
        .unwrap();
        r.to_path_buf()
    }

    #[test]
    fn a_node_on_a_pci_function_has_its_address() {
        let r = sysfs("pci");
        assert_eq!(
            pci_address_in(&r, "renderD128").as_deref(),
            Some("0000:00:04.0")
        );
    }

    #[test]
    fn a_node_on_a_faux_device_has_none() {
        let r = sysfs("faux");
        assert_eq!(pci_address_in(&r, "renderD129"), None);
    }

    #[test]
    fn an_unknown_node_has_none() {
        let r = sysfs("none");
        assert_eq!(pci_address_in(&r, "renderD130"), None);
        assert_eq!(pci_address(Path::new("sim:0")), None);
    }
}
