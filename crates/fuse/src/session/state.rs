//! A session's bookkeeping: the value table, the calls recorded since the last flush, the plan
//! cache, and the flush itself (recorded calls → literals that changed made values → canonical
//! script → compiled program → run).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fuse_core::{ArrayView, Bindings, DataView, HostArray, Library, Precision, ValueId, Views};

use super::canonical::{self, Canonical, PendingArg, PendingCall};
use super::handle::Token;
use super::literals::{self, Literals, Shape};
use crate::backend::{Backend, CompileOptions, Compiled};
use crate::device::{resident, Buffer, DevicePlan, Pool};
use crate::distributed::{Communicator, Link, RankProgram};
use crate::error::{Error, Result};
use crate::memory::try_to_owned;

/// What a session has done so far. Counts add up over the session's life: the difference of
/// two snapshots ([`Stats::since`]) is what happened in between, e.g. in one solver iteration.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Flushes that ran something.
    pub flushes: u64,
    /// Programs compiled (explored, generated and built where the backend does that).
    pub compilations: u64,
    /// Flushes whose program was found compiled in the cache.
    pub cache_hits: u64,
    /// Recorded calls run.
    pub calls: u64,
    /// Bytes copied from the host to the device: each value made on the host, once, when a
    /// flush first needs it there (0 on the host backends).
    pub to_device: u64,
    /// Bytes copied from the device to the host: each value read, once (0 on the host backends).
    pub from_device: u64,
    /// Buffers newly allocated on the device; a buffer reused from the device's pool is not one.
    pub device_allocations: u64,
    /// Collectives this rank of a distributed session took part in (0 in one process).
    pub collectives: u64,
    /// Bytes this rank put into them: its block of each gather, its partial vector of each sum
    /// (what a collective's traffic is measured in).
    pub communicated: u64,
    /// Time the flushes took to compute: the kernels' time by CUDA events on a GPU, the wall
    /// time of the run elsewhere.
    pub compute: Duration,
}

impl Stats {
    /// What happened between `earlier` (a snapshot of the same session) and this snapshot.
    ///
    /// ```
    /// use fuse::{Backend, Session};
    ///
    /// let s = Session::<f64>::new(Backend::Reference)?;
    /// let x = s.vector(vec![3.0, 4.0])?;
    /// let before = s.stats();
    /// assert_eq!(s.read_scalar(&s.dnrm2(&x)?)?, 5.0);
    /// let step = s.stats().since(&before);
    /// assert_eq!((step.flushes, step.calls, step.to_device), (1, 1, 0)); // nothing leaves the host
    /// # Ok::<(), fuse::Error>(())
    /// ```
    pub fn since(&self, earlier: &Stats) -> Stats {
        Stats {
            flushes: self.flushes - earlier.flushes,
            compilations: self.compilations - earlier.compilations,
            cache_hits: self.cache_hits - earlier.cache_hits,
            calls: self.calls - earlier.calls,
            to_device: self.to_device - earlier.to_device,
            from_device: self.from_device - earlier.from_device,
            device_allocations: self.device_allocations - earlier.device_allocations,
            collectives: self.collectives - earlier.collectives,
            communicated: self.communicated - earlier.communicated,
            compute: self.compute.saturating_sub(earlier.compute),
        }
    }
}

/// The counts of two sessions together (a program's f32 and f64 sessions, say).
impl std::ops::Add for Stats {
    type Output = Stats;

    fn add(self, other: Stats) -> Stats {
        Stats {
            flushes: self.flushes + other.flushes,
            compilations: self.compilations + other.compilations,
            cache_hits: self.cache_hits + other.cache_hits,
            calls: self.calls + other.calls,
            to_device: self.to_device + other.to_device,
            from_device: self.from_device + other.from_device,
            device_allocations: self.device_allocations + other.device_allocations,
            collectives: self.collectives + other.collectives,
            communicated: self.communicated + other.communicated,
            compute: self.compute + other.compute,
        }
    }
}

