//! When a solver reads its residual, and what it concludes from it.
//!
//! Each iteration is a [`Step`]: the iterate and ‖r‖ at its start, the quantities SciPy tests
//! for a breakdown, and (BiCGSTAB) a half-step residual that may end the solve early. Every
//! `check_every` iterations the host reads one number: the latest ‖r‖ plus the sum of the
//! guards of every test since the last read ([`Ops::guard`]: 0 where fine, NaN where broken).
//! A finite number is ‖r‖ itself. A NaN sends the monitor back over the steps since the last
//! read, in order, reading what it needs to find the first one that converged or broke down —
//! the one place it reads more than the residual.

use super::ops::Ops;
use super::solution::{Breakdown, Callback, Options, Outcome, Solution};
use crate::element::Element;
use crate::error::Result;
use crate::session::{Scalar, Vector};

/// A quantity the iteration must not let vanish.
struct Test<T: Element> {
    value: Scalar<T>,
    tol: f64,
    breakdown: Breakdown,
}

impl<T: Element> Test<T> {
    /// Whether `v` breaks the iteration down, as [`Ops::guard`] decides on the device.
    fn breaks(&self, v: f64) -> bool {
        v.is_nan() || if self.tol > 0.0 { v.abs() < self.tol } else { v == 0.0 }
    }
}

/// One iteration as the monitor sees it.
struct Step<T: Element> {
    x: Vector<T>,
    residual: Scalar<T>,
    tests: Vec<Test<T>>,
    early: Option<(Scalar<T>, Vector<T>)>,
}

/// How the iterations since the last read ended, where they did.
struct End<T: Element> {
    x: Vector<T>,
    iterations: usize,
    outcome: Outcome,
}

/// Watches a solve's iterations.
pub(super) struct Monitor<'o, 's, T: Element> {
    ops: &'o Ops<'s, T>,
    atol: f64,
    every: usize,
    /// Iterations begun.
    iteration: usize,
    /// The steps since the last read; the first is iteration `iteration - steps.len()`.
    steps: Vec<Step<T>>,
    guards: Option<Scalar<T>>,
    residuals: Vec<f64>,
    end: Option<End<T>>,
    callback: Option<Callback<T>>,
}

impl<'o, 's, T: Element> Monitor<'o, 's, T> {
    /// A monitor stopping at ‖r‖ < `atol`, reading every `every` iterations.
    pub fn new(ops: &'o Ops<'s, T>, atol: f64, options: &Options<T>) -> Self {
        Monitor {
            ops,
            atol,
            every: options.check_every,
            iteration: 0,
            steps: Vec::new(),
            guards: None,
            residuals: Vec::new(),
            end: None,
            callback: options.callback.clone(),
        }
    }

    /// An iteration begins at iterate `x`, whose residual has norm `residual`.
    pub fn begin(&mut self, x: &Vector<T>, residual: Scalar<T>) {
        self.iteration += 1;
        self.steps.push(Step {
            x: x.clone(),
            residual,
            tests: Vec::new(),
            early: None,
        });
    }

    /// The iteration breaks down (`breakdown`) where `value` is below `tol` in magnitude (or
    /// zero, for `tol` = 0); tests are made in the order they are given.
    pub fn test(&mut self, value: &Scalar<T>, tol: f64, breakdown: Breakdown) -> Result<()> {
        let guard = self.ops.guard(value, tol)?;
        self.guards = Some(match self.guards.take() {
            Some(g) => self.ops.plus(&g, &guard)?,
            None => guard,
        });
        self.step().tests.push(Test {
            value: value.clone(),
            tol,
            breakdown,
        });
        Ok(())
    }

    /// The iteration converges at iterate `x` if its half-step residual `residual` does.
    pub fn early(&mut self, residual: Scalar<T>, x: &Vector<T>) {
        self.step().early = Some((residual, x.clone()));
    }

