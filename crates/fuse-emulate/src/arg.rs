//! Kernel arguments and the device-side copies of buffers.

use crate::error::EmulateError;
use fuse_core::data::{try_vec, HostMemoryError};

/// One kernel argument: a scalar (`f32`, `f64`, `i32`, `u32`, `i64`, `u64`) or a buffer
/// (`&[T]` / `&mut [T]` of `f32`, `f64`, `i32`, `u32`), built with `From`/`into()`.
///
/// A shared slice may only be passed to a `const T*` parameter; a mutable one to either.
#[derive(Debug)]
pub struct KernelArg<'a>(Repr<'a>);

#[derive(Debug)]
enum Repr<'a> {
    Scalar {
        code: &'static str,
        bytes: [u8; 8],
    },
    Buffer {
        code: &'static str,
        elem_bytes: usize,
        data: &'a [u8],
    },
    BufferMut {
        code: &'static str,
        elem_bytes: usize,
        data: &'a mut [u8],
    },
}

macro_rules! scalar_args {
    ($($t:ty => $code:literal),*) => {$(
        impl From<$t> for KernelArg<'_> {
            fn from(value: $t) -> Self {
                let mut bytes = [0; 8];
                bytes[..size_of::<$t>()].copy_from_slice(&value.to_ne_bytes());
                KernelArg(Repr::Scalar { code: $code, bytes })
            }
        }
    )*};
}

scalar_args!(f32 => "f32", f64 => "f64", i32 => "i32", u32 => "u32", i64 => "i64", u64 => "u64");

macro_rules! buffer_args {
    ($($t:ty => $code:literal),*) => {$(
        impl<'a> From<&'a [$t]> for KernelArg<'a> {
            fn from(slice: &'a [$t]) -> Self {
                // SAFETY: a plain number type: no padding, every byte initialised.
                let data = unsafe {
                    std::slice::from_raw_parts(slice.as_ptr().cast::<u8>(), size_of_val(slice))
                };
                KernelArg(Repr::Buffer {
                    code: concat!("const ", $code, "*"),
                    elem_bytes: size_of::<$t>(),
                    data,
                })
            }
        }

        impl<'a> From<&'a mut [$t]> for KernelArg<'a> {
            fn from(slice: &'a mut [$t]) -> Self {
                let len = size_of_val(slice);
                // SAFETY: as above, and every byte pattern is a valid value to write back.
                let data =
                    unsafe { std::slice::from_raw_parts_mut(slice.as_mut_ptr().cast::<u8>(), len) };
                KernelArg(Repr::BufferMut {
                    code: concat!($code, "*"),
                    elem_bytes: size_of::<$t>(),
                    data,
                })
            }
        }
    )*};
}

buffer_args!(f32 => "f32", f64 => "f64", i32 => "i32", u32 => "u32");

impl KernelArg<'_> {
    /// Type in the notation of the module's signatures: `f32`, `const f32*`, `f32*`.
    pub fn code(&self) -> &'static str {
        match &self.0 {
            Repr::Scalar { code, .. } | Repr::Buffer { code, .. } | Repr::BufferMut { code, .. } => code,
        }
    }

    /// Whether this argument may bind to a parameter of type `param`.
    fn fits(&self, param: &str) -> bool {
        let code = self.code();
        param == code || matches!(self.0, Repr::BufferMut { .. }) && param.strip_prefix("const ") == Some(code)
    }
}

/// Checks `args` against the kernel's comma-separated parameter types.
pub(crate) fn check_signature(kernel: &str, signature: &str, args: &[KernelArg]) -> Result<(), EmulateError> {
    let params: Vec<&str> = signature.split(',').filter(|p| !p.is_empty()).collect();
    let fits = params.len() == args.len() && args.iter().zip(&params).all(|(a, p)| a.fits(p));
    if fits {
        return Ok(());
    }
    Err(EmulateError::Arguments {
        kernel: kernel.to_owned(),
        expected: params.join(","),
        given: args.iter().map(KernelArg::code).collect::<Vec<_>>().join(","),
    })
}

/// Red zone on each side of a device buffer, and the buffers' alignment (as `cudaMalloc`).
const RED_ZONE: usize = 256;
/// Fill of red zones; a kernel that writes there changes it.
const POISON: u8 = 0xFF;

/// Device-side copies of the arguments, laid out for the launch ABI.
pub(crate) struct Staged {
    /// One 8-byte slot per argument: the scalar's bytes, or the buffer's device address.
    slots: Vec<Slot>,
    /// Device copies of buffer arguments, by argument index.
    buffers: Vec<(usize, DeviceBuffer)>,
}

#[repr(C, align(8))]
struct Slot([u8; 8]);

/// `len` bytes at a 256-byte aligned offset of `storage`, with poisoned red zones around.
struct DeviceBuffer {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl DeviceBuffer {
    /// A device copy of `data`; an error, not an abort, where the host cannot hold it.
    fn new(data: &[u8]) -> Result<DeviceBuffer, HostMemoryError> {
        let bytes = data.len() + 2 * RED_ZONE + RED_ZONE;
        let mut storage = try_vec(bytes, || "an emulated device copy of a kernel argument".to_string())?;
        storage.resize(bytes, POISON);
        let start = storage.as_ptr().align_offset(RED_ZONE) + RED_ZONE;
        storage[start..start + data.len()].copy_from_slice(data);
        Ok(DeviceBuffer {
            storage,
            start,
            len: data.len(),
        })
    }

