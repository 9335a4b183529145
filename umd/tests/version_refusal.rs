//! libumd refuses a driver whose UAPI it cannot drive, with `UMD_ERR_INIT_VERSION_MISMATCH` and
//! a detail naming both versions (docs/uapi.md, "Versioning"), exercised end to end: the
//! simulator reports the version `UMD_SIM_UAPI` says (its test hook; the guest does the same on
//! aigpu.ko through the debugfs file `inject_uapi_version`), and `tests/c/short_process.c`
//! (mode `open-detail`) opens device 0 as an application would.

#[path = "c_util.rs"]
mod c_util;

use c_util::{compile, libumd, out_dir};
use std::process::Command;

/// The program, compiled once for the tests of this file.
fn program() -> &'static std::path::Path {
    static EXE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let _ = libumd();
        let exe = out_dir().join("short_process_version");
        let o = compile("tests/c/short_process.c", &exe, &["-std=c11"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        exe
    })
}

fn open_with(uapi: &str) -> String {
    let exe = program();
    let dir = out_dir().join(format!("version-{uapi}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let run = Command::new(exe)
        .arg("open-detail")
        .env("UMD_BACKEND", "sim")
        .env("UMD_SIM_UAPI", uapi)
        .env("UMD_LOG_DIR", &dir)
        .env("UMD_LOG_CONSOLE", "off")
        .output()
        .expect("run short_process");
    assert!(run.status.success(), "{run:?}");
    String::from_utf8_lossy(&run.stdout).into_owned()
}

#[test]
fn another_major_is_refused_naming_both_versions() {
    let want = format!(
        "short_process: open UMD_ERR_INIT_VERSION_MISMATCH\nshort_process: open detail ctx=0 sim:0: kernel aigpu UAPI 2.0 cannot be driven by this libumd (UAPI {}.{}, needs kernel {}.{}+).",
        uapi::UAPI_MAJOR,
        uapi::UAPI_MINOR,
        uapi::UAPI_MAJOR,
        uapi::MIN_KERNEL_MINOR
    );
    let out = open_with("2.0");
    assert!(out.starts_with(&want), "{out}");
    let out = open_with("0.9");
    assert!(
        out.contains("kernel aigpu UAPI 0.9 cannot be driven"),
        "{out}"
    );
}

#[test]
fn a_newer_minor_of_the_same_major_is_driven() {
    let out = open_with(&format!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR + 5));
    assert_eq!(
        out,
        "short_process: open UMD_SUCCESS\nshort_process: done\n"
    );
}

#[test]
fn a_malformed_version_is_a_configuration_error() {
    let out = open_with("1.x");
    assert!(
        out.starts_with(
            "short_process: open UMD_ERR_INIT_BAD_CONFIG\nshort_process: open detail ctx=0 "
        ) && out.contains("UMD_SIM_UAPI=\"1.x\" is not a version MAJOR.MINOR"),
        "{out}"
    );
}
