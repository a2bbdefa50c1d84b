//! The BiCG example's solver converges, and from its third iteration on compiles nothing.

#[path = "../examples/bicg/solver.rs"]
mod solver;

use std::sync::Mutex;

use fuse::distributed::LocalRanks;
use fuse::{Backend, Forecast, Session};

/// The emulated device's buffer pool is one per process: tests that count its allocations run
/// alone on it (another test's sessions take and return the same one-number buffers).
static EMULATED_DEVICE: Mutex<()> = Mutex::new(());

#[test]
fn bicg_converges_on_a_nonsymmetric_system() {
    let system = solver::generate(200, 11);
    assert!(
        (0..200).any(|i| system.a[i * 200 + 1] != system.a[200 + i]),
        "A is nonsymmetric"
    );
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let solution = solver::bicg(&s, &system, 1e-10, 100, |_, _| {}).unwrap();
    let last = *solution.residuals.last().unwrap();
    assert!(last < 1e-10, "recurrence residual {last:e}");
    let truth = solver::true_residual(&system, &solution.x);
    assert!(truth < 1e-6, "true residual {truth:e}");
}

#[test]
fn bicg_iterations_after_the_second_compile_nothing() {
    let system = solver::generate(100, 3);
    let s = Session::<f64>::new(Backend::Reference).unwrap();
    let mut compilations = Vec::new();
    let solution = solver::bicg(&s, &system, 1e-14, 8, |_, _| compilations.push(s.stats().compilations)).unwrap();
    assert!(solution.residuals.len() >= 5, "{:?}", solution.residuals);
    // Iterations 1 and 2 see r = r̃ = p = p̃ = b as one shared value, so their graphs differ.
    let steady = compilations[2];
    assert!(compilations[3..].iter().all(|&c| c == steady), "{compilations:?}");
    assert!(
        // One flush an iteration: the residual's read (α and β stay on the device).
        s.stats().cache_hits >= compilations.len() as u64 - 3,
        "{:?}",
        s.stats()
    );
}

/// On a device (the emulated one here, the same bookkeeping as a GPU's), BiCG's matrix goes to
/// the device once: every later iteration moves only vectors and scalars, allocates nothing
/// new, and the results are the CPU backend's.
#[test]
fn bicg_on_a_device_uploads_the_matrix_once_and_reuses_its_buffers() {
    let _alone = EMULATED_DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let n = 512;
    let system = solver::generate(n, 7);
    let run = |backend: Backend| {
        let s = Session::<f64>::new(backend).unwrap();
        let mut steps = Vec::new();
        let mut before = s.stats();
        let solution = solver::bicg(&s, &system, 0.0, 20, |_, _| {
            steps.push(s.stats().since(&before));
            before = s.stats();
        });
        (solution.unwrap(), steps)
    };
    let (device, steps) = run(Backend::Emulate);
    let (cpu, _) = run(Backend::Cpu);
    assert_eq!(steps.len(), 20);
    let matrix = (n * n * 8) as u64;
    assert!(steps[0].to_device >= matrix, "first iteration: {:?}", steps[0]);
    let vector = (n * 8) as u64;
    for (k, step) in steps.iter().enumerate().skip(1) {
        let moved = step.to_device + step.from_device;
        assert!(
            moved <= 8 * vector,
            "iteration {}: {moved} bytes moved ({step:?})",
            k + 1
        );
    }
    for (k, step) in steps.iter().enumerate().skip(3) {
        assert_eq!(step.device_allocations, 0, "iteration {}: {step:?}", k + 1);
    }
    // α and β are computed on the device: an iteration reads one scalar, the residual.
    for (k, step) in steps.iter().enumerate().skip(1) {
        assert_eq!(step.from_device, 8, "iteration {}: {step:?}", k + 1);
    }
    // The same arithmetic in another order: equal to rounding, and converged alike.
    let scale = cpu.x.iter().map(|v| v.abs()).fold(0.0, f64::max);
    for (i, (a, b)) in device.x.iter().zip(&cpu.x).enumerate() {
        assert!((a - b).abs() <= 1e-12 * scale, "x[{i}]: emulated {a}, cpu {b}");
    }
    for (k, (a, b)) in device.residuals.iter().zip(&cpu.residuals).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.max(1e-12),
            "iteration {}: residual {a:e} vs {b:e}",
            k + 1
        );
    }
}

