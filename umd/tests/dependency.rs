//! The dependency-failure contract through the C ABI (docs/libumd.md, "Failed dependencies"):
//! `tests/c/dependency.c`, a program written from the header, runs a three-stage pipeline whose
//! first stage faults on the simulator (the guest runs the same binary on aigpu.ko). It checks
//! every code, detail, state field and byte itself; this test asserts it ran every check and
//! passed them all.

#[path = "c_util.rs"]
mod c_util;

#[test]
fn a_pipeline_whose_producer_faults_runs_nothing_on_garbage() {
    c_util::run_checks("dependency", 12);
}
