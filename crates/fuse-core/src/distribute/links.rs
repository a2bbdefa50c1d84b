//! What a collective costs: the α–β model of the links between ranks — a latency per message
//! step and a bandwidth per rank — measured by `mpirun -n R fuse calibrate --distributed`, or
//! an estimate for ranks sharing one machine.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Transfer;
use crate::error::{Diagnostic, Error, Location, Result};

/// The links between ranks, as a collective sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Links {
    /// Where and over how many ranks it was measured, or that it is an estimate.
    pub measured_on: String,
    /// Time of one message step, in µs.
    pub latency_us: f64,
    /// What one rank receives per second, in GB/s.
    pub bandwidth_gbs: f64,
}

impl Links {
    /// An estimate for ranks on one machine, exchanging through shared memory.
    pub fn estimate() -> Links {
        Links {
            measured_on:
                "an estimate for ranks on one machine (measure yours: mpirun -n R fuse calibrate --distributed -o FILE)"
                    .into(),
            latency_us: 2.0,
            bandwidth_gbs: 8.0,
        }
    }

    /// Reads a table written by [`Links::to_yaml`]; an error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Links> {
        let text = crate::file::read_text(path, crate::file::ENTRY_LIMIT).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        let bad = |why: String| Error::from(Diagnostic::new(Location::file(path.display().to_string()), why));
        let links: Links = serde_yaml::from_str(&text).map_err(|e| bad(format!("not a links table: {e}")))?;
        let usable = links.bandwidth_gbs.is_finite()
            && links.bandwidth_gbs > 0.0
            && links.latency_us.is_finite()
            && links.latency_us >= 0.0;
        if !usable {
            return Err(bad("latency_us must be ≥ 0 and bandwidth_gbs > 0".into()));
        }
        Ok(links)
    }

    /// The table as YAML.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).unwrap_or_default()
    }

    /// The message steps of a collective over `ranks` ranks (a tree or a ring's rounds).
    pub fn steps(transfer: Transfer, ranks: usize) -> f64 {
        let rounds = (ranks.max(1) as f64).log2().ceil();
        match transfer {
            Transfer::AllReduce => 2.0 * rounds,
            t if t.communicates() => rounds,
            _ => 0.0,
        }
    }

    /// Predicted µs of `transfer` over `ranks` ranks, each receiving `bytes`.
    pub fn time_us(&self, transfer: Transfer, bytes: u64, ranks: usize) -> f64 {
        if ranks <= 1 || bytes == 0 || !transfer.communicates() {
            return 0.0;
        }
        Links::steps(transfer, ranks) * self.latency_us + bytes as f64 / (self.bandwidth_gbs * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collective_costs_its_steps_and_its_bytes() {
        let links = Links {
            measured_on: "test".into(),
            latency_us: 1.0,
            bandwidth_gbs: 10.0,
        };
        // 4 ranks: 2 rounds; an all-reduce twice that. 10 GB/s is 10,000 bytes per µs.
        assert_eq!(links.time_us(Transfer::AllGather, 10_000, 4), 2.0 + 1.0);
        assert_eq!(links.time_us(Transfer::AllReduce, 10_000, 4), 4.0 + 1.0);
        assert_eq!(links.time_us(Transfer::Slice, 10_000, 4), 0.0);
        assert_eq!(links.time_us(Transfer::AllReduce, 10_000, 1), 0.0);
    }

    #[test]
    fn a_table_round_trips_and_a_bad_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("links.yaml");
        std::fs::write(&path, Links::estimate().to_yaml()).unwrap();
        assert_eq!(Links::load(&path).unwrap(), Links::estimate());
        std::fs::write(&path, "measured_on: x\nlatency_us: 1\nbandwidth_gbs: 0\n").unwrap();
        let err = Links::load(&path).unwrap_err().to_string();
        assert!(err.contains("links.yaml") && err.contains("bandwidth_gbs > 0"), "{err}");
        std::fs::write(&path, "latency: 1\n").unwrap();
        assert!(Links::load(&path)
            .unwrap_err()
            .to_string()
            .contains("not a links table"));
    }
}
