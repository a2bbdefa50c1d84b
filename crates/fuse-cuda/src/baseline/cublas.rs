//! Runs a [`Baseline`] on the GPU through cuBLAS, on the device's one stream.
//!
//! Scalars go by device pointer (`CUBLAS_POINTER_MODE_DEVICE`): the host-known ones are uploaded
//! once with the inputs, reduction results stay where `dot` wrote them, and no call waits for
//! the host — which is how a cuBLAS user keeps a sequence asynchronous. A scalar call is the
//! exception, as it is for the user: its device operands are copied back (the stream waits),
//! it is computed on the host, and its result is copied up.

use std::cell::RefCell;

use std::collections::BTreeMap;
use std::ffi::c_int;

use cudarc::cublas::sys::{self, cublasHandle_t, cublasOperation_t};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DevicePtr};
use fuse_core::data::check_inputs;
use fuse_core::{Bindings, HostArray, HostData, Precision, Program, Shape, Sizes, ValueId};

use super::{evaluate_host_scalar, host_scalars, Baseline, BlasOp, ScalarArg, Trans};
use crate::device::host_bytes;
use crate::device::Device;
use crate::error::{cublas, driver, CudaError};
use crate::plan::poisoned;
use crate::probe;
use crate::timer::{Timer, Timing, TimingOptions};

/// A baseline ready to run on a GPU.
pub struct CublasPlan {
    device: Device,
    blas: CudaBlas,
    baseline: Baseline,
    /// The host-known scalars, in the order of the constants buffer.
    constants: Vec<ScalarArg>,
}

/// A baseline's device buffers: inputs uploaded, the others poisoned, constants set.
pub struct BaselineWorkspace {
    buffers: BTreeMap<ValueId, CudaSlice<u8>>,
    constants: CudaSlice<u8>,
    /// The slots of the scalars computed on the host ([`ScalarArg::Computed`]).
    computed: CudaSlice<u8>,
    /// The scalar inputs, which host scalars read on the host.
    scalar_inputs: BTreeMap<ValueId, f64>,
}

impl CublasPlan {
    /// Loads cuBLAS (an error, not a panic, where it is missing) and binds it to `device`'s
    /// stream in device pointer mode.
    pub fn new(device: &Device, baseline: Baseline) -> Result<CublasPlan, CudaError> {
        probe::cublas()?;
        let blas = CudaBlas::new(device.stream().clone()).map_err(cublas("cublasCreate"))?;
        blas.set_pointer_mode(sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_DEVICE)
            .map_err(cublas("cublasSetPointerMode"))?;
        Ok(CublasPlan {
            device: device.clone(),
            blas,
            constants: host_scalars(&baseline),
            baseline,
        })
    }

    /// The calls it makes.
    pub fn baseline(&self) -> &Baseline {
        &self.baseline
    }

