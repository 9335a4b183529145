//! The page-table budget (`rules::vm::MAX_PT_TABLES`, docs/kmd.md "Page-table budget") as user
//! space sees it on the simulator, which applies the same rule as aigpu.ko (the guest's
//! exec_test checks the kernel with the same numbers): one 4 KiB object bound at a 1 GiB stride
//! is refused with `ENOSPC` + `PT_LIMIT` at exactly the predicted bind, a bind that needs no new
//! table still succeeds, an unbind gives its tables back, and a file with 16384 mappings closes
//! fast. The mapping limit (`rules::vm::MAX_MAPPINGS`) likewise: the 65537th mapping is refused
//! with `ENOSPC` + `OBJECT_LIMIT`, and an unbind makes room for one again.

use libc::ENOSPC;
use uapi::ioctl::{VM_ACCESS_READ as R, VM_ACCESS_WRITE as W};
use uapi::reason as r;
use umd::backend::{select, Backend};

#[path = "backend_util.rs"]
mod backend_util;
use backend_util::expect_err_at;

const PAGE: u64 = 4096;
const GIB: u64 = 1 << 30;

fn open() -> Box<dyn Backend> {
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
    }
    let resolved = select::resolve().expect("backend resolves");
    select::open(&resolved, 0).expect("device opens")
}

/// Binds at `(k + 1)` GiB the budget admits, and the tables they hold: each needs a leaf and an
/// L1 table, the first of every 512 GiB an L2 table, the first also the top-level table.
fn expected() -> (u64, usize) {
    let mut held = 1;
    let mut k = 0u64;
    loop {
        let va = (k + 1) * GIB;
        let need = 2 + usize::from(k == 0 || (va >> 39) != ((va - GIB) >> 39));
        if held + need > rules::vm::MAX_PT_TABLES {
            return (k, held);
        }
        held += need;
        k += 1;
    }
}

#[test]
fn pt_budget_refuses_the_predicted_bind_exactly() {
    assert_eq!(rules::vm::MAX_PT_TABLES, 2048);
    assert_eq!(expected(), (1022, 2047));
    let b = open();
    let h = b.gem_create(PAGE).expect("create");
    for k in 0..1022u64 {
        b.vm_bind(h, (k + 1) * GIB, 0, PAGE, R | W)
            .unwrap_or_else(|e| panic!("bind {k}: {}", e.describe()));
    }
    expect_err_at(
        b.vm_bind(h, 1023 * GIB, 0, PAGE, R | W),
        ENOSPC,
        r::PT_LIMIT,
        0,
    );
    // A bind inside the tables already held needs none: admitted.
    b.vm_bind(h, GIB + PAGE, 0, PAGE, R | W)
        .expect("bind inside the first leaf table");
    // Refused again, and nothing of the refused bind is left mapped or allocated.
    expect_err_at(
        b.vm_bind(h, 1023 * GIB, 0, PAGE, R | W),
        ENOSPC,
        r::PT_LIMIT,
        0,
    );
    // Unbinding the last mapping of a 1 GiB region frees its leaf and L1 tables: the refused
    // bind fits now.
    b.vm_unbind(1022 * GIB, PAGE).expect("unbind");
    b.vm_bind(h, 1023 * GIB, 0, PAGE, R | W)
        .expect("bind after the unbind gave two tables back");
}

#[test]
fn pt_budget_close_of_16k_mappings_is_fast() {
    let b = open();
    let h = b.gem_create(PAGE).expect("create");
    for k in 0..16384u64 {
        b.vm_bind(h, GIB + k * PAGE, 0, PAGE, R | W)
            .unwrap_or_else(|e| panic!("bind {k}: {}", e.describe()));
    }
    let t0 = std::time::Instant::now();
    drop(b);
    let took = t0.elapsed();
    assert!(took.as_secs_f64() < 1.0, "close took {took:?}");
    // Another file works.
    let b2 = open();
    let h2 = b2.gem_create(PAGE).expect("create");
    b2.vm_bind(h2, GIB, 0, PAGE, R | W)
        .expect("bind on a new file");
}

#[test]
fn mapping_limit_refuses_the_65537th_mapping_exactly() {
    assert_eq!(rules::vm::MAX_MAPPINGS, 65536);
    let b = open();
    let h = b.gem_create(PAGE).expect("create");
    // Packed at a 4 KiB stride: 256 MiB of VA, 128 leaf tables, far inside the table budget.
    let va = |k: u64| GIB + k * PAGE;
    for k in 0..65536u64 {
        b.vm_bind(h, va(k), 0, PAGE, R | W)
            .unwrap_or_else(|e| panic!("bind {k}: {}", e.describe()));
    }
    expect_err_at(
        b.vm_bind(h, va(65536), 0, PAGE, R | W),
        ENOSPC,
        r::OBJECT_LIMIT,
        0,
    );
    // Checked after the argument rules and the overlap test: an overlapping bind says so.
    expect_err_at(
        b.vm_bind(h, va(7), 0, PAGE, R | W),
        libc::EINVAL,
        r::VA_OVERLAP,
        0,
    );
    b.vm_unbind(va(100), PAGE).expect("unbind");
    b.vm_bind(h, va(65536), 0, PAGE, R | W)
        .expect("bind after an unbind made room");
    expect_err_at(
        b.vm_bind(h, va(65537), 0, PAGE, R | W),
        ENOSPC,
        r::OBJECT_LIMIT,
        0,
    );
}
