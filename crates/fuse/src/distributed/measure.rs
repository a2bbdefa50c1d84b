//! Measuring the links between ranks for the collectives' cost model ([`Links`]).

use std::time::Instant;

use fuse_core::distribute::{Links, Transfer};
use fuse_core::HostData;

use super::Communicator;
use crate::error::{Error, Result};

/// Times of repeats of a collective, after warm-up.
const WARM_UP: usize = 10;

/// Measures the links between the ranks of `comm` (collective: every rank calls it): the
/// latency from all-reduces of one number, the bandwidth from all-gathers of 8 MiB a rank,
/// each the median of repeats. Every rank returns its own view; rank 0's is the one to keep.
pub fn measure_links(comm: &dyn Communicator) -> Result<Links> {
    let ranks = comm.ranks();
    if ranks < 2 {
        return Err(Error::Distribution(
            "one rank has no links to measure: run under `mpirun -n R` with R ≥ 2".into(),
        ));
    }
    let mut one = HostData::F64(vec![1.0]);
    let reduce = median_us(200, || comm.all_reduce_sum(&mut one))?;
    let latency_us = reduce / Links::steps(Transfer::AllReduce, ranks);
    let per_rank = 1 << 20;
    let block = HostData::F64(vec![0.0; per_rank]);
    let counts = vec![per_rank; ranks];
    let gather = median_us(20, || comm.all_gather(&block, &counts).map(drop))?;
    let received = (per_rank * (ranks - 1) * 8) as f64;
    let moving_us = (gather - Links::steps(Transfer::AllGather, ranks) * latency_us).max(gather / 2.0);
    Ok(Links {
        measured_on: format!("{ranks} ranks on {}", host_name()),
        latency_us,
        bandwidth_gbs: received / moving_us / 1e3,
    })
}

/// The median time of `repeats` calls of `collective`, in µs, after warm-up calls.
fn median_us(repeats: usize, mut collective: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARM_UP {
        collective()?;
    }
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        collective()?;
        times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[repeats / 2])
}

/// This machine's name, for the table.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "this machine".into())
}