/// Compiled programs kept per session; a solver loop needs a handful.
const CACHE_CAPACITY: usize = 64;

/// A value's contents.
pub(super) enum Data {
    /// Recorded, not yet computed.
    Pending,
    /// Computed, or given by the user.
    Ready(Copies),
    /// The run that should have computed it failed.
    Failed(Arc<Error>),
}

/// Where a computed value is, in the session's precision: on the host, on the device, or
/// both — values never change, so two copies always agree. At least one is there.
#[derive(Default)]
pub(super) struct Copies {
    pub(super) host: Option<HostArray>,
    /// The caller's memory, read in place ([`Session::matrix_in_place`](super::Session::matrix_in_place)).
    pub(super) in_place: Option<Arc<dyn InPlace>>,
    pub(super) device: Option<Buffer>,
    /// In a distributed session: the copies hold this rank's block of rows, not all of it.
    pub(super) by_rows: bool,
}

/// Memory a session reads in place without owning it — a numpy array's buffer, kept alive by
/// the object that implements this — instead of a copy of its own.
///
/// # Safety
///
/// [`InPlace::elements`] must return the same elements, in memory that stays valid and that
/// nothing writes, for as long as the implementing value lives: the session reads them from
/// any thread, at any flush, without a lock.
pub unsafe trait InPlace: Send + Sync {
    /// The elements, row-major.
    fn elements(&self) -> DataView<'_>;
}

impl Copies {
    /// A value on the host only.
    pub(super) fn host(array: HostArray) -> Self {
        Copies {
            host: Some(array),
            ..Copies::default()
        }
    }
}

/// A value of the session.
struct Slot {
    dims: Vec<usize>,
    /// Alive while the user holds a handle to the value.
    token: Weak<Token>,
    data: Data,
}

/// What the next flush will do, as far as the session knows before it runs
/// ([`Session::forecast`](super::Session::forecast)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forecast {
    /// No held value waits for a result: a flush runs nothing.
    Nothing,
    /// Its program is not in the session's cache: a flush compiles it first (seconds for a
    /// GPU program).
    Compile,
    /// Its program is compiled; the last time it ran it took this long (wall time;
    /// `Duration::MAX` while no run of it has ended).
    Run(Duration),
}

/// Compiled programs by canonical key, least recently used evicted first.
pub(super) struct PlanCache<P> {
    entries: HashMap<Vec<u8>, Cached<P>>,
    clock: u64,
}

struct Cached<P> {
    compiled: Arc<P>,
    /// The cache's clock when it was last used.
    used: u64,
    /// How long its last run took; `None` until a run ended.
    last_run: Option<Duration>,
}

impl<P> Default for PlanCache<P> {
    fn default() -> Self {
        PlanCache {
            entries: HashMap::new(),
            clock: 0,
        }
    }
}

impl<P> PlanCache<P> {
    pub(super) fn get(&mut self, key: &[u8]) -> Option<Arc<P>> {
        self.clock += 1;
        let entry = self.entries.get_mut(key)?;
        entry.used = self.clock;
        Some(Arc::clone(&entry.compiled))
    }

