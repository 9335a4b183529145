//! The simulator renders the debugfs texts of docs/debugfs.md from its state.

use uapi::ioctl::{Cmdbuf, VM_ACCESS_READ, VM_ACCESS_WRITE};
use umd::backend::sim::SimFile;
use umd::backend::Backend;

fn kv(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|f| f.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_string()
}

#[test]
fn status_queues_clients_contexts() {
    let f = SimFile::open(0).expect("open");
    let g = f.gpu().clone();
    let status = g.debugfs_status();
    assert!(
        status
            .starts_with("device=sim0 state=ok uapi=1.3 driver=0.1.0 hw=1.0 mem_total=1073741824 "),
        "{status}"
    );
    assert_eq!(kv(&status, "clients"), "1");
    assert_eq!(kv(&status, "jobs"), "0");
    assert_eq!(kv(&status, "steps"), "0");
    assert_eq!(kv(&status, "busy_us"), "0");

    let ctx = f.ctx_create(uapi::ioctl::PRIORITY_HIGH).expect("ctx");
    let h = f.gem_create(8192).expect("gem");
    f.vm_bind(h, 0x100000, 0, 8192, VM_ACCESS_READ | VM_ACCESS_WRITE)
        .expect("bind");
    let m = f.gem_mmap(h, 8192).expect("mmap");
    let words = uapi::packet::encode_fill(0x101000, 64, 1);
    // SAFETY: the mapping is 8192 bytes.
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, m.ptr, words.len() * 4) };
    let cb = Cmdbuf {
        va: 0x100000,
        size: words.len() as u32 * 4,
        flags: 0,
    };
    let seq = f.submit(ctx, &[cb], &[], 0).expect("submit");
    f.wait(ctx, seq, umd::error::detail::mono_ns() + 5_000_000_000)
        .expect("wait");

    let status = g.debugfs_status();
    assert_eq!(
        (
            kv(&status, "jobs"),
            kv(&status, "contexts"),
            kv(&status, "mem_used")
        ),
        ("1".into(), "1".into(), "8192".into())
    );
    // A one-packet command buffer is one device step: its descriptor fetch runs the packet (the
    // step that raises the job's interrupt counts too).
    assert_eq!(kv(&status, "steps"), "1");
    assert!(kv(&status, "busy_us").parse::<u64>().is_ok(), "{status}");
    let queues = g.debugfs_queues();
    let q0 = queues.lines().next().expect("queue 0");
    assert_eq!(queues.lines().count(), 4);
    // High priority contexts run on queue 0.
    assert!(q0.starts_with("queue=0 prio=high state=idle "), "{q0}");
    assert_eq!(kv(q0, "jobs"), "1");
    assert_eq!(kv(q0, "inflight"), "0");
    let clients = g.debugfs_clients();
    let c = clients.lines().next().expect("client");
    assert_eq!(kv(c, "pid"), std::process::id().to_string());
    assert_eq!(
        (
            kv(c, "mem"),
            kv(c, "objects"),
            kv(c, "contexts"),
            kv(c, "jobs")
        ),
        ("8192".into(), "1".into(), "1".into(), "1".into())
    );
    let contexts = g.debugfs_contexts();
    assert_eq!(
        contexts
            .lines()
            .next()
            .map(|l| l.split_once(" queue=").map(|(_, r)| r.to_string())),
        Some(Some(
            "0 prio=high submitted=1 completed=1 reset=none hung=0".into()
        ))
    );
    f.gem_close(h).expect("close");
    let c = g.debugfs_clients();
    // The handle is gone but the mapping keeps the object (and its memory) alive.
    assert_eq!(
        (kv(&c, "objects"), kv(&c, "mem")),
        ("0".into(), "8192".into())
    );
    f.vm_unbind(0x100000, 8192).expect("unbind");
    assert_eq!(kv(&g.debugfs_clients(), "mem"), "0");
}
