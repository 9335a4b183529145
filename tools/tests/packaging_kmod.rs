//! packaging/kmod/ stays in step with the module: the modprobe.d file documents every
//! parameter of kmd/aigpu.rs (and no other), and dkms.conf names the module DKMS builds.
//! (Building and installing with DKMS against a kernel tree with Rust DRM is scripts/test-dkms.sh,
//! run by scripts/test-kmd.sh; the guest checks modprobe and the udev rule: tests/guest/init.sh.)

use std::path::Path;

fn repo(p: &str) -> String {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(p);
    std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
}

/// The parameter names of kmd/aigpu.rs's `module!` (`name: type {` lines inside `params:`).
fn module_params() -> Vec<String> {
    let src = repo("kmd/aigpu.rs");
    let start = src.find("    params: {").expect("params in module!");
    src[start..]
        .lines()
        .skip(1)
        .take_while(|l| l != &"    },")
        .filter_map(|l| {
            let t = l.strip_prefix("        ")?;
            if t.starts_with(' ') {
                return None;
            }
            let (name, rest) = t.split_once(':')?;
            rest.trim_end().ends_with('{').then(|| name.to_string())
        })
        .collect()
}

#[test]
fn modprobe_conf_documents_every_parameter() {
    let params = module_params();
    assert_eq!(
        params,
        ["num_devices", "mem_mib", "job_timeout_ms", "hang_debug"]
    );
    let conf = repo("packaging/kmod/aigpu.conf");
    let documented: Vec<String> = conf
        .lines()
        .filter_map(|l| {
            l.strip_prefix("# ")?
                .split_once(" (")
                .map(|(n, _)| n.to_string())
        })
        .filter(|n| !n.contains(' '))
        .collect();
    assert_eq!(documented, params);
    let opts = conf
        .lines()
        .find_map(|l| l.strip_prefix("#options aigpu "))
        .expect("an options line");
    let names: Vec<&str> = opts
        .split(' ')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .collect();
    assert_eq!(names, params);
}

#[test]
fn dkms_conf_builds_kmd_aigpu() {
    let conf = repo("packaging/kmod/dkms.conf");
    for line in [
        "PACKAGE_NAME=\"aigpu\"",
        &format!("PACKAGE_VERSION=\"{}\"", env!("CARGO_PKG_VERSION")),
        "BUILT_MODULE_NAME[0]=\"aigpu\"",
        "BUILT_MODULE_LOCATION[0]=\"kmd/\"",
        "DEST_MODULE_LOCATION[0]=\"/updates/dkms\"",
    ] {
        assert!(conf.lines().any(|l| l == line), "dkms.conf lacks {line}");
    }
    assert!(repo("kmd/Kbuild").contains("obj-m := aigpu.o"));
    let rules = repo("packaging/kmod/70-aigpu.rules");
    let rule: Vec<&str> = rules.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        rule,
        ["SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", KERNELS==\"aigpu[0-9]*|????:??:??.?\", SUBSYSTEMS==\"faux|pci\", DRIVERS==\"faux_driver|aigpu\", GROUP=\"render\", MODE=\"0660\", TAG+=\"uaccess\""]
    );
}