    fn step(&mut self) -> &mut Step<T> {
        self.steps.last_mut().expect("an iteration has begun")
    }

    /// The iteration is recorded, and `x` is the iterate after it; reads the residual where one
    /// is due (every `every` iterations, and at the last one). True where the solve is over.
    pub fn end(&mut self, last: bool, x: &Vector<T>) -> Result<bool> {
        if !last && !self.iteration.is_multiple_of(self.every) {
            return Ok(false);
        }
        let step = self.steps.last().expect("an iteration has begun");
        let status = match &self.guards {
            Some(g) => self.ops.plus(&step.residual, g)?,
            None => step.residual.clone(),
        };
        let value = self.read(&status)?;
        self.end = match value.is_finite() {
            true => self.after_a_finite_read(value)?,
            false => Some(self.after_a_breakdown()?),
        };
        // Not where the solve ends here: SciPy never hands its callback an iterate past the
        // solution it returns.
        if let (Some(callback), Some(&residual), None) = (&self.callback, self.residuals.last(), &self.end) {
            callback(self.ops.session, self.iteration, residual, x)?;
        }
        self.steps.clear();
        self.guards = None;
        Ok(self.end.is_some())
    }

    /// The latest step's residual is `value`: converged, or on with the next.
    fn after_a_finite_read(&mut self, value: f64) -> Result<Option<End<T>>> {
        self.residuals.push(value);
        let step = self.steps.last().expect("an iteration has begun");
        let iterations = self.iteration - 1;
        if value < self.atol {
            return Ok(Some(End {
                x: step.x.clone(),
                iterations,
                outcome: Outcome::Converged,
            }));
        }
        if let Some((residual, x)) = &step.early {
            if self.read(residual)? < self.atol {
                return Ok(Some(End {
                    x: x.clone(),
                    iterations: iterations + 1,
                    outcome: Outcome::Converged,
                }));
            }
        }
        Ok(None)
    }

    /// Something since the last read is NaN: the first step that converged or broke down.
    fn after_a_breakdown(&mut self) -> Result<End<T>> {
        let first = self.iteration - self.steps.len();
        let mut last_finite = None;
        for (k, step) in self.steps.iter().enumerate() {
            let residual = self.read(&step.residual)?;
            if !residual.is_finite() {
                break;
            }
            self.residuals.push(residual);
            last_finite = Some(k);
            let end = |outcome| End {
                x: step.x.clone(),
                iterations: first + k,
                outcome,
            };
            if residual < self.atol {
                return Ok(end(Outcome::Converged));
            }
            for test in &step.tests {
                if test.breaks(self.read(&test.value)?) {
                    return Ok(end(Outcome::Breakdown(test.breakdown)));
                }
            }
            if let Some((residual, x)) = &step.early {
                if self.read(residual)? < self.atol {
                    return Ok(End {
                        x: x.clone(),
                        iterations: first + k + 1,
                        outcome: Outcome::Converged,
                    });
                }
            }
        }
        // Nothing SciPy tests vanished: the iteration overflowed. The last iterate whose
        // residual was finite is the answer (the first of these steps' iterates was checked
        // finite by the read before).
        let k = last_finite.unwrap_or(0);
        Ok(End {
            x: self.steps[k].x.clone(),
            iterations: first + k,
            outcome: Outcome::Breakdown(Breakdown::NonFinite),
        })
    }

    fn read(&self, s: &Scalar<T>) -> Result<f64> {
        Ok(self.ops.session.read_scalar(s)?.to_f64())
    }

    /// The solution: where the monitor ended the solve, else `x` after `maxiter` iterations.
    pub fn solution(self, x: Vector<T>, maxiter: usize) -> Solution<T> {
        let end = self.end.unwrap_or(End {
            x,
            iterations: maxiter,
            outcome: Outcome::MaxIterations,
        });
        Solution {
            x: end.x,
            iterations: end.iterations,
            outcome: end.outcome,
            residuals: self.residuals,
        }
    }
}
