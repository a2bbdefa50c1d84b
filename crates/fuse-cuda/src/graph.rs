//! A plan's steps captured once as a CUDA graph and replayed with one launch.
//!
//! Where a plan's kernels take a few microseconds each (BLAS-2 at 2048² and below), launching
//! them one by one leaves the GPU idle between them while the host queues the next. A graph hands the driver every zero fill and launch at once. It is captured on a
//! private stream (the device's own is the legacy default stream, which cannot be captured)
//! and replayed on the device's stream, so it runs in order with everything else queued there.
//!
//! [`Replays`] decides, per set of buffers, whether replaying is worth it: only where the plan
//! has more than one step, and only after a replay has been timed faster than the steps.

use std::collections::VecDeque;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{result, CudaGraph, CudaStream};

use crate::device::Device;
use crate::error::{driver, CudaError};

/// A captured plan, ready to replay on its device's stream.
pub struct PlanGraph {
    graph: CudaGraph,
    device: Device,
}

impl std::fmt::Debug for PlanGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanGraph")
            .field("device", &self.device.info().ordinal)
            .finish()
    }
}

// SAFETY: a CUDA graph may be used from any thread so long as no two calls on it overlap; a
// `PlanGraph` is not `Sync`, so whoever shares one serialises its use (a `Mutex`).
unsafe impl Send for PlanGraph {}

impl PlanGraph {
    /// Captures what `queue` puts on the stream it is given (nothing runs), and uploads the
    /// graph so that its first replay costs what every other one does.
    pub(crate) fn capture(
        device: &Device,
        queue: impl FnOnce(&Arc<CudaStream>) -> Result<(), CudaError>,
    ) -> Result<PlanGraph, CudaError> {
        let stream = device.context().new_stream().map_err(driver("cuStreamCreate"))?;
        // Thread-local: work another thread queues meanwhile (on any stream) is not captured.
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(driver("cuStreamBeginCapture"))?;
        let queued = queue(&stream);
        // Ended whatever `queue` did: a stream left capturing would refuse all later work.
        let ended = stream.end_capture(CUgraphInstantiate_flags(0));
        queued?;
        let graph = ended.map_err(driver("cuStreamEndCapture"))?.ok_or_else(|| {
            CudaError::Unsupported("a plan captured as an empty graph (a fuse bug, please report)".into())
        })?;
        let graph = PlanGraph {
            graph,
            device: device.clone(),
        };
        // SAFETY: the executable graph is alive (owned by `graph`), the stream is the device's.
        unsafe { result::graph::upload(graph.graph.cu_graph_exec(), graph.device.stream().cu_stream()) }
            .map_err(driver("cuGraphUpload"))?;
        Ok(graph)
    }

    /// Queues the captured steps on the device's stream (no wait).
    pub fn replay(&self) -> Result<(), CudaError> {
        self.device
            .context()
            .bind_to_thread()
            .map_err(driver("cuCtxSetCurrent"))?;
        // SAFETY: as in `capture`.
        unsafe { result::graph::launch(self.graph.cu_graph_exec(), self.device.stream().cu_stream()) }
            .map_err(driver("cuGraphLaunch"))
    }
}

/// How a plan can run once on one set of buffers, each way returning its time (µs).
pub trait Ways<G> {
    /// Queues the steps one by one and times them.
    fn steps(&mut self) -> Result<f64, CudaError>;
    /// Captures the steps as a graph (nothing runs).
    fn capture(&mut self) -> Result<G, CudaError>;
    /// Replays `graph` and times it.
    fn replay(&mut self, graph: &G) -> Result<f64, CudaError>;
}

/// The ways a plan's runs went on the sets of buffers it met last, and which way the next run
/// on each set goes. A set is named by a key: the sizes and the buffers' addresses, which a
/// graph keeps. The first run on a set is not timed (modules load, caches fill); the second
/// runs the steps and times them; the third captures a graph and times its replay; from then
/// on every run goes the faster way. Where capturing or the first replay fails, the set keeps
/// running the steps.
#[derive(Debug)]
pub struct Replays<G> {
    /// Whether the plan has more than one step: a graph of one launch saves nothing.
    worth_trying: bool,
    /// The sets met last, the one met longest ago first.
    sets: VecDeque<(Vec<u64>, Way<G>)>,
}

/// How many sets of buffers a plan remembers: a program called in a loop goes round two (the
/// pool hands its buffers back in turn), which stay with room to spare.
const SETS: usize = 4;

/// Where the runs on one set of buffers stand.
#[derive(Debug)]
enum Way<G> {
    /// Never run.
    New,
    /// Run once: that time is not taken (lazily loaded kernels, cold caches).
    Warm,
    /// The steps took this long (µs) on the last run.
    Stepped(f64),
    /// A replay was faster: every run replays.
    Graph(G),
    /// Steps it is.
    Steps,
}

impl<G> Replays<G> {
    /// No set met yet, for a plan of `steps` steps.
    pub fn new(steps: usize) -> Self {
        Replays {
            worth_trying: steps > 1,
            sets: VecDeque::new(),
        }
    }