/// Two sessions on one device, each on its own thread and sharing the device's buffer pool,
/// do not disturb each other: each gets what it gets alone on the CPU.
#[test]
fn two_sessions_on_one_device_run_side_by_side() {
    let _alone = EMULATED_DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let solve = |seed: u64, backend: Backend| {
        let system = solver::generate(160 + seed as usize, seed);
        let s = Session::<f64>::new(backend).unwrap();
        solver::bicg(&s, &system, 0.0, 12, |_, _| {}).unwrap().x
    };
    let threads: Vec<_> = [5, 6]
        .into_iter()
        .map(|seed| std::thread::spawn(move || (seed, solve(seed, Backend::Emulate))))
        .collect();
    for thread in threads {
        let (seed, device) = thread.join().unwrap();
        let cpu = solve(seed, Backend::Cpu);
        let scale = cpu.iter().map(|v| v.abs()).fold(0.0, f64::max);
        for (i, (a, b)) in device.iter().zip(&cpu).enumerate() {
            assert!((a - b).abs() <= 1e-12 * scale, "seed {seed}, x[{i}]: {a} vs {b}");
        }
    }
}

/// Over ranks (threads here, MPI ranks under mpirun: the same collectives), each holding its
/// rows of A, BiCG follows the single-process residual history to rounding and solves the
/// same system; the distributed loop also compiles nothing after its first iterations.
#[test]
fn bicg_over_ranks_follows_the_single_process_residual_history() {
    let system = solver::generate(157, 9);
    let single = Session::<f64>::new(Backend::Cpu).unwrap();
    let want = solver::bicg(&single, &system, 0.0, 25, |_, _| {}).unwrap();
    for ranks in [2, 3, 5] {
        let results = LocalRanks::new(ranks).run(|comm| {
            let s = Session::<f64>::distributed(comm, Backend::Cpu).unwrap();
            let mut compilations = Vec::new();
            let solution = solver::bicg(&s, &system, 0.0, 25, |_, _| compilations.push(s.stats().compilations));
            (solution.unwrap(), compilations)
        });
        for (rank, (got, compilations)) in results.iter().enumerate() {
            assert_eq!(got.residuals.len(), want.residuals.len(), "rank {rank} of {ranks}");
            for (k, (a, b)) in got.residuals.iter().zip(&want.residuals).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-8 * b,
                    "rank {rank} of {ranks}, iteration {}: {a:e} vs {b:e}",
                    k + 1
                );
            }
            let scale = want.x.iter().map(|v| v.abs()).fold(0.0, f64::max);
            for (i, (a, b)) in got.x.iter().zip(&want.x).enumerate() {
                assert!((a - b).abs() <= 1e-10 * scale, "rank {rank}, x[{i}]: {a} vs {b}");
            }
            let steady = compilations[3];
            assert!(compilations[4..].iter().all(|&c| c == steady), "{compilations:?}");
        }
    }
}

