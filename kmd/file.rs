// SPDX-License-Identifier: GPL-2.0
//! Per-open-file state: the file's GPU address space, its client registration on the device
//! (contexts, jobs and usage live there, in `gpu/`) and the set of this driver's GEM objects
//! that have a handle in the file (see `gem.rs` for why).

use kernel::{
    drm, new_mutex,
    prelude::*,
    rbtree::RBTree,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
};

use crate::{
    driver::{AigpuDevice, AigpuDriver},
    gpu::{ClientStats, Gpu},
    vm::Vm,
};

/// Driver data of an open DRM file.
#[pin_data(PinnedDrop)]
pub(crate) struct AigpuFile {
    /// The file's GPU address space (page tables + mappings). Shared with the device's client
    /// entry (for the `vm` debugfs file) until the file is detached; dropped at file release,
    /// after the DRM core closed every handle of the file and the device dropped the file's work.
    pub(crate) vm: Arc<Mutex<Vm>>,
    /// Our objects with at least one handle in this file: `drm_gem_object` address -> number of
    /// handles. Only written by the GEM `open` / `close` callbacks of our objects.
    #[pin]
    objects: Mutex<RBTree<usize, u32>>,
    /// The device.
    pub(crate) gpu: Arc<Gpu>,
    /// This file's client id on the device.
    pub(crate) client: u64,
    /// Usage numbers shown in debugfs `clients`.
    pub(crate) stats: Arc<ClientStats>,
}

impl drm::file::DriverFile for AigpuFile {
    type Driver = AigpuDriver;

    fn open(dev: &AigpuDevice) -> Result<Pin<KBox<Self>>> {
        let gpu = dev.gpu.clone();
        // The devcoredump's device and the wedged event's sender (`dump.rs`).
        crate::dump::attach_device(&gpu, dev);
        let vm = Arc::pin_init(new_mutex!(Vm::new(dev.stats.clone(), gpu.clone())), GFP_KERNEL)?;
        let stats = Arc::new(
            ClientStats {
                mem: Atomic::new(0),
                objects: Atomic::new(0),
                mappings: Atomic::new(0),
                lost: Atomic::new(false),
            },
            GFP_KERNEL,
        )?;
        let client = gpu.attach(stats.clone(), vm.clone())?;
        let gpu2 = gpu.clone();
        let f = KBox::try_pin_init(
            try_pin_init!(Self {
                vm: vm.clone(),
                objects <- new_mutex!(RBTree::new()),
                gpu: gpu2,
                client,
                stats,
            }),
            GFP_KERNEL,
        );
        if f.is_err() {
            gpu.detach(client);
        }
        f
    }
}

#[pinned_drop]
impl PinnedDrop for AigpuFile {
    fn drop(self: Pin<&mut Self>) {
        // Before the address space goes: the device finishes or cancels the file's work and
        // forgets its contexts and address-space slot.
        self.gpu.detach(self.client);
    }
}

impl AigpuFile {
    /// Records a new handle to our object `key` (of `size` bytes) in this file.
    pub(crate) fn note_handle_open(&self, key: usize, size: u64) -> Result {
        let mut objects = self.objects.lock();
        if let Some(count) = objects.get_mut(&key) {
            *count = count.checked_add(1).ok_or(ENOSPC)?;
            return Ok(());
        }
        objects.try_create_and_insert(key, 1, GFP_KERNEL)?;
        self.stats.mem.fetch_add(size, Relaxed);
        self.stats.objects.fetch_add(1, Relaxed);
        Ok(())
    }

    /// Records that a handle to our object `key` (of `size` bytes) in this file was closed.
    pub(crate) fn note_handle_close(&self, key: usize, size: u64) {
        let mut objects = self.objects.lock();
        let remove = match objects.get_mut(&key) {
            Some(count) => {
                *count = count.saturating_sub(1);
                *count == 0
            }
            // Cannot happen (every close pairs with a successful open); nothing to undo.
            None => false,
        };
        if remove {
            objects.remove(&key);
            self.stats.mem.fetch_sub(size, Relaxed);
            self.stats.objects.fetch_sub(1, Relaxed);
        }
    }

    /// Whether `key` is one of our objects with a handle in this file.
    pub(crate) fn owns(&self, key: usize) -> bool {
        self.objects.lock().get(&key).is_some()
    }
}