    /// Runs once on the set of buffers `key` names, the way it goes now; the time (µs).
    pub fn run(&mut self, key: Vec<u64>, ways: &mut dyn Ways<G>) -> Result<f64, CudaError> {
        if !self.worth_trying {
            return ways.steps();
        }
        // The set met now moves to the back: the one met longest ago is forgotten first.
        let entry = match self.sets.iter().position(|(k, _)| *k == key) {
            Some(at) => self.sets.remove(at).expect("a position found above"),
            None => (key, Way::New),
        };
        if self.sets.len() == SETS {
            self.sets.pop_front();
        }
        self.sets.push_back(entry);
        let way = &mut self.sets.back_mut().expect("pushed above").1;
        match std::mem::replace(way, Way::Steps) {
            Way::New => {
                let micros = ways.steps()?;
                *way = Way::Warm;
                Ok(micros)
            }
            Way::Warm => {
                let micros = ways.steps()?;
                *way = Way::Stepped(micros);
                Ok(micros)
            }
            // A graph that cannot be captured or replayed here leaves the steps to run: the
            // steps rewrite every result, so a replay that failed half way leaves nothing behind.
            Way::Stepped(stepped) => match ways.capture().and_then(|g| Ok((ways.replay(&g)?, g))) {
                Ok((replayed, graph)) => {
                    if replayed < stepped {
                        *way = Way::Graph(graph);
                    }
                    Ok(replayed)
                }
                Err(_) => ways.steps(),
            },
            Way::Graph(graph) => {
                let micros = ways.replay(&graph);
                *way = Way::Graph(graph);
                micros
            }
            Way::Steps => ways.steps(),
        }
    }

    /// Whether the next run on `key`'s buffers replays a graph.
    pub fn replays(&self, key: &[u64]) -> bool {
        self.sets
            .iter()
            .any(|(k, way)| k == key && matches!(way, Way::Graph(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ways with scripted times; counts what ran.
    #[derive(Default)]
    struct Scripted {
        stepped: f64,
        replayed: f64,
        capture_fails: bool,
        replay_fails: bool,
        steps: usize,
        captures: usize,
        replays: usize,
    }

    impl Ways<u32> for Scripted {
        fn steps(&mut self) -> Result<f64, CudaError> {
            self.steps += 1;
            Ok(self.stepped)
        }
        fn capture(&mut self) -> Result<u32, CudaError> {
            self.captures += 1;
            match self.capture_fails {
                true => Err(CudaError::Unsupported("no capture here".into())),
                false => Ok(7),
            }
        }
        fn replay(&mut self, graph: &u32) -> Result<f64, CudaError> {
            assert_eq!(*graph, 7);
            self.replays += 1;
            match self.replay_fails {
                true => Err(CudaError::Unsupported("no replay here".into())),
                false => Ok(self.replayed),
            }
        }
    }

    fn scripted(stepped: f64, replayed: f64) -> Scripted {
        Scripted {
            stepped,
            replayed,
            ..Scripted::default()
        }
    }

    #[test]
    fn a_faster_replay_takes_over_from_the_third_run() {
        let mut replays = Replays::new(3);
        let mut ways = scripted(10.0, 6.0);
        let times: Vec<f64> = (0..5).map(|_| replays.run(vec![1, 2], &mut ways).unwrap()).collect();
        assert_eq!(times, [10.0, 10.0, 6.0, 6.0, 6.0]);
        assert_eq!((ways.steps, ways.captures, ways.replays), (2, 1, 3));
        assert!(replays.replays(&[1, 2]));
    }

    #[test]
    fn a_slower_replay_is_dropped_and_never_captured_again() {
        let mut replays = Replays::new(2);
        let mut ways = scripted(5.0, 5.5);
        for _ in 0..6 {
            replays.run(vec![9], &mut ways).unwrap();
        }
        assert_eq!((ways.steps, ways.captures, ways.replays), (5, 1, 1));
        assert!(!replays.replays(&[9]));
    }

    #[test]
    fn one_step_plans_and_failed_captures_or_replays_run_the_steps() {
        let mut one = Replays::new(1);
        let mut ways = scripted(5.0, 1.0);
        for _ in 0..4 {
            assert_eq!(one.run(vec![1], &mut ways).unwrap(), 5.0);
        }
        assert_eq!((ways.steps, ways.captures), (4, 0));
        for (capture_fails, replay_fails) in [(true, false), (false, true)] {
            let mut failing = Replays::new(2);
            let mut ways = Scripted {
                capture_fails,
                replay_fails,
                ..scripted(5.0, 1.0)
            };
            for _ in 0..5 {
                assert_eq!(failing.run(vec![1], &mut ways).unwrap(), 5.0);
            }
            assert_eq!((ways.steps, ways.captures), (5, 1));
            assert_eq!(ways.replays, usize::from(replay_fails));
            assert!(!failing.replays(&[1]));
        }
    }

    #[test]
    fn each_set_of_buffers_has_its_own_graph_and_the_oldest_is_forgotten() {
        let mut replays = Replays::new(2);
        let mut ways = scripted(10.0, 6.0);
        for key in 0..SETS as u64 {
            for _ in 0..3 {
                replays.run(vec![key], &mut ways).unwrap();
            }
        }
        assert_eq!(ways.captures, SETS);
        assert!((0..SETS as u64).all(|k| replays.replays(&[k])));
        replays.run(vec![0], &mut ways).unwrap(); // set 0 is now the one met last
        replays.run(vec![99], &mut ways).unwrap();
        assert!(!replays.replays(&[1]), "the set met longest ago is forgotten");
        assert!(replays.replays(&[0]) && replays.replays(&[2]));
        // The forgotten set starts over: warm, stepped, captured.
        for _ in 0..3 {
            replays.run(vec![1], &mut ways).unwrap();
        }
        assert_eq!(ways.captures, SETS + 1);
    }
}