    /// Runs once on `inputs`; returns the outputs by name.
    pub fn run(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<Bindings, CudaError> {
        let workspace = self.prepare(program, sizes, inputs)?;
        self.enqueue(&workspace)?;
        self.device.synchronize()?;
        self.download(program, &workspace)
    }

    /// Allocates the buffers at `sizes` (the sizes the baseline was built for).
    pub fn prepare(&self, program: &Program, sizes: &Sizes, inputs: &Bindings) -> Result<BaselineWorkspace, CudaError> {
        check_inputs(program, sizes, inputs)?;
        let stream = self.device.stream();
        let bytes = program.precision.bytes() as usize;
        let mut buffers = BTreeMap::new();
        for (&v, &len) in &self.baseline.buffers {
            let value = &program.values[v];
            let slice = match value.producer {
                None => stream
                    .clone_htod(host_bytes(inputs[&value.variable].data.view()))
                    .map_err(driver("cuMemcpyHtoD"))?,
                Some(_) => poisoned(&self.device, len * bytes)?,
            };
            buffers.insert(v, slice);
        }
        let values: Vec<f64> = self.constants.iter().map(|s| host_value(s, program, inputs)).collect();
        let mut constants = element_bytes(&values, program.precision);
        constants.resize(constants.len().max(8), 0);
        let constants = stream.clone_htod(&constants).map_err(driver("cuMemcpyHtoD"))?;
        let computed = poisoned(&self.device, self.baseline.computed.max(1) * bytes)?;
        let scalar_inputs = (program.inputs.iter())
            .filter(|&&v| program.values[v].shape == Shape::Scalar)
            .map(|&v| {
                (
                    v,
                    host_value(
                        &ScalarArg::Host {
                            factor: 1.0,
                            input: Some(v),
                        },
                        program,
                        inputs,
                    ),
                )
            })
            .collect();
        Ok(BaselineWorkspace {
            buffers,
            constants,
            computed,
            scalar_inputs,
        })
    }

    /// Queues every call on the stream (no wait).
    pub fn enqueue(&self, workspace: &BaselineWorkspace) -> Result<(), CudaError> {
        let calls = Calls {
            handle: *self.blas.handle(),
            plan: self,
            workspace,
            on_host: RefCell::new(BTreeMap::new()),
        };
        self.baseline.ops.iter().try_for_each(|op| calls.op(op))
    }

    /// Copies the outputs back (waits for the queued work).
    pub fn download(&self, program: &Program, workspace: &BaselineWorkspace) -> Result<Bindings, CudaError> {
        let mut out = Bindings::new();
        for &v in &program.outputs {
            let owner = self.baseline.storage.get(&v).ok_or_else(|| missing(v))?;
            let buffer = workspace.buffers.get(owner).ok_or_else(|| missing(v))?;
            let mut data = self.device.download(buffer, program.precision)?;
            let dims = program.values[v]
                .shape
                .extents(&self.baseline.sizes)
                .unwrap_or_default();
            truncate(&mut data, dims.iter().product());
            out.insert(program.values[v].variable.clone(), HostArray { dims, data });
        }
        Ok(out)
    }

    /// Times the calls on `workspace` with CUDA events.
    pub fn time(&self, workspace: &BaselineWorkspace, options: &TimingOptions) -> Result<Timing, CudaError> {
        let timer = Timer::new(&self.device, options.flush_l2)?;
        timer.time(options, &mut || self.enqueue(workspace))
    }
}

/// Drops the padding of a buffer allocated larger than its value (scalars get 8 bytes).
fn truncate(data: &mut HostData, len: usize) {
    match data {
        HostData::F32(v) => v.truncate(len),
        HostData::F64(v) => v.truncate(len),
    }
}

fn missing(v: ValueId) -> CudaError {
    CudaError::Unsupported(format!("value {v} has no baseline buffer (a fuse bug, please report)"))
}

/// The value of a host-known scalar.
fn host_value(s: &ScalarArg, program: &Program, inputs: &Bindings) -> f64 {
    match *s {
        ScalarArg::Host { factor, input: None } => factor,
        ScalarArg::Host { factor, input: Some(v) } => {
            factor
                * inputs[&program.values[v].variable]
                    .to_f64()
                    .first()
                    .copied()
                    .unwrap_or(0.0)
        }
        ScalarArg::Device(_) | ScalarArg::Computed(_) => f64::NAN,
    }
}

/// `values` as the bytes of `precision`'s elements.
fn element_bytes(values: &[f64], precision: Precision) -> Vec<u8> {
    let data = match precision {
        Precision::F32 => HostData::F32(values.iter().map(|&v| v as f32).collect()),
        Precision::F64 => HostData::F64(values.to_vec()),
    };
    host_bytes(data.view()).to_vec()
}

/// cuBLAS's 32-bit dimension.
fn dim(n: usize) -> Result<c_int, CudaError> {
    c_int::try_from(n).map_err(|_| CudaError::Unsupported(format!("dimension {n} exceeds cuBLAS's 32-bit interface")))
}

fn operation(t: Trans) -> cublasOperation_t {
    match t {
        Trans::N => cublasOperation_t::CUBLAS_OP_N,
        Trans::T => cublasOperation_t::CUBLAS_OP_T,
    }
}

/// The calls of one enqueue.
struct Calls<'a> {
    handle: cublasHandle_t,
    plan: &'a CublasPlan,
    workspace: &'a BaselineWorkspace,
    /// The scalars of calls the host has seen during this enqueue (read back or computed),
    /// which it does not read again.
    on_host: RefCell<BTreeMap<ValueId, f64>>,
}

