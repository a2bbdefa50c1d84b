//! The fused CPU backend of fuse: runs plans fast on the CPU's cores ([`fused`]).

pub mod fused;
