//! A signal during a fence wait (docs/libumd.md, "Work: command buffers, submission, fences"):
//! `tests/c/interrupt.c`, written from the header, checks that a handler without `SA_RESTART`
//! interrupts the wait with `UMD_ERR_SYNC_INTERRUPTED` and that one with `SA_RESTART` does not,
//! as on aigpu.ko (the guest runs the same binary); this test runs it on the simulator.

#[path = "c_util.rs"]
mod c_util;

#[test]
fn a_signal_interrupts_a_wait_as_the_kernel_does() {
    c_util::run_checks("interrupt", 5);
}
