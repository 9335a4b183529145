//! Backend selection and the no-kernel-device diagnosis, against fake /sys and /dev trees.

use std::path::Path;
use umd::backend::kmd::probe_in;
use umd::backend::select::NoKernelDevice;

fn tree() -> tempdir::Dir {
    tempdir::Dir::new()
}

mod tempdir {
    /// A throw-away directory under the test's target tmp dir.
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
                "select-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).expect("mkdir");
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn mk(root: &Path, rel: &str) {
    std::fs::create_dir_all(root.join(rel)).expect("mkdir");
}

#[test]
fn module_not_loaded() {
    let t = tree();
    mk(&t.0, "sys/module/drm");
    mk(&t.0, "dev");
    let e = probe_in(&t.0.join("sys"), &t.0.join("dev")).unwrap_err();
    assert_eq!(e, NoKernelDevice::ModuleNotLoaded);
    assert_eq!(
        e.describe(),
        "kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu')"
    );
    assert_eq!(e.code(), umd::umdResult::UMD_ERR_INIT_BACKEND_UNAVAILABLE);
}

#[test]
fn module_loaded_but_no_node() {
    let t = tree();
    mk(&t.0, "sys/module/aigpu");
    mk(&t.0, "dev");
    std::fs::write(t.0.join("dev/card0"), b"").expect("file");
    let e = probe_in(&t.0.join("sys"), &t.0.join("dev")).unwrap_err();
    assert_eq!(e, NoKernelDevice::NodeMissing);
    assert_eq!(
        e.describe(),
        "module aigpu is loaded but no /dev/dri/renderD* node belongs to it"
    );
}

#[test]
fn a_node_that_is_not_drm_is_skipped() {
    // A regular file named like a render node: DRM_IOCTL_VERSION fails, so it is not ours.
    let t = tree();
    mk(&t.0, "sys/module/aigpu");
    mk(&t.0, "dev");
    std::fs::write(t.0.join("dev/renderD128"), b"").expect("file");
    let e = probe_in(&t.0.join("sys"), &t.0.join("dev")).unwrap_err();
    assert_eq!(e, NoKernelDevice::NodeMissing);
}

#[test]
fn diagnoses_map_to_codes_and_name_both_versions() {
    let e = NoKernelDevice::VersionMismatch { kernel: (2, 0) };
    assert_eq!(e.code(), umd::umdResult::UMD_ERR_INIT_VERSION_MISMATCH);
    assert_eq!(
        e.describe(),
        "kernel aigpu UAPI 2.0 cannot be driven by this libumd (UAPI 1.3, needs kernel 1.0+)"
    );
    let p = NoKernelDevice::PermissionDenied("/dev/dri/renderD128".into());
    assert_eq!(p.code(), umd::umdResult::UMD_ERR_INIT_PERMISSION_DENIED);
    assert_eq!(
        p.describe(),
        "permission denied opening /dev/dri/renderD128 (add the user to the 'render' group)"
    );
}

#[test]
fn a_lost_device_is_named_as_lost_not_missing() {
    let e = NoKernelDevice::Lost("/dev/dri/renderD128".into());
    assert_eq!(e.code(), umd::umdResult::UMD_ERR_DEVICE_LOST);
    assert_eq!(
        e.describe(),
        "/dev/dri/renderD128: the aigpu device is lost (the driver answers ENODEV after a failed reset or a fall off the bus; it works again once no context is left on it (the next open then power-cycles it), or reload the module: rmmod aigpu && modprobe aigpu)"
    );
}
