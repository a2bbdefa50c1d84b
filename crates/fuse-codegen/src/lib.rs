pub mod generate;
pub mod nvrtc;