/// A device address, passed as whichever element pointer the cuBLAS entry point takes.
#[derive(Clone, Copy)]
struct Address(u64);

/// An argument converted to the type of a cuBLAS parameter: addresses to element pointers,
/// everything else as it is — so an address cannot stand where a dimension belongs.
trait Arg<T> {
    fn arg(self) -> T;
}

impl<T> Arg<T> for T {
    fn arg(self) -> T {
        self
    }
}

impl<T> Arg<*const T> for Address {
    fn arg(self) -> *const T {
        self.0 as *const T
    }
}

impl<T> Arg<*mut T> for Address {
    fn arg(self) -> *mut T {
        self.0 as *mut T
    }
}

/// Calls the cuBLAS routine `name` in `precision`: `s`/`d` are its f32 and f64 entry points,
/// the arguments follow cuBLAS's order; gives the name and the status.
macro_rules! routine {
    ($precision:expr, $name:literal, $s:ident / $d:ident ($($arg:expr),*)) => {
        (
            $name,
            match $precision {
                Precision::F32 => sys::$s($(Arg::arg($arg)),*),
                Precision::F64 => sys::$d($(Arg::arg($arg)),*),
            },
        )
    };
}

fn fill(upper: bool) -> sys::cublasFillMode_t {
    match upper {
        true => sys::cublasFillMode_t::CUBLAS_FILL_MODE_UPPER,
        false => sys::cublasFillMode_t::CUBLAS_FILL_MODE_LOWER,
    }
}

fn diagonal(unit: bool) -> sys::cublasDiagType_t {
    match unit {
        true => sys::cublasDiagType_t::CUBLAS_DIAG_UNIT,
        false => sys::cublasDiagType_t::CUBLAS_DIAG_NON_UNIT,
    }
}

/// Unit stride: every array is contiguous.
const INC: c_int = 1;
const N: cublasOperation_t = cublasOperation_t::CUBLAS_OP_N;

