//! A batch larger than one kernel submit that fails in a later part (docs/libumd.md, "Work:
//! command buffers, submission, fences"): `tests/c/batch.c`, written from the header, checks
//! that umdSubmit names the part that was queued and that exactly that part reached the
//! kernel; this test asserts it ran every check and passed them all, on the simulator (the
//! guest runs the same binary on aigpu.ko).

#[path = "c_util.rs"]
mod c_util;

use c_util::{compile_with, libumd, out_dir};
use std::process::Command;

#[test]
fn a_batch_failing_in_a_later_part_says_which_part_was_queued() {
    let _ = libumd();
    let exe = out_dir().join("batch");
    let o = compile_with("tests/c/batch.c", &exe, &["-std=c11"], &["-lpthread"]);
    assert!(
        o.status.success(),
        "batch.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = Command::new(&exe)
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG", "off")
        .output()
        .expect("run batch");
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    assert!(
        run.status.success() && stdout.ends_with("batch: 4 passed, 0 failed\n"),
        "batch failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
