//! A batch larger than one kernel submit that fails in a later part (docs/libumd.md, "Work:
//! command buffers, submission, fences"): `tests/c/batch.c`, written from the header, checks
//! that umdSubmit names the part that was queued and that exactly that part reached the
//! kernel; this test asserts it ran every check and passed them all, on the simulator (the
//! guest runs the same binary on aigpu.ko).

#[path = "c_util.rs"]
mod c_util;

#[test]
fn a_batch_failing_in_a_later_part_says_which_part_was_queued() {
    c_util::run_checks("batch", 4);
}
