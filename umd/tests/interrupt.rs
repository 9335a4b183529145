//! A signal during a fence wait (docs/libumd.md, "Work: command buffers, submission, fences"):
//! `tests/c/interrupt.c`, written from the header, checks that a handler without `SA_RESTART`
//! interrupts the wait with `UMD_ERR_SYNC_INTERRUPTED` and that one with `SA_RESTART` does not,
//! as on aigpu.ko (the guest runs the same binary); this test runs it on the simulator.

#[path = "c_util.rs"]
mod c_util;

use c_util::{compile_with, libumd, out_dir};
use std::process::Command;

#[test]
fn a_signal_interrupts_a_wait_as_the_kernel_does() {
    let _ = libumd();
    let exe = out_dir().join("interrupt");
    let o = compile_with("tests/c/interrupt.c", &exe, &["-std=c11"], &["-lpthread"]);
    assert!(
        o.status.success(),
        "interrupt.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = Command::new(&exe)
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG", "off")
        .output()
        .expect("run interrupt");
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    assert!(
        run.status.success() && stdout.ends_with("interrupt: 5 passed, 0 failed\n"),
        "interrupt failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