/// A distributed session on a device keeps each rank's rows of A there: after the first
/// iteration only vectors cross between host and device (the collectives, through the host on
/// the emulated device; nothing but scalars with NCCL between GPUs), and the residual history
/// is the single-process one.
#[test]
fn bicg_over_ranks_on_a_device_keeps_each_ranks_rows_there() {
    let _alone = EMULATED_DEVICE.lock().unwrap_or_else(|e| e.into_inner());
    let n = 157;
    let system = solver::generate(n, 9);
    let single = Session::<f64>::new(Backend::Cpu).unwrap();
    let want = solver::bicg(&single, &system, 0.0, 25, |_, _| {}).unwrap();
    for ranks in [1, 2, 3] {
        let results = LocalRanks::new(ranks).run(|comm| {
            let s = Session::<f64>::distributed(comm, Backend::Emulate).unwrap();
            let (mut steps, mut before) = (Vec::new(), s.stats());
            let solution = solver::bicg(&s, &system, 0.0, 25, |_, _| {
                steps.push(s.stats().since(&before));
                before = s.stats();
            });
            (solution.unwrap(), steps, s.rows(n).unwrap().len(), s.collectives())
        });
        for (rank, (got, steps, rows, collectives)) in results.into_iter().enumerate() {
            assert!(collectives.is_some_and(|c| c.starts_with("through the host")));
            for (k, (a, b)) in got.residuals.iter().zip(&want.residuals).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-8 * b,
                    "rank {rank} of {ranks}, iteration {}: {a:e} vs {b:e}",
                    k + 1
                );
            }
            let matrix_rows = (rows * n * 8) as u64;
            assert!(steps[0].to_device >= matrix_rows, "rank {rank}: {:?}", steps[0]);
            let vector = (n * 8) as u64;
            for (k, step) in steps.iter().enumerate().skip(1) {
                let moved = step.to_device + step.from_device;
                assert!(
                    moved <= 12 * vector,
                    "rank {rank} of {ranks}, iteration {}: {step:?}",
                    k + 1
                );
                // The communication of an iteration: the sum of Aᵀ·p̃'s partial vectors, this
                // rank's rows of p gathered, and three scalars (α's and β's dots, the residual).
                let exchanged = (step.collectives, step.communicated);
                let want = (5, vector + (rows as u64 + 3) * 8);
                assert_eq!(exchanged, want, "rank {rank} of {ranks}, iteration {}", k + 1);
            }
        }
    }
}

/// A distributed session holds row-block results as row blocks: `read` gives this rank's rows,
/// `gather` all of them; sums over rows come back whole on every rank.
#[test]
fn a_distributed_session_reads_local_rows_and_gathers_the_whole() {
    let (m, n) = (11, 4);
    let a: Vec<f64> = (0..m * n).map(|k| solver::uniform(1, k as u64)).collect();
    let p: Vec<f64> = (0..n).map(|k| solver::uniform(2, k as u64)).collect();
    let r: Vec<f64> = (0..m).map(|k| solver::uniform(3, k as u64)).collect();
    let q_want: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * p[j]).sum()).collect();
    let s_want: Vec<f64> = (0..n).map(|j| (0..m).map(|i| a[i * n + j] * r[i]).sum()).collect();
    let results = LocalRanks::new(3).run(|comm| -> fuse::Result<_> {
        let s = Session::<f64>::distributed(comm, Backend::Cpu)?;
        let rows = s.rows(m)?;
        let a_rows = s.matrix_rows(m, n, a[rows.start * n..rows.end * n].to_vec())?;
        let r_rows = s.vector_rows(m, r[rows.clone()].to_vec())?;
        let p = s.vector(p.clone())?;
        let q = s.dgemv(&a_rows, &p)?;
        let t = s.dgemtv(&a_rows, &r_rows)?;
        let first = s.forecast();
        let read = (
            s.local_rows(&q)?,
            s.read(&q)?,
            s.gather(&q)?,
            s.local_rows(&t)?,
            s.read(&t)?,
        );
        let flushes = s.stats().flushes;
        let _again = (s.dgemv(&a_rows, &p)?, s.dgemtv(&a_rows, &r_rows)?);
        let forecasts = (first, s.forecast());
        Ok((rows, read, flushes, forecasts))
    });
    for result in results {
        let (rows, (q_rows, q_local, q_all, t_rows, t), flushes, forecasts) = result.unwrap();
        assert!(
            matches!(forecasts, (Forecast::Compile, Forecast::Run(_))),
            "{forecasts:?}"
        );
        assert_eq!(q_rows, Some(rows.clone()));
        close(&q_local, &q_want[rows]);
        close(&q_all, &q_want);
        assert_eq!(t_rows, None, "a sum over rows is whole on every rank");
        close(&t, &s_want);
        assert_eq!(flushes, 1, "q and t ran as one program");
    }
}

fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}
