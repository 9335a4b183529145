//! The simulated device's fence slots (512) bound its contexts across files, as aigpu.ko's do
//! (exec_test `ctx-create-fence-slots-exhausted`): with every slot taken, CTX_CREATE fails with
//! EBUSY + DEVICE_CTX_LIMIT on any file (not CTX_LIMIT, the file's own 64), and closing a file
//! gives its contexts' slots back. A test binary of its own: it takes all of device 0.

use uapi::ioctl::{MAX_CONTEXTS, PRIORITY_NORMAL};
use uapi::reason as r;
use umd::backend::sim::SimFile;
use umd::backend::Backend;

#[track_caller]
fn expect_ctx_create_fails(f: &SimFile, reason: u32) {
    let e = f.ctx_create(PRIORITY_NORMAL).unwrap_err();
    assert_eq!(
        (e.errno, e.reason),
        (libc::EBUSY, reason),
        "{}",
        e.describe()
    );
}

#[test]
fn fence_slots_bound_contexts_across_files_and_come_back_on_close() {
    let per_file = MAX_CONTEXTS as usize;
    let mut files = Vec::new();
    for _ in 0..512 / per_file {
        let f = SimFile::open(0).expect("open");
        for _ in 0..per_file {
            f.ctx_create(PRIORITY_NORMAL)
                .expect("a context while slots are left");
        }
        files.push(f);
    }
    let extra = SimFile::open(0).expect("a ninth file");
    // Every slot of the device is taken.
    expect_ctx_create_fails(&extra, r::DEVICE_CTX_LIMIT);
    drop(files.pop());
    for _ in 0..per_file {
        extra
            .ctx_create(PRIORITY_NORMAL)
            .expect("a slot the closed file gave back");
    }
    // Now the file's own limit.
    expect_ctx_create_fails(&extra, r::CTX_LIMIT);
}
