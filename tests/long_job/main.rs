//! The long tests, one binary whose two tests run side by side (each is mostly waiting): a
//! 10-minute job metered on a node of 8 GPUs ([`ten_minute_job`]), and the replay twin, a
//! trace slice through real Slurm against the simulator's prediction ([`twin`]).

mod ten_minute_job;
mod twin;