    fn address(&mut self) -> usize {
        self.storage[self.start..].as_mut_ptr() as usize
    }

    fn data(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// Where the kernel wrote into a red zone, if it did.
    fn overrun(&self) -> Option<String> {
        let before = &self.storage[self.start - RED_ZONE..self.start];
        let after = &self.storage[self.start + self.len..self.start + self.len + RED_ZONE];
        if let Some(i) = before.iter().position(|&b| b != POISON) {
            return Some(format!("{} bytes before the start", RED_ZONE - i));
        }
        let last = after.iter().rposition(|&b| b != POISON)?;
        Some(format!("{} bytes past the end", last + 1))
    }
}

impl Staged {
    pub(crate) fn new(args: &[KernelArg]) -> Result<Staged, HostMemoryError> {
        let mut staged = Staged {
            slots: Vec::with_capacity(args.len()),
            buffers: Vec::new(),
        };
        for (index, arg) in args.iter().enumerate() {
            let bytes = match &arg.0 {
                Repr::Scalar { bytes, .. } => *bytes,
                Repr::Buffer { data, .. } => staged.add_buffer(index, data)?,
                Repr::BufferMut { data, .. } => staged.add_buffer(index, data)?,
            };
            staged.slots.push(Slot(bytes));
        }
        Ok(staged)
    }

    fn add_buffer(&mut self, index: usize, data: &[u8]) -> Result<[u8; 8], HostMemoryError> {
        let mut buffer = DeviceBuffer::new(data)?;
        let address = buffer.address() as u64;
        self.buffers.push((index, buffer));
        Ok(address.to_ne_bytes())
    }

    /// `args[i]` of the launch ABI: a pointer to argument i's value.
    pub(crate) fn pointers(&mut self) -> Vec<*mut std::ffi::c_void> {
        self.slots.iter_mut().map(|s| s.0.as_mut_ptr().cast()).collect()
    }

    /// Checks the red zones, then copies mutable buffers back into `args`.
    pub(crate) fn finish(self, kernel: &str, args: &mut [KernelArg]) -> Result<(), EmulateError> {
        for (index, buffer) in &self.buffers {
            let Some(detail) = buffer.overrun() else {
                continue;
            };
            let (code, elem_bytes) = match &args[*index].0 {
                Repr::Buffer { code, elem_bytes, .. } | Repr::BufferMut { code, elem_bytes, .. } => {
                    (*code, *elem_bytes)
                }
                Repr::Scalar { code, .. } => (*code, 1),
            };
            return Err(EmulateError::OutOfBounds {
                kernel: kernel.to_owned(),
                index: *index,
                code,
                len: buffer.len / elem_bytes,
                detail,
            });
        }
        for (index, buffer) in &self.buffers {
            if let Repr::BufferMut { data, .. } = &mut args[*index].0 {
                data.copy_from_slice(buffer.data());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_follow_constness() {
        let mut x = [1.0f32];
        let y = [1.0f64];
        assert_eq!(KernelArg::from(&mut x[..]).code(), "f32*");
        assert_eq!(KernelArg::from(&y[..]).code(), "const f64*");
        assert_eq!(KernelArg::from(3u64).code(), "u64");
    }

    #[test]
    fn mutable_buffer_fits_const_parameter_but_not_the_reverse() {
        let mut x = [0i32; 2];
        let y = [0i32; 2];
        let args = [KernelArg::from(&mut x[..]), KernelArg::from(&y[..])];
        assert!(check_signature("k", "const i32*,const i32*", &args).is_ok());
        let err = check_signature("k", "i32*,i32*", &args).unwrap_err();
        assert_eq!(
            err.to_string(),
            "kernel `k` takes (i32*,i32*) but was given (i32*,const i32*)"
        );
        assert!(check_signature("k", "i32*", &args).is_err());
        assert!(check_signature("k", "", &[]).is_ok());
    }

    #[test]
    fn buffers_are_aligned_and_fenced() {
        let mut buffer = DeviceBuffer::new(&[1, 2, 3]).unwrap();
        assert_eq!(buffer.address() % RED_ZONE, 0);
        assert_eq!(buffer.data(), [1, 2, 3]);
        assert_eq!(buffer.overrun(), None);
        let end = buffer.start + buffer.len;
        buffer.storage[end + 3] = 0;
        assert_eq!(buffer.overrun().as_deref(), Some("4 bytes past the end"));
        buffer.storage[buffer.start - 1] = 0;
        assert_eq!(buffer.overrun().as_deref(), Some("1 bytes before the start"));
    }

    #[test]
    fn mutable_buffers_are_copied_back() {
        let mut x = [0.0f32; 2];
        let mut args = [KernelArg::from(&mut x[..]), KernelArg::from(7i32)];
        let mut staged = Staged::new(&args).unwrap();
        let pointers = staged.pointers();
        // The scalar slot holds the value itself.
        // SAFETY: slot 1 holds the 4 bytes of an i32.
        assert_eq!(unsafe { *pointers[1].cast::<i32>() }, 7);
        let data = &mut staged.buffers[0].1;
        let start = data.start;
        data.storage[start..start + 4].copy_from_slice(&1.5f32.to_ne_bytes());
        staged.finish("k", &mut args).unwrap();
        assert_eq!(x, [1.5, 0.0]);
    }
}
