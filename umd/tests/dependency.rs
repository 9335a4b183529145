//! The dependency-failure contract through the C ABI (docs/libumd.md, "Failed dependencies"):
//! `tests/c/dependency.c`, a program written from the header, runs a three-stage pipeline whose
//! first stage faults on the simulator (the guest runs the same binary on aigpu.ko). It checks
//! every code, detail, state field and byte itself; this test asserts it ran every check and
//! passed them all.

#[path = "c_util.rs"]
mod c_util;

use c_util::{compile, libumd, out_dir};
use std::process::Command;

#[test]
fn a_pipeline_whose_producer_faults_runs_nothing_on_garbage() {
    let _ = libumd();
    let exe = out_dir().join("dependency");
    let o = compile("tests/c/dependency.c", &exe, &["-std=c11"]);
    assert!(
        o.status.success(),
        "dependency.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = Command::new(&exe)
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG", "off")
        .output()
        .expect("run dependency");
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    assert!(
        run.status.success() && stdout.ends_with("dependency: 12 passed, 0 failed\n"),
        "dependency failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
