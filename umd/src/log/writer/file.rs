//! The writer's file sink: appending, opening (with the fallback directory), flushing and
//! `fdatasync`, and the sink's down / retry states with their notices (docs/logging.md, "When a
//! sink fails").

use super::super::rotate::{fallback_dir, RotatingFile, SystemClock};
use super::{now_wall, FileState, Writer};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Writer {
    /// Appends `self.text` to the file sink.
    pub(super) fn file_append(&mut self, wall: u64) {
        match self.file_state {
            FileState::Down { ref mut lost, .. } => {
                *lost += 1;
                self.lost_since_announced += 1;
                self.stats.failed_file.fetch_add(1, Ordering::Relaxed);
            }
            FileState::Ok if !self.file.is_open() => {
                self.stats.failed_file.fetch_add(1, Ordering::Relaxed);
            }
            FileState::Ok => {
                let before = self.file.rotations;
                let buffered = self.file.buffered_records();
                match self.file.append(&self.text, wall) {
                    Ok(()) => {
                        // Records that left the buffer were written.
                        let now_buf = self.file.buffered_records();
                        let written = (buffered + 1).saturating_sub(now_buf);
                        self.stats
                            .written_file
                            .fetch_add(written, Ordering::Relaxed);
                        if written > 0 {
                            self.file_wrote();
                        }
                        if self.file.rotations != before {
                            self.stats.rotations.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        // `append` leaves the new record in the buffer on failure.
                        let remaining = self.file.buffered_records();
                        self.stats
                            .written_file
                            .fetch_add((buffered + 1).saturating_sub(remaining), Ordering::Relaxed);
                        let lost = self.file.take_failed();
                        let msg = format!(
                            "writing log file {} failed: {e}",
                            self.file.path_of(0).display()
                        );
                        self.file_down(&msg, lost);
                    }
                }
            }
        }
    }

    pub(super) fn file_down(&mut self, why: &str, lost: u64) {
        self.stats.failed_file.fetch_add(lost, Ordering::Relaxed);
        self.stats.file_ok.store(false, Ordering::Relaxed);
        self.file.close();
        self.file_state = FileState::Down {
            retry_at: Instant::now() + self.retry,
            lost,
        };
        self.lost_since_announced += lost;
        if !self.down_announced {
            self.down_announced = true;
            tracing::warn!(
                retry_ms = self.retry.as_millis() as u64,
                "log file sink down: {why}; logging to the console only, retrying later (lost records are counted: umdLogGetStats)"
            );
        }
    }

    /// A write reached the file: if the sink had been announced down, say it is back, once.
    pub(super) fn file_wrote(&mut self) {
        if self.down_announced {
            self.down_announced = false;
            let lost = std::mem::take(&mut self.lost_since_announced);
            tracing::warn!(
                lost,
                "log file sink back: {} ({lost} records were lost while it was down)",
                self.file.path_of(0).display()
            );
        }
    }

    pub(super) fn open_file(&mut self) {
        let now = now_wall();
        match self.file.open(now) {
            Ok(()) => {}
            Err(e) if self.dir_is_default => {
                let first = self.file.path_of(0);
                let mut cfg = self.file.config().clone();
                cfg.dir = fallback_dir();
                self.file = RotatingFile::new(cfg, Arc::new(SystemClock));
                if let Err(e2) = self.file.open(now) {
                    let msg = format!(
                        "cannot open {} ({e}) nor {} ({e2})",
                        first.display(),
                        self.file.path_of(0).display()
                    );
                    self.file_down(&msg, 0);
                    return;
                }
                tracing::warn!(
                    "cannot open log file {} ({e}); using {}",
                    first.display(),
                    self.file.path_of(0).display()
                );
            }
            Err(e) => {
                let msg = format!("cannot open {}: {e}", self.file.path_of(0).display());
                self.file_down(&msg, 0);
                return;
            }
        }
        self.stats.file_ok.store(true, Ordering::Relaxed);
        super::super::ring::set_dir(&self.file.config().dir);
        super::super::set_file_path(Some(self.file.path_of(0)));
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        let n = super::super::rotate::prune_runs(&self.file.config().dir, self.max_runs, me);
        if n > 0 {
            tracing::info!(
                deleted = n,
                keep_runs = self.max_runs,
                "deleted the log files of older runs (UMD_LOG_MAX_RUNS)"
            );
        }
    }

    /// Writes the file buffer out; `sync` also fdatasyncs.
    pub(super) fn flush_file(&mut self, sync: bool) {
        if !matches!(self.file_state, FileState::Ok) || !self.file.is_open() {
            return;
        }
        let n = self.file.buffered_records();
        match self.file.flush() {
            Ok(()) => {
                self.stats.written_file.fetch_add(n, Ordering::Relaxed);
                if n > 0 {
                    self.file_wrote();
                }
                if sync {
                    let _ = self.file.sync();
                }
            }
            Err(e) => {
                let remaining = self.file.buffered_records();
                self.stats
                    .written_file
                    .fetch_add(n.saturating_sub(remaining), Ordering::Relaxed);
                let lost = self.file.take_failed();
                let msg = format!(
                    "writing log file {} failed: {e}",
                    self.file.path_of(0).display()
                );
                self.file_down(&msg, lost);
            }
        }
    }
}
