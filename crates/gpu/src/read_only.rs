//! [`ReadOnly`]: a backend that reads its GPUs and never changes them (`[gpu] read_only`).

use std::sync::Arc;

use super::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_types::energy::GpuReading;

/// Reads through to the backend it wraps; refuses every setting with [`GpuError::ReadOnly`]
/// before it reaches the driver. Returning a GPU to its defaults succeeds without a call:
/// nothing was changed through it, so nothing is undone.
pub struct ReadOnly(pub Arc<dyn GpuBackend>);

impl GpuBackend for ReadOnly {
    fn devices(&self) -> &[GpuInfo] {
        self.0.devices()
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        self.0.read(index)
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        self.0.settings(index)
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        self.0.compute_processes(index)
    }

    fn process_utilization(&self, index: u32, since_us: u64) -> Result<Vec<(u32, u32)>, GpuError> {
        self.0.process_utilization(index, since_us)
    }

    fn read_counter(&self, index: u32) -> Result<(i64, Option<u64>), GpuError> {
        self.0.read_counter(index)
    }

    fn read_counters(&self, indices: &[u32]) -> Vec<Result<(i64, Option<u64>), GpuError>> {
        self.0.read_counters(indices)
    }

    fn read_many(&self, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        self.0.read_many(indices)
    }

    fn set_power_limit(&self, _: u32, _: u32) -> Result<(), GpuError> {
        Err(GpuError::ReadOnly)
    }

    fn set_locked_clocks(&self, _: u32, _: u32, _: u32) -> Result<(), GpuError> {
        Err(GpuError::ReadOnly)
    }

    fn reset_locked_clocks(&self, _: u32) -> Result<(), GpuError> {
        Err(GpuError::ReadOnly)
    }

    fn restore_defaults(&self, index: u32) -> Result<(), GpuError> {
        match self.devices().get(index as usize) {
            Some(_) => Ok(()),
            None => Err(GpuError::NotFound(format!("index {index}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GpuSetting;

    /// GPUs that read and panic at any change: a change that got through would end the test.
    struct Untouchable(Vec<GpuInfo>);

    impl GpuBackend for Untouchable {
        fn devices(&self) -> &[GpuInfo] {
            &self.0
        }
        fn read(&self, _: u32) -> Result<GpuReading, GpuError> {
            Ok(GpuReading {
                t_ns: 7,
                energy_mj: Some(42),
                power_mw: None,
                sm_clock_mhz: None,
                util_pct: None,
            })
        }
        fn settings(&self, _: u32) -> Result<GpuSettings, GpuError> {
            Ok(GpuSettings { power_limit_mw: Some(500_000), app_sm_clock_mhz: None })
        }
        fn compute_processes(&self, _: u32) -> Result<Vec<u32>, GpuError> {
            Ok(vec![9])
        }
        fn set_power_limit(&self, _: u32, _: u32) -> Result<(), GpuError> {
            panic!("a power limit reached the driver")
        }
        fn set_locked_clocks(&self, _: u32, _: u32, _: u32) -> Result<(), GpuError> {
            panic!("a clock lock reached the driver")
        }
        fn reset_locked_clocks(&self, _: u32) -> Result<(), GpuError> {
            panic!("a clock reset reached the driver")
        }
    }

    fn gpu() -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H200".into(),
            pci_bus_id: String::new(),
            minor_number: Some(0),
            energy_counter: true,
            power_limit_min_mw: Some(200_000),
            power_limit_max_mw: Some(700_000),
            power_limit_default_mw: Some(700_000),
            sm_clocks_mhz: vec![1980],
            mem_clocks_mhz: vec![3201],
            mig: Vec::new(),
        }
    }

    #[test]
    fn reads_pass_through_and_no_setting_reaches_the_gpu() {
        let gpus = ReadOnly(Arc::new(Untouchable(vec![gpu()])));
        assert_eq!(gpus.read_counter(0), Ok((7, Some(42))));
        assert_eq!(gpus.settings(0).unwrap().power_limit_mw, Some(500_000));
        assert_eq!(gpus.compute_processes(0), Ok(vec![9]));
        assert_eq!(gpus.apply(0, GpuSetting::PowerLimit { mw: 300_000 }), Err(GpuError::ReadOnly));
        assert_eq!(gpus.apply(0, GpuSetting::LockedClock { mhz: 1200 }), Err(GpuError::ReadOnly));
        assert_eq!(gpus.reset_locked_clocks(0), Err(GpuError::ReadOnly));
        // Nothing was changed through it, so there is nothing to undo: no call, no error.
        assert_eq!(gpus.restore_defaults(0), Ok(()));
        assert!(matches!(gpus.restore_defaults(1), Err(GpuError::NotFound(_))));
    }
}
