//! A session's bookkeeping: the value table, the calls recorded since the last flush, the plan
//! cache, and the flush itself (recorded calls → canonical script → compiled program → run).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use fuse_core::{Bindings, HostArray, Library, Precision};

use super::canonical::{self, Canonical, PendingArg, PendingCall};
use super::handle::Token;
use crate::backend::{Backend, Compiled};
use crate::error::{Error, Result};
use crate::io::{Inputs, Outputs};

/// What a session has done so far.
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
}

/// Compiled programs kept per session; a solver loop needs a handful.
const CACHE_CAPACITY: usize = 64;

/// A value's contents.
#[derive(Debug)]
pub(super) enum Data {
    /// Recorded, not yet computed.
    Pending,
    /// On the host, in the session's precision.
    Ready(HostArray),
    /// The run that should have computed it failed.
    Failed(Arc<Error>),
}

/// A value of the session.
#[derive(Debug)]
struct Slot {
    dims: Vec<usize>,
    /// Alive while the user holds a handle to the value.
    token: Weak<Token>,
    data: Data,
}

/// Compiled programs by canonical script text, least recently used evicted first.
#[derive(Default)]
struct PlanCache {
    entries: HashMap<String, (Arc<Compiled>, u64)>,
    clock: u64,
}

impl PlanCache {
    fn get(&mut self, key: &str) -> Option<Arc<Compiled>> {
        self.clock += 1;
        let entry = self.entries.get_mut(key)?;
        entry.1 = self.clock;
        Some(Arc::clone(&entry.0))
    }

    fn insert(&mut self, key: String, compiled: Arc<Compiled>) {
        if self.entries.len() >= CACHE_CAPACITY {
            let oldest = self.entries.iter().min_by_key(|(_, e)| e.1).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key, (compiled, self.clock));
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
    cache: PlanCache,
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
        let (calls, outputs) = self.batch(&self.pending);
        (!calls.is_empty()).then(|| self.canonical(&calls, &outputs, precision).text)
    }

    /// Runs every recorded call that a held handle depends on; drops the others.
    pub(super) fn flush(&mut self, backend: &Backend, library: &Library, precision: Precision) -> Result<()> {
        let recorded = std::mem::take(&mut self.pending);
        let (calls, outputs) = self.batch(&recorded);
        let result = if calls.is_empty() {
            Ok(())
        } else {
            self.stats.flushes += 1;
            let script = self.canonical(&calls, &outputs, precision);
            let outcome = self.execute(&script, backend, library);
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

    fn canonical(&self, calls: &[PendingCall], outputs: &[u64], precision: Precision) -> Canonical {
        canonical::script(calls, outputs, precision, |id| {
            self.slots.get(&id).map(|s| s.dims.clone()).unwrap_or_default()
        })
    }

    fn is_held(&self, id: u64) -> bool {
        self.slots.get(&id).is_some_and(|s| s.token.strong_count() > 0)
    }

    /// Compiles (or finds in the cache) and runs `script` on the session's arrays.
    fn execute(&mut self, script: &Canonical, backend: &Backend, library: &Library) -> Result<Outputs> {
        let compiled = self.compiled(script, backend, library)?;
        let inputs = Inputs::from(self.take_inputs(&script.inputs)?);
        let outputs = compiled.run(&inputs);
        self.restore_inputs(inputs.into(), &script.inputs);
        outputs
    }

    fn compiled(&mut self, script: &Canonical, backend: &Backend, library: &Library) -> Result<Arc<Compiled>> {
        if let Some(compiled) = self.cache.get(&script.text) {
            self.stats.cache_hits += 1;
            return Ok(compiled);
        }
        let program = fuse_core::script::parse("session.yaml", &script.text, library)?;
        let compiled = Arc::new(backend.compile(&program, &program.sizes)?);
        self.stats.compilations += 1;
        self.cache.insert(script.text.clone(), Arc::clone(&compiled));
        Ok(compiled)
    }

    /// Moves the input arrays into bindings for the run (no copy); see [`Self::restore_inputs`].
    fn take_inputs(&mut self, inputs: &[(u64, String)]) -> Result<Bindings> {
        let mut bindings = Bindings::new();
        for (id, name) in inputs {
            let data = self
                .slots
                .get_mut(id)
                .map(|s| std::mem::replace(&mut s.data, Data::Pending));
            match data {
                Some(Data::Ready(array)) => {
                    bindings.insert(name.clone(), array);
                }
                other => {
                    let failure = match other {
                        Some(Data::Failed(e)) => Error::Failed(e),
                        _ => not_computed(*id),
                    };
                    self.restore_inputs(bindings, inputs);
                    return Err(failure);
                }
            }
        }
        Ok(bindings)
    }

    fn restore_inputs(&mut self, mut bindings: Bindings, inputs: &[(u64, String)]) {
        for (id, name) in inputs {
            if let (Some(slot), Some(array)) = (self.slots.get_mut(id), bindings.remove(name)) {
                slot.data = Data::Ready(array);
            }
        }
    }

    /// Stores the outputs of a run, or marks every value of the batch failed.
    fn store(&mut self, calls: &[PendingCall], script: &Canonical, outcome: Result<Outputs>) -> Result<()> {
        let mut arrays = match outcome {
            Ok(outputs) => outputs.into_bindings(),
            Err(e) => {
                let e = Arc::new(e);
                for call in calls {
                    self.set(call.result, Data::Failed(Arc::clone(&e)));
                }
                return Err(Error::Failed(e));
            }
        };
        for (id, name) in &script.outputs {
            let data = match arrays.remove(name) {
                Some(array) => Data::Ready(array),
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
        let x = state.insert(vec![2], Data::Ready(HostArray::f64(vec![2], vec![1.0, 2.0])));
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
        let x = state.insert(vec![2], Data::Ready(HostArray::f64(vec![2], vec![1.0, 2.0])));
        let t = state.record("scal", vec![PendingArg::Literal(2.0), PendingArg::Value(x.id)], vec![2]);
        let unused = state.record("copy", vec![PendingArg::Value(x.id)], vec![2]);
        let y = state.record("add", vec![PendingArg::Value(t.id), PendingArg::Value(x.id)], vec![2]);
        let (t_id, unused_id) = (t.id, unused.id);
        drop((t, unused));
        let (calls, outputs) = state.batch(&state.pending.clone());
        assert_eq!(outputs, [y.id]);
        assert_eq!(calls.iter().map(|c| c.result).collect::<Vec<_>>(), [t_id, y.id]);
        state
            .flush(&Backend::Reference, &Library::builtin().unwrap(), Precision::F64)
            .unwrap();
        assert!(state.data(t_id).is_none() && state.data(unused_id).is_none());
        assert!(matches!(state.data(y.id), Some(Data::Ready(a)) if a.to_f64() == [3.0, 6.0]));
    }
}