    pub(super) fn insert(&mut self, key: Vec<u8>, compiled: Arc<P>) {
        if self.entries.len() >= CACHE_CAPACITY {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        let used = self.clock;
        let last_run = None;
        self.entries.insert(
            key,
            Cached {
                compiled,
                used,
                last_run,
            },
        );
    }

    /// Notes that the program of `key` ran in `took`.
    pub(super) fn ran(&mut self, key: &[u8], took: Duration) {
        if let Some(entry) = self.entries.get_mut(key) {
            entry.last_run = Some(took);
        }
    }

    /// What a flush of the program of `key` will do.
    pub(super) fn forecast(&self, key: &[u8]) -> Forecast {
        match self.entries.get(key) {
            None => Forecast::Compile,
            // Compiled by a flush whose run failed before it ended: nothing known of its time.
            Some(Cached { last_run: None, .. }) => Forecast::Run(Duration::MAX),
            Some(Cached {
                last_run: Some(took), ..
            }) => Forecast::Run(*took),
        }
    }
}

/// Everything a session mutates.
pub(super) struct State {
    session: u64,
    slots: HashMap<u64, Slot>,
    pending: Vec<PendingCall>,
    next_id: u64,
    /// Slot count at which dead values are next swept.
    sweep_at: usize,
    cache: PlanCache<Compiled>,
    /// Which literals changed between flushes of the same calls.
    literals: Literals,
    /// Each rank's compiled parts, in a distributed session.
    pub(super) ranked: PlanCache<RankProgram>,
    /// How the collectives of its programs on a device travel (one NCCL communicator for all).
    pub(super) link: Option<Arc<Link>>,
    pub(super) stats: Stats,
}

impl State {
    pub(super) fn new(session: u64) -> Self {
        State {
            session,
            slots: HashMap::new(),
            pending: Vec::new(),
            next_id: 0,
            sweep_at: 64,
            cache: PlanCache::default(),
            literals: Literals::default(),
            ranked: PlanCache::default(),
            link: None,
            stats: Stats::default(),
        }
    }

    /// A new value of extents `dims`; the returned token is its only strong reference.
    pub(super) fn insert(&mut self, dims: Vec<usize>, data: Data) -> Arc<Token> {
        if self.slots.len() >= self.sweep_at {
            self.collect_garbage();
            self.sweep_at = (2 * self.slots.len()).max(64);
        }
        let id = self.next_id;
        self.next_id += 1;
        let token = Arc::new(Token {
            session: self.session,
            id,
            dims: dims.clone(),
        });
        let token_ref = Arc::downgrade(&token);
        self.slots.insert(
            id,
            Slot {
                dims,
                token: token_ref,
                data,
            },
        );
        token
    }

    /// Records a call of `function` whose result has extents `dims`.
    pub(super) fn record(&mut self, function: &str, args: Vec<PendingArg>, dims: Vec<usize>) -> Arc<Token> {
        let token = self.insert(dims, Data::Pending);
        self.pending.push(PendingCall {
            function: function.to_string(),
            args,
            result: token.id,
        });
        token
    }

    /// The contents of value `id`, if this session has it.
    pub(super) fn data(&self, id: u64) -> Option<&Data> {
        self.slots.get(&id).map(|s| &s.data)
    }

    /// Number of calls recorded and not yet run.
    pub(super) fn pending_calls(&self) -> usize {
        self.pending.len()
    }

    /// The script the next flush would run, if it would run anything.
    pub(super) fn pending_script(&self, precision: Precision) -> Option<String> {
        let (calls, outputs) = self.next_batch(precision);
        (!calls.is_empty()).then(|| self.canonical(&calls, &outputs, precision).text())
    }

    /// What the next flush will do (over the ranks of a distributed session if `distributed`).
    pub(super) fn forecast(&self, precision: Precision, distributed: bool) -> Forecast {
        if self.pending.is_empty() {
            return Forecast::Nothing;
        }
        let (calls, outputs) = self.next_batch(precision);
        if calls.is_empty() {
            return Forecast::Nothing;
        }
        let script = self.canonical(&calls, &outputs, precision);
        match distributed {
            true => self.ranked.forecast(&self.ranked_key(&script)),
            false => self.cache.forecast(&script.key),
        }
    }

