//! A session matrix read in place from the caller's memory (`Session::matrix_in_place`, what
//! fuseblas uses for a numpy A): the same results as a session's own copy on every backend,
//! the memory let go with the value, read back as a copy, and the wrong precision or length
//! refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use fuse::stages::fuse_core::DataView;
use fuse::{Backend, Error, InPlace, Session};

/// Memory of the test's own, counting how many of its kind are alive.
struct Held {
    elements: Vec<f64>,
    alive: Arc<AtomicUsize>,
}

// SAFETY: the elements are never written after construction and live as long as `Held`.
unsafe impl InPlace for Held {
    fn elements(&self) -> DataView<'_> {
        DataView::F64(&self.elements)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

fn held(elements: Vec<f64>, alive: &Arc<AtomicUsize>) -> Arc<Held> {
    alive.fetch_add(1, Ordering::SeqCst);
    Arc::new(Held {
        elements,
        alive: Arc::clone(alive),
    })
}

/// A deterministic m×n matrix and n-vector of awkward values.
fn system(m: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let a = (0..m * n).map(|k| ((k * 7919) % 263) as f64 / 37.0 - 3.1).collect();
    let x = (0..n).map(|k| ((k * 104_729) % 97) as f64 / 13.0 - 3.3).collect();
    (a, x)
}

#[test]
fn a_matrix_read_in_place_computes_as_a_copy_does_and_is_let_go_with_its_value() {
    let (m, n) = (37, 53);
    let (a, x) = system(m, n);
    // A·x and Aᵀ·(A·x) in f64, by loops here.
    let ax: Vec<f64> = (0..m).map(|i| (0..n).map(|j| a[i * n + j] * x[j]).sum()).collect();
    let atax: Vec<f64> = (0..n).map(|j| (0..m).map(|i| a[i * n + j] * ax[i]).sum()).collect();
    for backend in ["reference", "cpu", "emulate"] {
        let backend: Backend = backend.parse().unwrap();
        let alive = Arc::new(AtomicUsize::new(0));
        let s = Session::<f64>::new(backend.clone()).unwrap();
        let borrowed = s.matrix_in_place(m, n, held(a.clone(), &alive)).unwrap();
        let xv = s.vector(x.clone()).unwrap();
        let t = s.dgemv(&borrowed, &xv).unwrap();
        let y = s.dgemtv(&borrowed, &t).unwrap();
        for (got, want) in [(s.read(&t).unwrap(), &ax), (s.read(&y).unwrap(), &atax)] {
            for (g, w) in got.iter().zip(want.iter()) {
                assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{backend:?}: {g} against {w}");
            }
        }
        assert_eq!(s.read(&borrowed).unwrap(), a, "{backend:?}: read back as a copy");
        assert_eq!(alive.load(Ordering::SeqCst), 1, "held while the value lives");
        drop(borrowed);
        s.flush().unwrap();
        assert_eq!(alive.load(Ordering::SeqCst), 0, "{backend:?}: let go with the value");
    }
}

#[test]
fn memory_in_place_of_another_precision_or_length_is_refused() {
    let alive = Arc::new(AtomicUsize::new(0));
    let f32_session = Session::<f32>::new(Backend::Reference).unwrap();
    let err = f32_session
        .matrix_in_place(2, 3, held(vec![0.0; 6], &alive))
        .unwrap_err();
    assert!(matches!(err, Error::Precision { .. }), "{err}");
    let f64_session = Session::<f64>::new(Backend::Reference).unwrap();
    let err = f64_session
        .matrix_in_place(2, 3, held(vec![0.0; 5], &alive))
        .unwrap_err();
    assert!(err.to_string().contains("5"), "{err}");
    assert_eq!(alive.load(Ordering::SeqCst), 0, "nothing kept after a refusal");
}
