pub mod nvrtc;
