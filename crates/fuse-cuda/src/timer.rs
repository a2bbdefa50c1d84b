//! Timing with CUDA events, the way METHOD.md asks: warm-up runs first (module load, first-touch
//! allocation and cuBLAS workspace stay out of the numbers), then the median of repeated runs,
//! each between two events on the stream, so that host-side launch latency is not counted.
//!
//! Before each timed run the L2 cache can be flushed by reading a buffer twice its size (outside
//! the events): every run then starts cold, as a single call in an application would, and a
//! problem that fits in L2 is not reported at cache speed.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, LaunchConfig, PushKernelArg};
use serde::Serialize;

use crate::cache::ModuleCache;
use crate::device::Device;
use crate::error::{driver, CudaError};
use crate::kernels;
use crate::module::CudaModuleSet;

/// How to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingOptions {
    /// Untimed runs first.
    pub warmup: usize,
    /// Timed runs; the median is reported.
    pub runs: usize,
    /// Flush the L2 cache before each timed run.
    pub flush_l2: bool,
}

impl Default for TimingOptions {
    /// 5 warm-up runs, the median of 25, L2 flushed.
    fn default() -> Self {
        TimingOptions {
            warmup: 5,
            runs: 25,
            flush_l2: true,
        }
    }
}

/// The distribution of a timed region, µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timing {
    /// Median.
    pub median_us: f64,
    /// Fastest run.
    pub min_us: f64,
    /// Slowest run.
    pub max_us: f64,
    /// Timed runs.
    pub runs: usize,
}

impl Timing {
    /// Summarises run times (µs); `None` when there are none.
    pub fn from_runs(mut times: Vec<f64>) -> Option<Timing> {
        if times.is_empty() {
            return None;
        }
        times.sort_by(f64::total_cmp);
        let n = times.len();
        let median = match n % 2 {
            1 => times[n / 2],
            _ => (times[n / 2 - 1] + times[n / 2]) / 2.0,
        };
        Some(Timing {
            median_us: median,
            min_us: times[0],
            max_us: times[n - 1],
            runs: n,
        })
    }
}

/// Two timing events on a device's stream, and the L2 flusher.
pub struct Timer {
    device: Device,
    start: CudaEvent,
    end: CudaEvent,
    flusher: Option<Flusher>,
}

impl Timer {
    /// Events on `device`; with `flush_l2`, the flush kernel and its buffer too.
    pub fn new(device: &Device, flush_l2: bool) -> Result<Timer, CudaError> {
        let event = || {
            device
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(driver("cuEventCreate"))
        };
        Ok(Timer {
            device: device.clone(),
            start: event()?,
            end: event()?,
            flusher: flush_l2.then(|| Flusher::new(device)).transpose()?,
        })
    }

    /// Times `body` (which queues work on the device's stream) as `options` says.
    pub fn time(
        &self,
        options: &TimingOptions,
        body: &mut dyn FnMut() -> Result<(), CudaError>,
    ) -> Result<Timing, CudaError> {
        for _ in 0..options.warmup {
            body()?;
        }
        self.device.synchronize()?;
        let mut times = Vec::with_capacity(options.runs);
        for _ in 0..options.runs.max(1) {
            times.push(self.once(body)?);
        }
        Ok(Timing::from_runs(times).expect("at least one run"))
    }

    /// One timed run, µs.
    pub fn once(&self, body: &mut dyn FnMut() -> Result<(), CudaError>) -> Result<f64, CudaError> {
        if let Some(flusher) = &self.flusher {
            flusher.flush(&self.device)?;
        }
        let stream = self.device.stream();
        self.start.record(stream).map_err(driver("cuEventRecord"))?;
        body()?;
        self.end.record(stream).map_err(driver("cuEventRecord"))?;
        let ms = self.start.elapsed_ms(&self.end).map_err(driver("cuEventElapsedTime"))?;
        Ok(ms as f64 * 1e3)
    }
}

/// Reads a zeroed buffer of twice the L2 size.
struct Flusher {
    kernels: Arc<CudaModuleSet>,
    buffer: CudaSlice<u8>,
    sink: CudaSlice<u32>,
    sms: u32,
}

impl Flusher {
    fn new(device: &Device) -> Result<Flusher, CudaError> {
        let bytes = (2 * device.info().l2_bytes.max(1 << 20)) as usize;
        let stream = device.stream();
        Ok(Flusher {
            kernels: Arc::new(kernels::load(device, &ModuleCache::default_location())?),
            buffer: stream.alloc_zeros::<u8>(bytes).map_err(driver("cuMemAlloc"))?,
            sink: stream.alloc_zeros::<u32>(1).map_err(driver("cuMemAlloc"))?,
            sms: device.info().sms.max(1),
        })
    }

    fn flush(&self, device: &Device) -> Result<(), CudaError> {
        let function = self.kernels.function(kernels::FLUSH)?;
        let vectors = (self.buffer.len() / 16) as i64;
        let config = LaunchConfig {
            grid_dim: (self.sms * 4, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let stream = device.stream();
        let mut builder = stream.launch_builder(function);
        builder.arg(&self.buffer).arg(&vectors).arg(&self.sink);
        // SAFETY: (const uint4*, long long, unsigned*) as the kernel declares; the buffer holds
        // `vectors` 16-byte vectors (cudarc allocations are 256-byte aligned).
        unsafe { builder.launch(config) }.map_err(driver("cuLaunchKernel"))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        let t = Timing::from_runs(vec![3.0, 1.0, 2.0]).unwrap();
        assert_eq!((t.median_us, t.min_us, t.max_us, t.runs), (2.0, 1.0, 3.0, 3));
        assert_eq!(Timing::from_runs(vec![4.0, 1.0, 2.0, 3.0]).unwrap().median_us, 2.5);
        assert!(Timing::from_runs(Vec::new()).is_none());
    }

    #[test]
    fn the_defaults_follow_the_method() {
        let o = TimingOptions::default();
        assert!(o.runs >= 20 && o.warmup >= 1 && o.flush_l2);
    }
}