    /// Runs every recorded call that a held handle depends on (over the ranks of `comm` in a
    /// distributed session); drops the others.
    pub(super) fn flush(
        &mut self,
        backend: &Backend,
        options: &CompileOptions,
        precision: Precision,
        comm: Option<&dyn Communicator>,
    ) -> Result<()> {
        let recorded = std::mem::take(&mut self.pending);
        let (calls, outputs) = self.batch(&recorded);
        let result = if calls.is_empty() {
            Ok(())
        } else {
            self.stats.flushes += 1;
            let (calls, _scalars) = self.literals_as_values(calls, &outputs, precision);
            let script = self.canonical(&calls, &outputs, precision);
            let outcome = match comm {
                Some(comm) => self.execute_distributed(&script, backend, options, comm),
                None => self.execute(&script, backend, options),
            };
            self.store(&calls, &script, outcome)
        };
        self.collect_garbage();
        result
    }

    /// The calls needed for the results still held (in recording order), and those results.
    fn batch(&self, recorded: &[PendingCall]) -> (Vec<PendingCall>, Vec<u64>) {
        let outputs: Vec<u64> = recorded
            .iter()
            .map(|c| c.result)
            .filter(|id| self.is_held(*id))
            .collect();
        let mut needed: HashSet<u64> = outputs.iter().copied().collect();
        let mut calls: Vec<PendingCall> = Vec::new();
        for call in recorded.iter().rev() {
            if !needed.contains(&call.result) {
                continue;
            }
            needed.extend(call.args.iter().filter_map(|a| match a {
                PendingArg::Value(id) => Some(*id),
                PendingArg::Literal(_) => None,
            }));
            calls.push(call.clone());
        }
        calls.reverse();
        (calls, outputs)
    }

    /// The batch the next flush runs, as [`Self::literals_as_values`] will make it: the
    /// values it makes for literals that change are numbered down from the top of the id space
    /// here (a canonical script numbers values by first sight, so the scripts are the same).
    fn next_batch(&self, precision: Precision) -> (Vec<PendingCall>, Vec<u64>) {
        let (calls, outputs) = self.batch(&self.pending);
        let Some((_, varying)) = self.varying_literals(&calls, &outputs, precision) else {
            return (calls, outputs);
        };
        let mut unmade = u64::MAX;
        let calls = literals::as_values(calls, &varying, |_| {
            unmade -= 1;
            unmade
        });
        (calls, outputs)
    }

    /// `calls` with each literal that changed since an earlier flush of the same calls passed
    /// as a scalar value made for this flush, and those values' tokens (which keep them alive
    /// while it runs); notes the literals for the flushes to come.
    fn literals_as_values(
        &mut self,
        calls: Vec<PendingCall>,
        outputs: &[u64],
        precision: Precision,
    ) -> (Vec<PendingCall>, Vec<Arc<Token>>) {
        let Some((shape, varying)) = self.varying_literals(&calls, outputs, precision) else {
            return (calls, Vec::new());
        };
        self.literals.learn(shape, &varying);
        let mut made = Vec::new();
        let calls = literals::as_values(calls, &varying, |v| {
            let array = HostArray::f64(Vec::new(), vec![v]).to_precision(precision);
            let token = self.insert(Vec::new(), Data::Ready(Copies::host(array)));
            let id = token.id;
            made.push(token);
            id
        });
        (calls, made)
    }

    /// The literals of `calls`, and which of them a flush passes as values; `None` if the
    /// calls pass no literal.
    fn varying_literals(
        &self,
        calls: &[PendingCall],
        outputs: &[u64],
        precision: Precision,
    ) -> Option<(Shape, Vec<bool>)> {
        let shape = literals::shape(calls, outputs, precision, |id| self.dims_of(id))?;
        let varying = self.literals.varying(&shape);
        Some((shape, varying))
    }

