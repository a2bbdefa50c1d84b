pub mod dynlib;
pub mod generate;
pub mod nvrtc;
pub mod profile;
pub mod sass;
