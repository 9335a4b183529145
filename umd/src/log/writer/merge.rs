//! Draining: every lane and the shared queue, merged by time stamp into the writer's order
//! (docs/logging.md, "The pipeline").

use super::super::lane::Lane;
use super::Writer;

/// A lane being drained: its readable span, the next record's position and time.
pub(super) struct Src {
    lane: &'static Lane,
    pos: u64,
    end: u64,
    gone: bool,
    /// Records read and not yet handed back to the producer.
    unreleased: u64,
    /// The CLOCK_MONOTONIC ns of the record at `pos`, if there is one.
    next: Option<u64>,
}

/// Records read from a lane before its space is handed back to the producer (so a long drain
/// does not keep a blocked producer waiting until its end).
const RELEASE_EVERY: u64 = 256;

impl Writer {
    /// Writes every record the lanes and the shared queue hold now, merged by time stamp (each
    /// source is read in order, so a thread's records keep their order). Returns how many.
    pub(super) fn drain_all(&mut self) -> usize {
        let mut src = std::mem::take(&mut self.srcs);
        src.clear();
        let mut l = super::super::lane::first();
        while let Some(lane) = l {
            let (pos, end, gone) = lane.span();
            if pos != end || gone {
                let next = lane
                    .read(pos, end)
                    .map(|(_, v)| self.clock.mono_ns(v.stamp));
                src.push(Src {
                    lane,
                    pos,
                    end,
                    gone,
                    unreleased: 0,
                    next,
                });
            }
            l = lane.next();
        }
        let mut n = 0;
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (i, s) in src.iter().enumerate() {
                if let Some(t) = s.next {
                    if best.is_none_or(|(_, b)| t < b) {
                        best = Some((i, t));
                    }
                }
            }
            if let Some(q) = self.pending.front() {
                let t = self.clock.mono_ns(q.mono_ns);
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((usize::MAX, t));
                }
            }
            match best {
                None => break,
                Some((usize::MAX, _)) => {
                    if let Some(q) = self.pending.pop_front() {
                        self.write_one(q.meta, q.mono_ns, q.tid, q.bytes());
                    }
                }
                Some((i, _)) => {
                    let s = &mut src[i];
                    let lane = s.lane;
                    let Some((after, v)) = lane.read(s.pos, s.end) else {
                        s.next = None;
                        continue;
                    };
                    s.pos = after;
                    s.unreleased += 1;
                    s.next = lane
                        .read(after, s.end)
                        .map(|(_, w)| self.clock.mono_ns(w.stamp));
                    let (release, pos, k, gone) =
                        (s.unreleased >= RELEASE_EVERY, s.pos, s.unreleased, s.gone);
                    self.write_one(v.meta, v.stamp, v.tid, v.body);
                    if release {
                        lane.consumed(pos, k, gone);
                        src[i].unreleased = 0;
                    }
                }
            }
            n += 1;
        }
        for s in &src {
            s.lane.consumed(s.pos, s.unreleased, s.gone);
        }
        self.srcs = src;
        n
    }
}