    fn canonical<'c>(&self, calls: &'c [PendingCall], outputs: &[u64], precision: Precision) -> Canonical<'c> {
        canonical::script(calls, outputs, precision, |id| self.dims_of(id))
    }

    /// The extents of value `id` (none for an id the session does not have yet).
    fn dims_of(&self, id: u64) -> Vec<usize> {
        self.slots.get(&id).map(|s| s.dims.clone()).unwrap_or_default()
    }

    fn is_held(&self, id: u64) -> bool {
        self.slots.get(&id).is_some_and(|s| s.token.strong_count() > 0)
    }

    /// Compiles (or finds in the cache) and runs `script` on the session's values: on the
    /// device, where the backend has one, else on the host.
    fn execute(&mut self, script: &Canonical, backend: &Backend, options: &CompileOptions) -> Result<Computed> {
        let compiled = self.compiled(script, backend, options)?;
        let started = Instant::now();
        let computed = match compiled.device() {
            Some(plan) => self.run_on_device(&compiled, plan, script),
            None => self.run_on_host(&compiled, script),
        };
        self.cache.ran(&script.key, started.elapsed());
        computed
    }

    fn run_on_host(&mut self, compiled: &Compiled, script: &Canonical) -> Result<Computed> {
        let (outputs, times) = compiled.run_views_timed(&self.host_views(&script.inputs)?)?;
        self.stats.compute += times.compute;
        Ok(Computed::Host(outputs.into_bindings()))
    }

    /// Runs `plan` on the inputs' device buffers, uploading those only on the host; the inputs'
    /// buffers stay with their values, the outputs' become theirs.
    fn run_on_device(&mut self, compiled: &Compiled, plan: &dyn DevicePlan, script: &Canonical) -> Result<Computed> {
        let program = compiled.program();
        let mut given: BTreeMap<ValueId, Buffer> = BTreeMap::new();
        let mut owners: Vec<(ValueId, u64)> = Vec::new();
        let mut failure = None;
        for (id, name) in &script.inputs {
            let value = program
                .inputs
                .iter()
                .copied()
                .find(|&v| program.values[v].variable == *name);
            let Some(v) = value.filter(|v| plan.buffers().contains(v)) else {
                continue; // read by no kernel
            };
            match self.take_device(*id, plan.pool()) {
                Ok(buffer) => {
                    given.insert(v, buffer);
                    owners.push((v, *id));
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let ran = match failure {
            Some(e) => Err(e),
            None => resident::run(plan, program, compiled.sizes(), &mut given),
        };
        for (v, id) in owners {
            if let Some(buffer) = given.remove(&v) {
                self.return_device(id, buffer);
            }
        }
        let run = ran?;
        self.stats.compute += run.compute;
        self.stats.device_allocations += run.allocations;
        let by_name = run
            .outputs
            .into_iter()
            .map(|(v, buffer)| (program.values[v].variable.clone(), buffer))
            .collect();
        Ok(Computed::Device(by_name))
    }

    /// Value `id`'s device buffer, moved out of its slot for a run (uploaded first if the
    /// value is only on the host); [`Self::run_on_device`] puts it back.
    pub(super) fn take_device(&mut self, id: u64, pool: &Arc<Pool>) -> Result<Buffer> {
        let copies = match self.slot_data(id) {
            Some(Data::Ready(copies)) => copies,
            Some(Data::Failed(e)) => return Err(Error::Failed(Arc::clone(e))),
            _ => return Err(not_computed(id)),
        };
        if let Some(buffer) = copies.device.take() {
            return Ok(buffer);
        }
        let elements = match (&copies.in_place, &copies.host) {
            (Some(memory), _) => memory.elements(),
            (None, Some(host)) => host.data.view(),
            (None, None) => return Err(not_computed(id)),
        };
        let buffer = pool.upload(elements)?;
        self.stats.to_device += buffer.bytes();
        if buffer.fresh() {
            self.stats.device_allocations += 1;
        }
        Ok(buffer)
    }

    /// Puts value `id`'s device buffer back in its slot after a run.
    pub(super) fn return_device(&mut self, id: u64, buffer: Buffer) {
        if let Some(Data::Ready(copies)) = self.slot_data(id) {
            copies.device = Some(buffer);
        }
    }

    /// Value `id` on the device, uploaded first if it is only on the host.
    pub(super) fn device_value(&mut self, id: u64, pool: &Arc<Pool>) -> Result<&Buffer> {
        let buffer = self.take_device(id, pool)?;
        match self.slot_data(id) {
            Some(Data::Ready(copies)) => Ok(copies.device.insert(buffer)),
            _ => Err(not_computed(id)),
        }
    }

    /// Value `id` on the host, copied from the device first if it is only there.
    pub(super) fn host_value(&mut self, id: u64) -> Result<&HostArray> {
        let dims = self.slots.get(&id).map(|s| s.dims.clone()).unwrap_or_default();
        let copies = match self.slots.get_mut(&id).map(|s| &mut s.data) {
            Some(Data::Ready(copies)) => copies,
            Some(Data::Failed(e)) => return Err(Error::Failed(Arc::clone(e))),
            _ => return Err(not_computed(id)),
        };
        if copies.host.is_none() {
            let data = match &copies.in_place {
                Some(memory) => try_to_owned(memory.elements(), || format!("a copy of value v{id} read back"))?,
                None => {
                    let buffer = copies.device.as_ref().ok_or_else(|| not_computed(id))?;
                    self.stats.from_device += buffer.bytes();
                    buffer.download()?
                }
            };
            copies.host = Some(HostArray { dims, data });
        }
        copies.host.as_ref().ok_or_else(|| not_computed(id))
    }

    fn slot_data(&mut self, id: u64) -> Option<&mut Data> {
        self.slots.get_mut(&id).map(|s| &mut s.data)
    }

    /// The program of `script` compiled with `options` (which name the session's library).
    fn compiled(&mut self, script: &Canonical, backend: &Backend, options: &CompileOptions) -> Result<Arc<Compiled>> {
        if let Some(compiled) = self.cache.get(&script.key) {
            self.stats.cache_hits += 1;
            return Ok(compiled);
        }
        let library = library(options)?;
        let program = fuse_core::script::parse("session.yaml", &script.text(), &library)?;
        let compiled = Arc::new(backend.compile_with(&program, &program.sizes, options)?);
        self.stats.compilations += 1;
        self.cache.insert(script.key.clone(), Arc::clone(&compiled));
        Ok(compiled)
    }

    /// The input values of a run on the host, borrowed where they are (no copy).
    pub(super) fn host_views(&mut self, inputs: &[(u64, String)]) -> Result<Views<'_>> {
        for (id, _) in inputs {
            if !matches!(self.data(*id), Some(Data::Ready(Copies { in_place: Some(_), .. }))) {
                self.host_value(*id)?; // copied from the device first where it is only there
            }
        }
        let mut views = Views::new();
        for (id, name) in inputs {
            let view = match (self.data(*id), self.slots.get(id)) {
                (
                    Some(Data::Ready(Copies {
                        in_place: Some(memory), ..
                    })),
                    Some(slot),
                ) => ArrayView {
                    dims: slot.dims.clone(),
                    data: memory.elements(),
                },
                (Some(Data::Ready(Copies { host: Some(host), .. })), _) => host.view(),
                _ => return Err(not_computed(*id)),
            };
            views.insert(name.clone(), view);
        }
        Ok(views)
    }

    /// Stores the outputs of a run, or marks every value of the batch failed.
    fn store(&mut self, calls: &[PendingCall], script: &Canonical, outcome: Result<Computed>) -> Result<()> {
        let mut computed = match outcome {
            Ok(computed) => computed,
            Err(e) => {
                let e = Arc::new(e);
                for call in calls {
                    self.set(call.result, Data::Failed(Arc::clone(&e)));
                }
                return Err(Error::Failed(e));
            }
        };
        for (id, name) in &script.outputs {
            let data = match computed.take(name) {
                Some(copies) => Data::Ready(copies),
                None => Data::Failed(Arc::new(not_computed(*id))),
            };
            self.set(*id, data);
        }
        self.stats.calls += calls.len() as u64;
        Ok(())
    }

    fn set(&mut self, id: u64, data: Data) {
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.data = data;
        }
    }

    /// Forgets values nobody holds and no recorded call reads.
    fn collect_garbage(&mut self) {
        let read: HashSet<u64> = self
            .pending
            .iter()
            .flat_map(|c| c.args.iter().copied().chain([PendingArg::Value(c.result)]))
            .filter_map(|a| match a {
                PendingArg::Value(id) => Some(id),
                PendingArg::Literal(_) => None,
            })
            .collect();
        self.slots
            .retain(|id, s| s.token.strong_count() > 0 || read.contains(id));
    }
}

