//! A compiled program on arrays in its device's memory ([`DeviceArray`]): uploaded once,
//! borrowed from another library without a copy, or left by an earlier run; the outputs stay
//! there.

use std::collections::BTreeMap;
use std::sync::Arc;

use fuse_core::data::{input_extents, BindError};
use fuse_core::ArrayView;

use super::Compiled;
use crate::device::{resident, DeviceArray, DevicePlan, Pool, RunTimes};
use crate::error::{Error, Result};

impl Compiled {
    /// A copy of `array` in the memory of the device this program runs on, for
    /// [`Compiled::run_on_device`]. An error on a backend that computes on the host.
    pub fn upload(&self, array: ArrayView<'_>) -> Result<DeviceArray> {
        let plan = self.device_plan("upload")?;
        Ok(DeviceArray::new(plan.pool().upload(array.data)?, array.dims.to_vec()))
    }

    /// Runs on arrays in the device's memory, one per input by name (they stay the caller's;
    /// a run only reads them), and leaves every output there, by name; with where the time
    /// went (no uploads or downloads). An array of another device, shape or precision is an
    /// error naming it; so is a backend that computes on the host.
    pub fn run_on_device(
        &self,
        inputs: &mut BTreeMap<String, DeviceArray>,
    ) -> Result<(BTreeMap<String, DeviceArray>, RunTimes)> {
        let plan = self.device_plan("run_on_device")?;
        let program = self.program();
        self.check_device_inputs(inputs, plan.pool())?;
        let mut given = BTreeMap::new();
        let mut lent = Vec::new();
        for &v in program.inputs.iter().filter(|v| plan.buffers().contains(v)) {
            let name = &program.values[v].variable;
            if let Some(array) = inputs.remove(name) {
                let (buffer, dims) = array.into_parts();
                given.insert(v, buffer);
                lent.push((v, name.clone(), dims));
            }
        }
        let ran = resident::run(plan, program, self.sizes(), &mut given);
        for (v, name, dims) in lent {
            if let Some(buffer) = given.remove(&v) {
                inputs.insert(name, DeviceArray::new(buffer, dims));
            }
        }
        let ran = ran?;
        let outputs = (ran.outputs.into_iter())
            .map(|(v, buffer)| {
                let dims = program.values[v].shape.extents(self.sizes()).unwrap_or_default();
                (program.values[v].variable.clone(), DeviceArray::new(buffer, dims))
            })
            .collect();
        let times = RunTimes {
            compute: ran.compute,
            ..RunTimes::default()
        };
        Ok((outputs, times))
    }

    fn device_plan(&self, method: &str) -> Result<&dyn DevicePlan> {
        self.device().ok_or_else(|| Error::NotOnGpu {
            method: method.to_string(),
            backend: self.backend().to_string(),
        })
    }

    /// Every input present, of its extents and precision, on the program's device.
    fn check_device_inputs(&self, inputs: &BTreeMap<String, DeviceArray>, pool: &Arc<Pool>) -> Result<()> {
        self.check_names(inputs.keys())?;
        let program = self.program();
        for (&v, want) in program.inputs.iter().zip(input_extents(program, self.sizes())) {
            let name = &program.values[v].variable;
            let array = inputs.get(name).ok_or_else(|| BindError::Missing(name.clone()))?;
            if array.dims() != want {
                return Err(BindError::Shape {
                    name: name.clone(),
                    got: array.dims().into(),
                    want: want.into(),
                    declared: program.values[v].shape.to_string(),
                    file: program.file.clone(),
                }
                .into());
            }
            if array.precision() != program.precision {
                return Err(BindError::Precision {
                    name: name.clone(),
                    got: array.precision(),
                    want: program.precision,
                }
                .into());
            }
            if !Arc::ptr_eq(array.buffer().pool(), pool) {
                return Err(Error::DeviceMismatch {
                    name: name.clone(),
                    array: array.buffer().pool().memory().name(),
                    program: pool.memory().name(),
                });
            }
        }
        Ok(())
    }
}
