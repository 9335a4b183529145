//! What a small command buffer costs the device model, natively: N command buffers of one 4-byte
//! FILL each, queued 256 per doorbell and stepped until idle (the shape of the batched half of
//! `umd-submit-bench`). Prints steps, memory accesses and ns per command buffer; asserts nothing.
//! Run it under `valgrind --tool=callgrind` for instruction counts per function: the kernel
//! module runs this same code under emulation in the guest, where instructions are what count.
//!
//! ```text
//! cargo run --release -p aigpu-vgpu --example step_cost [N]     (default 100000)
//! ```

#[path = "../tests/common/mod.rs"]
mod common;

use common::{exec_desc, CMD_VA, DATA_VA, H, PAGE, RW};
use vgpu::model::Step;
use vgpu::uapi::{packet, regs};

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let mut h = H::new();
    h.enable_slot(0);
    h.map(0, DATA_VA, PAGE, RW);
    // The benchmark's layout: the command buffer 512 KiB into the buffer the FILL writes.
    let cmd_va = CMD_VA + 0x8_0000;
    let size = h.cmdbuf(0, cmd_va, &packet::encode_fill(DATA_VA, 4, 0x1234_5678));
    h.setup_queue(0, 1024, 1);
    let t = std::time::Instant::now();
    let mut steps = 0u64;
    let mut left = n;
    while left > 0 {
        let k = left.min(256);
        let tail = h.qr(0, regs::Q_TAIL);
        for i in 0..k {
            h.write_desc(0, tail + i, &exec_desc(0, cmd_va, size, 0, 0, 0, 1));
        }
        h.qw(0, regs::Q_TAIL, tail + k);
        h.qw(0, regs::Q_DOORBELL, 1);
        while h.dev.step() == Step::Progress {
            steps += 1;
        }
        left -= k;
    }
    let ns = t.elapsed().as_nanos() as f64;
    println!(
        "{n} command buffers: {steps} steps, {} memory accesses, {:.1} ns per command buffer",
        h.mem().accesses.get(),
        ns / f64::from(n.max(1))
    );
}