/// The library the session compiles with (`options` names it).
pub(super) fn library(options: &CompileOptions) -> Result<Arc<Library>> {
    match &options.library {
        Some(library) => Ok(Arc::clone(library)),
        None => crate::select::builtin_library(),
    }
}

/// The outputs of a run, by script name.
pub(super) enum Computed {
    /// On the host.
    Host(Bindings),
    /// On the device.
    Device(BTreeMap<String, Buffer>),
    /// This rank's results (on the host or on the device); those named in `by_rows` as its
    /// block of rows.
    Distributed {
        /// The results this rank holds.
        local: Box<Computed>,
        /// Those held as a block of rows.
        by_rows: HashSet<String>,
    },
}

impl Computed {
    fn take(&mut self, name: &str) -> Option<Copies> {
        match self {
            Computed::Host(arrays) => arrays.remove(name).map(Copies::host),
            Computed::Device(buffers) => buffers.remove(name).map(|buffer| Copies {
                device: Some(buffer),
                ..Copies::default()
            }),
            Computed::Distributed { local, by_rows } => local.take(name).map(|copies| Copies {
                by_rows: by_rows.contains(name),
                ..copies
            }),
        }
    }
}

/// A value that a run did not produce.
pub(super) fn not_computed(id: u64) -> Error {
    Error::UnknownOutput {
        name: format!("v{id}"),
        outputs: "none computed for it".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_fails_every_value_of_its_batch() {
        let mut state = State::new(1);
        let x = state.insert(
            vec![2],
            Data::Ready(Copies::host(HostArray::f64(vec![2], vec![1.0, 2.0]))),
        );
        let y = state.record("scal", vec![PendingArg::Literal(2.0), PendingArg::Value(x.id)], vec![2]);
        let (calls, outputs) = state.batch(&state.pending.clone());
        let script = state.canonical(&calls, &outputs, Precision::F64);
        let failure = Err(Error::UnknownBackend {
            name: "gpu".into(),
            known: "none".into(),
        });
        let err = state.store(&calls, &script, failure).unwrap_err();
        assert!(err.to_string().contains("unknown backend `gpu`"), "{err}");
        assert!(matches!(state.data(y.id), Some(Data::Failed(_))));
        assert!(matches!(state.data(x.id), Some(Data::Ready(_))));
    }

    #[test]
    fn dropped_results_are_pruned_and_forgotten() {
        let mut state = State::new(1);
        let x = state.insert(
            vec![2],
            Data::Ready(Copies::host(HostArray::f64(vec![2], vec![1.0, 2.0]))),
        );
        let t = state.record("scal", vec![PendingArg::Literal(2.0), PendingArg::Value(x.id)], vec![2]);
        let unused = state.record("copy", vec![PendingArg::Value(x.id)], vec![2]);
        let y = state.record("add", vec![PendingArg::Value(t.id), PendingArg::Value(x.id)], vec![2]);
        let (t_id, unused_id) = (t.id, unused.id);
        drop((t, unused));
        let (calls, outputs) = state.batch(&state.pending.clone());
        assert_eq!(outputs, [y.id]);
        assert_eq!(calls.iter().map(|c| c.result).collect::<Vec<_>>(), [t_id, y.id]);
        state
            .flush(&Backend::Reference, &CompileOptions::new(), Precision::F64, None)
            .unwrap();
        assert!(state.data(t_id).is_none() && state.data(unused_id).is_none());
        assert_eq!(state.host_value(y.id).unwrap().to_f64(), [3.0, 6.0]);
    }

    #[test]
    fn the_forecast_says_whether_a_flush_compiles_and_how_long_it_last_ran() {
        let mut state = State::new(1);
        let vector = |state: &mut State, n: usize| {
            state.insert(
                vec![n],
                Data::Ready(Copies::host(HostArray::f64(vec![n], vec![1.0; n]))),
            )
        };
        let scal = |state: &mut State, x: &Token| {
            let args = vec![PendingArg::Literal(2.0), PendingArg::Value(x.id)];
            state.record("scal", args, x.dims.clone())
        };
        let forecast = |state: &State| state.forecast(Precision::F64, false);
        let flush = |state: &mut State| state.flush(&Backend::Reference, &CompileOptions::new(), Precision::F64, None);
        let x = vector(&mut state, 2);
        assert_eq!(forecast(&state), Forecast::Nothing);
        drop(scal(&mut state, &x));
        assert_eq!(
            forecast(&state),
            Forecast::Nothing,
            "a result nobody holds is never run"
        );
        let y = scal(&mut state, &x);
        assert_eq!(forecast(&state), Forecast::Compile);
        flush(&mut state).unwrap();
        assert_eq!(forecast(&state), Forecast::Nothing);
        let again = scal(&mut state, &y);
        assert!(matches!(forecast(&state), Forecast::Run(d) if d < Duration::from_secs(10)));
        flush(&mut state).unwrap();
        assert_eq!(state.host_value(again.id).unwrap().to_f64(), [4.0, 4.0]);
        let longer = vector(&mut state, 3);
        let _z = scal(&mut state, &longer);
        assert_eq!(
            forecast(&state),
            Forecast::Compile,
            "other extents make another program"
        );
    }

    #[test]
    fn a_program_compiled_by_a_run_that_did_not_end_has_no_known_time() {
        let mut cache = PlanCache::default();
        cache.insert(b"k".to_vec(), Arc::new(()));
        assert_eq!(cache.forecast(b"k"), Forecast::Run(Duration::MAX));
        cache.ran(b"k", Duration::from_millis(3));
        assert_eq!(cache.forecast(b"k"), Forecast::Run(Duration::from_millis(3)));
        assert_eq!(cache.forecast(b"other"), Forecast::Compile);
    }

    #[test]
    fn a_literal_that_changes_compiles_once_more_then_runs_as_a_value() {
        let mut state = State::new(1);
        let x = state.insert(
            vec![3],
            Data::Ready(Copies::host(HostArray::f64(vec![3], vec![1.0, 2.0, 4.0]))),
        );
        let flush = |state: &mut State| state.flush(&Backend::Reference, &CompileOptions::new(), Precision::F64, None);
        for (k, a) in [2.0, 2.0, 3.0, -1.5, 7.0].into_iter().enumerate() {
            let args = vec![PendingArg::Literal(a), PendingArg::Value(x.id), PendingArg::Value(x.id)];
            let y = state.record("axpy", args, vec![3]);
            let script = state.pending_script(Precision::F64).unwrap();
            assert_eq!(script.contains(&format!("{a:?}")), k < 2, "flush {k}: {script}");
            let forecast = state.forecast(Precision::F64, false);
            assert_eq!(
                forecast == Forecast::Compile,
                k == 0 || k == 2,
                "flush {k}: {forecast:?}"
            );
            flush(&mut state).unwrap();
            let want: Vec<f64> = [1.0, 2.0, 4.0].iter().map(|v| a * v + v).collect();
            assert_eq!(state.host_value(y.id).unwrap().to_f64(), want, "flush {k}");
        }
        assert_eq!((state.stats.compilations, state.stats.cache_hits), (2, 3));
        assert_eq!(
            state.slots.len(),
            2,
            "x and the last result: the flushes' scalars are gone"
        );
    }
}