impl Calls<'_> {
    /// The device address of value `v`'s buffer.
    fn buffer(&self, v: ValueId) -> Result<Address, CudaError> {
        let slice = self.workspace.buffers.get(&v).ok_or_else(|| missing(v))?;
        Ok(Address(slice.device_ptr(self.plan.device.stream()).0))
    }

    /// The device address of a scalar: its slot among the constants, or a reduction's buffer.
    fn scalar(&self, s: &ScalarArg) -> Result<Address, CudaError> {
        match s {
            ScalarArg::Device(v) => self.buffer(*v),
            ScalarArg::Computed(k) => {
                let base = self.workspace.computed.device_ptr(self.plan.device.stream()).0;
                Ok(Address(base + (k * self.element_bytes()) as u64))
            }
            host => {
                let slot = self.plan.constants.iter().position(|c| c == host).unwrap_or(0);
                let base = self.workspace.constants.device_ptr(self.plan.device.stream()).0;
                Ok(Address(base + (slot * self.element_bytes()) as u64))
            }
        }
    }

    fn element_bytes(&self) -> usize {
        self.plan.baseline.precision.bytes() as usize
    }

    /// Queues `len` elements from `src` to `dst`.
    fn copy(&self, len: usize, src: ValueId, dst: ValueId) -> Result<(), CudaError> {
        let stream = self.plan.device.stream().cu_stream();
        let (dst, src) = (self.buffer(dst)?.0, self.buffer(src)?.0);
        // SAFETY: both are device buffers of this workspace holding at least `len` elements.
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, len * self.element_bytes(), stream) }
            .map_err(driver("cuMemcpyDtoDAsync"))
    }

    /// Scalar `v` on the host: a scalar input, one seen before, or else copied back from its
    /// buffer (waiting for the work queued before).
    fn host_read(&self, v: ValueId) -> Result<f64, CudaError> {
        if let Some(&x) = self.workspace.scalar_inputs.get(&v).or(self.on_host.borrow().get(&v)) {
            return Ok(x);
        }
        let owner = *self.plan.baseline.storage.get(&v).ok_or_else(|| missing(v))?;
        let mut bytes = [0u8; 8];
        let len = self.element_bytes();
        let stream = self.plan.device.stream();
        // SAFETY: the buffer is a device buffer of this workspace holding at least one element.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut bytes[..len], self.buffer(owner)?.0, stream.cu_stream())
        }
        .map_err(driver("cuMemcpyDtoHAsync"))?;
        stream.synchronize().map_err(driver("cuStreamSynchronize"))?;
        let x = match self.plan.baseline.precision {
            Precision::F32 => f32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as f64,
            Precision::F64 => f64::from_ne_bytes(bytes),
        };
        self.on_host.borrow_mut().insert(v, x);
        Ok(x)
    }

    /// Computes `value` on the host and queues its copy into `into` (see [`BlasOp::HostScalar`]).
    fn host_scalar(&self, value: &fuse_core::Arg, into: ScalarArg) -> Result<(), CudaError> {
        let x = evaluate_host_scalar(value, self.plan.baseline.precision, |v| self.host_read(v))?;
        if let ScalarArg::Device(v) = into {
            self.on_host.borrow_mut().insert(v, x);
        }
        let bytes = element_bytes(&[x], self.plan.baseline.precision);
        let stream = self.plan.device.stream().cu_stream();
        // SAFETY: `into` addresses one element of device memory of this workspace. The source
        // is pageable host memory, which the driver copies out before the call returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(self.scalar(&into)?.0, &bytes, stream) }
            .map_err(driver("cuMemcpyHtoDAsync"))
    }

    /// Queues `len` elements of `dst` set to +0.
    fn zero(&self, len: usize, dst: ValueId) -> Result<(), CudaError> {
        let stream = self.plan.device.stream().cu_stream();
        let dst = self.buffer(dst)?.0;
        // SAFETY: a device buffer of this workspace holding at least `len` elements.
        unsafe { cudarc::driver::result::memset_d8_async(dst, 0, len * self.element_bytes(), stream) }
            .map_err(driver("cuMemsetD8Async"))
    }

    /// Queues `op`. The match is the table of call shapes: a cuBLAS routine a row, with its name,
    /// its f32/f64 entry points and its arguments in cuBLAS's order. Laid out by hand, a row per
    /// routine, where rustfmt would spread each over a screen.
    #[rustfmt::skip]
    fn op(&self, op: &BlasOp) -> Result<(), CudaError> {
        let (h, p) = (self.handle, self.plan.baseline.precision);
        let b = |v: ValueId| self.buffer(v);
        let s = |a: &ScalarArg| self.scalar(a);
        // SAFETY (every call below): the handle is live, pointer mode is device, every pointer is
        // a device buffer of this workspace holding at least the elements the call touches (the
        // translation sized each buffer from the same shapes), and scalars point into device
        // memory of the element type.
        let (name, status) = unsafe { match *op {
            BlasOp::Copy { len, src, dst } => return self.copy(len, src, dst),
            BlasOp::HostScalar { ref value, into } => return self.host_scalar(value, into),
            BlasOp::Zero { len, dst } => return self.zero(len, dst),
            BlasOp::Scal { n, alpha, x } =>
                routine!(p, "scal", cublasSscal_v2 / cublasDscal_v2(h, dim(n)?, s(&alpha)?, b(x)?, INC)),
            BlasOp::Axpy { n, alpha, x, y } =>
                routine!(p, "axpy", cublasSaxpy_v2 / cublasDaxpy_v2(h, dim(n)?, s(&alpha)?, b(x)?, INC, b(y)?, INC)),
            BlasOp::Dot { n, x, y, result } =>
                routine!(p, "dot", cublasSdot_v2 / cublasDdot_v2(h, dim(n)?, b(x)?, INC, b(y)?, INC, b(result)?)),
            BlasOp::Asum { n, x, result } =>
                routine!(p, "asum", cublasSasum_v2 / cublasDasum_v2(h, dim(n)?, b(x)?, INC, b(result)?)),
            BlasOp::Nrm2 { n, x, result } =>
                routine!(p, "nrm2", cublasSnrm2_v2 / cublasDnrm2_v2(h, dim(n)?, b(x)?, INC, b(result)?)),
            BlasOp::Gemv { trans, m, n, lda, alpha, a, x, beta, y } =>
                routine!(p, "gemv", cublasSgemv_v2 / cublasDgemv_v2(h, operation(trans), dim(m)?, dim(n)?,
                    s(&alpha)?, b(a)?, dim(lda)?, b(x)?, INC, s(&beta)?, b(y)?, INC)),
            BlasOp::Ger { m, n, lda, alpha, x, y, a } =>
                routine!(p, "ger", cublasSger_v2 / cublasDger_v2(h, dim(m)?, dim(n)?,
                    s(&alpha)?, b(x)?, INC, b(y)?, INC, b(a)?, dim(lda)?)),
            BlasOp::Trmv { n, upper, trans, unit, a, x } =>
                routine!(p, "trmv", cublasStrmv_v2 / cublasDtrmv_v2(h, fill(upper), operation(trans), diagonal(unit),
                    dim(n)?, b(a)?, dim(n)?, b(x)?, INC)),
            BlasOp::Dgmm { n, x, y, c } =>
                routine!(p, "dgmm", cublasSdgmm / cublasDdgmm(h, sys::cublasSideMode_t::CUBLAS_SIDE_RIGHT,
                    1, dim(n)?, b(x)?, 1, b(y)?, INC, b(c)?, 1)),
            BlasOp::Geam { m, n, ld, alpha, a, beta, b: bm, c } =>
                routine!(p, "geam", cublasSgeam / cublasDgeam(h, N, N, dim(m)?, dim(n)?,
                    s(&alpha)?, b(a)?, dim(ld)?, s(&beta)?, b(bm)?, dim(ld)?, b(c)?, dim(ld)?)),
        }};
        status.result().map_err(cublas(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dimensions_beyond_32_bits_are_refused() {
        assert_eq!(dim(16384 * 16384).unwrap(), 1 << 28);
        assert!(dim(1 << 31).is_err());
    }

    #[test]
    fn host_scalars_multiply_their_input() {
        let library = fuse_core::Library::builtin().unwrap();
        let text = "sizes: {n: 2}\ninputs: {x: [n], alpha: scalar}\noutputs: [y]\ncalls:\n  - y = sscal(alpha, x)\n";
        let program = fuse_core::script::parse("t.yaml", text, &library).unwrap();
        let mut inputs = Bindings::new();
        inputs.insert("alpha".into(), HostArray::f32(vec![], vec![0.5]));
        let alpha = program.value("alpha").unwrap();
        let s = ScalarArg::Host {
            factor: -2.0,
            input: Some(alpha),
        };
        assert_eq!(host_value(&s, &program, &inputs), -1.0);
        assert_eq!(host_value(&ScalarArg::constant(3.0), &program, &inputs), 3.0);
    }
}
