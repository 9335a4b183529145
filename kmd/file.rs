// SPDX-License-Identifier: GPL-2.0
//! Per-open-file state: the file's GPU address space, its contexts and the set of this driver's GEM objects
//! that have a handle in the file (see `gem.rs` for why).

use kernel::{
    drm,
    new_mutex,
    prelude::*,
    rbtree::RBTree,
    sync::Mutex,
};

use crate::{
    ctx::Contexts,
    driver::{AigpuDevice, AigpuDriver},
    vm::Vm,
};

/// Driver data of an open DRM file.
#[pin_data]
pub(crate) struct AigpuFile {
    /// The file's GPU address space (page tables + mappings). Dropped at file release, after
    /// the DRM core closed every handle of the file.
    #[pin]
    pub(crate) vm: Mutex<Vm>,
    /// Our objects with at least one handle in this file: `drm_gem_object` address -> number of
    /// handles. Only written by the GEM `open` / `close` callbacks of our objects.
    #[pin]
    objects: Mutex<RBTree<usize, u32>>,
    /// The file's contexts.
    #[pin]
    pub(crate) ctxs: Mutex<Contexts>,
}

impl drm::file::DriverFile for AigpuFile {
    type Driver = AigpuDriver;

    fn open(dev: &AigpuDevice) -> Result<Pin<KBox<Self>>> {
        let vm = Vm::new(dev.stats.clone());
        KBox::try_pin_init(
            try_pin_init!(Self {
                vm <- new_mutex!(vm),
                objects <- new_mutex!(RBTree::new()),
                ctxs <- new_mutex!(Contexts::new()),
            }),
            GFP_KERNEL,
        )
    }
}

impl AigpuFile {
    /// Records a new handle to our object `key` in this file.
    pub(crate) fn note_handle_open(&self, key: usize) -> Result {
        let mut objects = self.objects.lock();
        if let Some(count) = objects.get_mut(&key) {
            *count = count.checked_add(1).ok_or(ENOSPC)?;
            return Ok(());
        }
        objects.try_create_and_insert(key, 1, GFP_KERNEL)?;
        Ok(())
    }

    /// Records that a handle to our object `key` in this file was closed.
    pub(crate) fn note_handle_close(&self, key: usize) {
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
        }
    }

    /// Whether `key` is one of our objects with a handle in this file.
    pub(crate) fn owns(&self, key: usize) -> bool {
        self.objects.lock().get(&key).is_some()
    }
}
