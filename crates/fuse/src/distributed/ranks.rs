//! Ranks as threads of one process: a [`Communicator`] without MPI, for running and testing a
//! distributed plan on one machine. Every collective is an exchange: each rank leaves its part
//! in a slot, all meet, each takes what it needs, all meet again. A rank that panics breaks the
//! meeting, so the others get an error instead of waiting for it forever.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use fuse_core::HostData;

use super::Communicator;
use crate::error::{Error, Result};

/// `ranks` ranks run as scoped threads.
#[derive(Debug, Clone, Copy)]
pub struct LocalRanks {
    ranks: usize,
}

/// One rank of [`LocalRanks`]: its own to keep (a distributed session holds one).
pub struct LocalRank {
    rank: usize,
    shared: Arc<Shared>,
}

struct Shared {
    ranks: usize,
    meeting: Meeting,
    slots: Mutex<Vec<Option<Part>>>,
}

/// A barrier that a panicking rank breaks for good.
#[derive(Default)]
struct Meeting {
    state: Mutex<Attendance>,
    all_here: Condvar,
}

#[derive(Default)]
struct Attendance {
    /// Ranks arrived at the current meeting.
    here: usize,
    /// The current meeting's number.
    meeting: u64,
    /// Whether a rank has panicked.
    broken: bool,
}

impl Meeting {
    fn state(&self) -> MutexGuard<'_, Attendance> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until all `ranks` ranks are here; an error once a rank has panicked.
    fn wait(&self, ranks: usize) -> Result<()> {
        let broken = || Error::Internal("another rank panicked".into());
        let mut state = self.state();
        if state.broken {
            return Err(broken());
        }
        state.here += 1;
        if state.here == ranks {
            state.here = 0;
            state.meeting += 1;
            self.all_here.notify_all();
            return Ok(());
        }
        let meeting = state.meeting;
        let state =
            (self.all_here.wait_while(state, |s| s.meeting == meeting && !s.broken)).unwrap_or_else(|p| p.into_inner());
        match state.broken {
            true => Err(broken()),
            false => Ok(()),
        }
    }

    fn break_up(&self) {
        self.state().broken = true;
        self.all_here.notify_all();
    }
}

/// Breaks the meeting if its rank's thread unwinds.
struct BreakOnPanic<'a>(&'a Meeting);

impl Drop for BreakOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.break_up();
        }
    }
}

#[derive(Clone)]
enum Part {
    Data(HostData),
    Bytes(Vec<u8>),
}

impl LocalRanks {
    /// `ranks` ranks (at least one).
    pub fn new(ranks: usize) -> LocalRanks {
        LocalRanks { ranks: ranks.max(1) }
    }

    /// Runs `body` on every rank at once; the results in rank order.
    pub fn run<T: Send>(&self, body: impl Fn(LocalRank) -> T + Sync) -> Vec<T> {
        let shared = Arc::new(Shared {
            ranks: self.ranks,
            meeting: Meeting::default(),
            slots: Mutex::new(vec![None; self.ranks]),
        });
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.ranks)
                .map(|rank| {
                    let (shared, body) = (Arc::clone(&shared), &body);
                    scope.spawn(move || {
                        let meeting = Arc::clone(&shared);
                        let _guard = BreakOnPanic(&meeting.meeting);
                        body(LocalRank { rank, shared })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
                .collect()
        })
    }
}

impl LocalRank {
    /// Every rank's part, in rank order.
    fn exchange(&self, mine: Part) -> Result<Vec<Part>> {
        let lock = || (self.shared.slots.lock()).map_err(|_| Error::Internal("a rank thread panicked".into()));
        lock()?[self.rank] = Some(mine);
        self.shared.meeting.wait(self.shared.ranks)?;
        let parts: Option<Vec<Part>> = lock()?.iter().cloned().collect();
        self.shared.meeting.wait(self.shared.ranks)?;
        parts.ok_or_else(|| Error::Internal("a rank left no part in an exchange".into()))
    }

    fn data(&self, mine: &HostData) -> Result<Vec<HostData>> {
        (self.exchange(Part::Data(mine.clone()))?.into_iter())
            .map(|p| match p {
                Part::Data(d) => Ok(d),
                Part::Bytes(_) => Err(Error::Internal("ranks called different collectives".into())),
            })
            .collect()
    }

    fn bytes(&self, mine: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        (self.exchange(Part::Bytes(mine))?.into_iter())
            .map(|p| match p {
                Part::Bytes(b) => Ok(b),
                Part::Data(_) => Err(Error::Internal("ranks called different collectives".into())),
            })
            .collect()
    }
}

fn concat(parts: &[HostData]) -> HostData {
    let mut all = parts[0].clone();
    for part in &parts[1..] {
        match (&mut all, part) {
            (HostData::F32(a), HostData::F32(p)) => a.extend_from_slice(p),
            (HostData::F64(a), HostData::F64(p)) => a.extend_from_slice(p),
            _ => {}
        }
    }
    all
}

fn sum(parts: &[HostData]) -> HostData {
    let mut total = parts[0].clone();
    for part in &parts[1..] {
        match (&mut total, part) {
            (HostData::F32(t), HostData::F32(p)) => t.iter_mut().zip(p).for_each(|(t, p)| *t += p),
            (HostData::F64(t), HostData::F64(p)) => t.iter_mut().zip(p).for_each(|(t, p)| *t += p),
            _ => {}
        }
    }
    total
}

impl Communicator for LocalRank {
    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.shared.ranks
    }

    fn broadcast(&self, data: &mut HostData) -> Result<()> {
        *data = self.data(data)?.swap_remove(0);
        Ok(())
    }

    fn broadcast_bytes(&self, root: usize, bytes: &mut Vec<u8>) -> Result<()> {
        *bytes = self.bytes(bytes.clone())?.swap_remove(root);
        Ok(())
    }

    fn all_gather(&self, local: &HostData, _counts: &[usize]) -> Result<HostData> {
        Ok(concat(&self.data(local)?))
    }

    fn gather(&self, local: &HostData, counts: &[usize]) -> Result<Option<HostData>> {
        let all = self.all_gather(local, counts)?;
        Ok((self.rank == 0).then_some(all))
    }

    fn all_reduce_sum(&self, data: &mut HostData) -> Result<()> {
        *data = sum(&self.data(data)?);
        Ok(())
    }

    fn reduce_sum(&self, data: &mut HostData) -> Result<()> {
        self.all_reduce_sum(data)
    }

    fn reduce_scatter_sum(&self, data: &HostData, counts: &[usize]) -> Result<HostData> {
        let total = sum(&self.data(data)?);
        let start: usize = counts[..self.rank].iter().sum();
        let mine = start..start + counts[self.rank];
        Ok(match total {
            HostData::F32(v) => HostData::F32(v[mine].to_vec()),
            HostData::F64(v) => HostData::F64(v[mine].to_vec()),
        })
    }

    fn all_gather_byte(&self, byte: u8) -> Result<Vec<u8>> {
        Ok(self.bytes(vec![byte])?.concat())
    }

    fn all_gather_bytes(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.bytes(bytes.to_vec())
    }
}
