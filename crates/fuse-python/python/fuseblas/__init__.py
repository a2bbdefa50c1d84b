"""fuseblas: fused BLAS-1/2 sequences from Python, on numpy arrays.

fuse finds which calls of a sequence can share one kernel, so that each matrix is read from
memory as few times as possible, and runs them on the CPU (every core, the widest vectors) or
an NVIDIA GPU. Two ways in:

* A script (fuse's YAML language), compiled once and called with arrays by name::

      import numpy as np, fuseblas
      bicgk = fuseblas.compile('''
      precision: f32
      sizes: {m: 4096, n: 4096}
      inputs: {A: [m, n], p: [n], r: [m]}
      outputs: [q, s]
      calls:
        - q = sgemv(A, p)
        - s = sgemtv(A, r)
      ''')
      A = np.random.rand(300, 200).astype(np.float32)
      p, r = np.ones(200, np.float32), np.ones(300, np.float32)
      out = bicgk(A=A, p=p, r=r)          # {'q': ..., 's': ...}: one pass over A, sizes from the shapes

* A lazy :class:`Session`, with BLAS calls recorded and run fused when a result is read::

      s = fuseblas.Session()
      A, p = s.array(A), s.array(p)
      q = s.gemv(A, p)                    # nothing runs yet
      t = s.gemtv(A, q)
      np.asarray(t)                       # q and t run as one program

Arrays are read in place where they can be (see :func:`compile`); results come back as numpy
arrays that own fuse's buffers — or, for a program on a GPU called with GPU arrays (CuPy,
PyTorch, JAX through DLPack), as :class:`DeviceArray` s left in GPU memory. Errors are the exceptions of :mod:`fuseblas._errors`,
re-exported here.
"""

from __future__ import annotations

import math
import os
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _core
from ._errors import FuseError, InputError, NoDeviceError, OutOfMemoryError, ScriptError

__all__ = [
    "compile",
    "Program",
    "Session",
    "Value",
    "DeviceArray",
    "default_backend",
    "FuseError",
    "InputError",
    "NoDeviceError",
    "OutOfMemoryError",
    "ScriptError",
]
__version__: str = _core.__version__
#: How the native half was built: ``"release"`` (what ``pip install`` builds) or ``"dev"`` (the
#: test suite's build, unoptimised: time nothing with it).
build_profile: str = _core.BUILD_PROFILE

Value = _core.Value
DeviceArray = _core.DeviceArray
Output = Union[np.ndarray, float, "_core.DeviceArray"]


_DTYPE_NAMES = {
    t: np.dtype(t).name for t in (np.float32, np.float64, np.dtype("float32"), np.dtype("float64"), "float32", "float64")
}


def _dtype_name(dtype: object) -> str:
    """numpy's name of ``dtype``; the common ones looked up (``np.dtype`` costs 2 µs a call,
    as much as recording a call: a solver names a dtype each iteration)."""
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        pass
    try:
        return np.dtype(dtype).name
    except TypeError as e:
        raise TypeError(f"dtype {dtype!r} is not a numpy dtype (float32 or float64): {e}") from None


def default_backend() -> Tuple[str, str]:
    """The backend ``backend="auto"`` picks on this machine, and why in a few words: ``cuda``
    with the GPU's name, or ``cpu`` with the reason no GPU is usable."""
    return _core.backends()


def compile(
    source: Union[str, "os.PathLike[str]"],
    backend: str = "auto",
    sizes: Optional[Mapping[str, int]] = None,
    threads: Optional[int] = None,
) -> "Program":
    """Compiles a fuse script for ``backend``.

    ``source`` is a path (a :class:`os.PathLike`, or a ``str`` without a newline) or the
    script's text (a ``str`` with at least one newline). ``backend`` is ``"auto"`` (the GPU
    where one is usable, else the CPU), ``"cpu"``, ``"cuda"`` (``"cuda:1"`` for device 1),
    ``"emulate"`` (the CUDA kernels on host threads, for tests) or ``"reference"`` (the f64
    interpreter fuse is tested against). ``sizes`` fixes size symbols (``{"m": 1000}``);
    every other size comes from the shapes of the arrays of each call, else the script's
    defaults. Where ``sizes`` fixes them all, the script is compiled now; otherwise on the
    first call at each new set of sizes. A compile that takes more than a second (a first
    compile on a GPU: NVRTC, then cached on disk) says so on the ``fuseblas`` logger at INFO. ``threads`` sets the CPU backend's threads (default:
    ``FUSE_NUM_THREADS``, else every core the process may use).

    Raises :class:`ScriptError` for a malformed script, with its file, line and column.
    """
    if isinstance(source, os.PathLike):
        path, is_text = os.fspath(source), False
    elif isinstance(source, str):
        path, is_text = source, "\n" in source
    else:
        raise TypeError(f"source must be a path or the script's text, not {_kind(source)}")
    if sizes is not None and not isinstance(sizes, Mapping):
        raise TypeError(f"sizes must be a dict of size symbols to positive integers ({{'n': 1000}}), not {_kind(sizes)}")
    given = None if sizes is None else [(str(k), _size(k, v)) for k, v in sizes.items()]
    native = _core.Program(path, is_text=is_text, backend=_backend(backend), sizes=given, threads=_threads(threads))
    return Program(native)


# DLPack's device types (dlpack.h `DLDeviceType`) by number, for messages.
_DLPACK_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal", 10: "rocm",
                   13: "cuda_managed", 14: "oneapi"}


def _dlpack_device(value: object) -> Optional[Tuple[int, int]]:
    """``value``'s DLPack device (type, index), or None if it does not speak DLPack."""
    if isinstance(value, np.ndarray) or not hasattr(value, "__dlpack_device__"):
        return None
    kind, index = (int(v) for v in value.__dlpack_device__())
    return kind, index


def _kind(value: object) -> str:
    """What ``value`` is, for messages: its type, and an array's dtype and shape."""
    if isinstance(value, np.ndarray):
        article = "an" if value.dtype.name[0] in "aeiou" else "a"
        return f"{article} {value.dtype} array of shape {value.shape}"
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


# numpy's array protocol: objects numpy.asarray reads as arrays (pandas, xarray, a Value).
_ARRAY_PROTOCOL = ("__array__", "__array_interface__", "__array_struct__")


def _host_array(what: str, value: object, shape: Sequence[str] = ()) -> np.ndarray:
    """``value`` as a numpy array in host memory: itself if it is one; a number as a 0-d array;
    an object that speaks DLPack from the CPU as a view of its memory (``numpy.from_dlpack``, no
    copy); a list, a tuple or an object of numpy's array protocol through ``numpy.asarray``. An
    array on another device is an :class:`InputError`, anything else (None, a str, a buffer) a
    ``TypeError``, each naming ``what`` (and the ``shape`` expected, in size symbols)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (int, float, complex, np.generic)):
        return np.asarray(value)
    device = _dlpack_device(value)
    if device is not None:
        kind, index = device
        if kind != 1:
            where = f"{_DLPACK_DEVICES.get(kind, f'DLPack device type {kind}')}:{index}"
            raise InputError(
                f"{what} is on {where}, which fuseblas does not read: pass a host copy "
                "(`x.cpu()`, `cupy.asnumpy(x)`, `jax.device_get(x)`)"
            )
        return np.from_dlpack(value)
    if not isinstance(value, (list, tuple)) and not any(hasattr(value, a) for a in _ARRAY_PROTOCOL):
        raise _not_an_array(what, value, shape)
    try:
        return np.asarray(value)
    except MemoryError as e:
        raise OutOfMemoryError(f"not enough host memory for {what} as an array: {e}") from e
    except (ValueError, TypeError) as e:
        raise InputError(f"{what} is not an array of numbers: {e}") from e


def _not_an_array(what: str, value: object, shape: Sequence[str] = ()) -> TypeError:
    """The error for ``value`` where an array (of ``shape``, in size symbols) belongs."""
    dims = f" [{', '.join(shape)}]" if shape else ""
    buffer = " (numpy.frombuffer(x, dtype) reads a buffer)" if isinstance(value, (memoryview, bytes, bytearray)) else ""
    return TypeError(
        f"{what} must be an array{dims} (a numpy array, a list, or an array that speaks DLPack or numpy's "
        f"array protocol), not {_kind(value)}{buffer}"
    )


def _real(what: str, array: np.ndarray) -> None:
    """Refuses ``array`` (naming ``what``) unless it holds real numbers: fuse computes with
    no complex numbers, strings or objects."""
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{what} must hold real numbers, not {array.dtype} values")


def _converted(what: str, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` in ``dtype``, C-contiguous: itself where it is, else a copy that the host must
    have the memory for (:class:`OutOfMemoryError`, not numpy's abort-prone overcommit). Rounding
    is allowed; a finite element that does not fit ``dtype`` (1e300 in float32) is an
    :class:`InputError` naming ``what``."""
    if array.dtype == dtype and array.flags.c_contiguous:
        return array
    _core.check_host_memory(array.size * dtype.itemsize, f"a {dtype} copy of {what}")
    try:
        with np.errstate(over="ignore"):
            converted = np.asarray(array, dtype=dtype, order="C")
    except MemoryError as e:
        raise OutOfMemoryError(f"not enough host memory for a {dtype} copy of {what}: {e}") from e
    if array.dtype.kind == "f" and array.dtype.itemsize > dtype.itemsize:
        lost = np.isinf(converted) & np.isfinite(array)
        if lost.any():
            at = tuple(int(i) for i in np.argwhere(lost)[0])
            where = f"{what}[{', '.join(map(str, at))}]" if at else what
            raise InputError(f"{where}: {float(array[at])!r} {_does_not_fit(dtype)}")
    return converted


def _does_not_fit(dtype: np.dtype) -> str:
    return f"does not fit {dtype} (at most {np.finfo(dtype).max!s} in magnitude)"


def _number(what: str, value: object, expected: str = "a real number") -> float:
    """``value``, a real number (a Python or numpy int or float, or a 0-d array of one), as a
    float; anything else (a complex, a bool, a str, None, an array) is a ``TypeError`` saying
    ``what`` must be ``expected``."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be {expected}, not {_kind(value)}")
    try:
        number = float(value)
        if not math.isinf(number) or np.isinf(value):
            return number
    except OverflowError:  # a Python int past float64's range (a long double past it is inf)
        pass
    raise InputError(f"{what}: {value} {_does_not_fit(np.dtype(np.float64))}")


# The numbers a scalar input takes without the checks for arrays and DLPack objects.
_PLAIN_NUMBERS = frozenset({float, int, np.float32, np.float64})
# The largest finite value of each dtype: a number no larger in magnitude converts finite.
_LARGEST = {np.dtype(t): float(np.finfo(t).max) for t in (np.float32, np.float64)}


def _scalar(what: str, value: object, dtype: np.dtype) -> np.ndarray:
    """``value`` (see :func:`_number`) as a 0-d array of ``dtype``, which it must fit: rounded
    as a literal is, never made infinite."""
    number = _number(what, value)
    if abs(number) <= _LARGEST[dtype]:  # the common case, without errstate's microseconds
        return np.array(number, dtype=dtype)
    with np.errstate(over="ignore"):
        converted = np.array(number, dtype=dtype)
    if math.isfinite(number) and not np.isfinite(converted):
        raise InputError(f"{what}: {number!r} {_does_not_fit(dtype)}")
    return converted


def _size(symbol: object, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InputError(f"size `{symbol}` = {value!r}: sizes are positive integers")
    return int(value)


def _backend(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"backend must be a str (\"auto\", \"cpu\", \"cuda\", \"cuda:1\", …), not {_kind(value)}")
    return value


def _threads(value: object) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise InputError(f"threads = {value!r}: a positive integer, or None for FUSE_NUM_THREADS, else every core")
    return int(value)


class Program:
    """A compiled script. Call it with every input by name; it returns a dict of the outputs
    in the script's order (arrays, and floats for scalar outputs)::

        out = prog(A=A, p=p, r=r)
        q, s = out.values()

    **Arrays.** Each input must have the script's dtype (``prog.dtype``). A C-contiguous array
    of that dtype is read in place, without a copy — a numpy array, or any array in host memory
    that speaks DLPack (a PyTorch CPU tensor, a JAX array on the CPU), taken through
    ``numpy.from_dlpack``.

    **GPU arrays.** A program compiled for a GPU (``backend="cuda"`` or ``"cuda:N"``) also reads
    arrays in that GPU's memory in place — CuPy arrays, PyTorch CUDA tensors, JAX arrays on the
    GPU, anything with ``__dlpack__`` — C-contiguous and of the script's dtype (anything else is
    an :class:`InputError`; fuseblas copies nothing on the GPU). They are taken with
    ``__dlpack__(stream=1)``: the producer's pending work is ordered before fuse's, which runs on
    the GPU's legacy default stream. When any input is such an array, the array outputs stay on
    the GPU as :class:`DeviceArray` s (``torch.from_dlpack(out["q"])``,
    ``cupy.from_dlpack(out["q"])``: no copy; ``.to_host()`` for numpy), the host inputs are
    copied up once, and scalar outputs come back as floats. Any other array whose dtype
    converts to the script's without loss (``numpy.can_cast(..., "safe")``: float32 or integers
    into a float64 script) and any non-contiguous array is converted once per call; a float64
    array for a float32 script is refused (:class:`InputError`) rather than silently rounded.
    Lists and tuples of numbers are converted as ``numpy.asarray(x, dtype=prog.dtype)``.
    Anything else where an array belongs (None, a str, a buffer) is a ``TypeError``.

    **Scalars** (inputs declared ``scalar``) are real numbers: a Python or numpy int or float,
    or a 0-d array of one, rounded to the script's dtype as a literal is. A complex number or a
    bool is a ``TypeError``; a number that does not fit the dtype (1e300 for a float32 script)
    an :class:`InputError`. Inputs read in place cannot be resized by another thread during the
    call (numpy refuses it).

    **out=**: ``prog(..., out={"q": q_buf})`` writes output ``q`` into ``q_buf`` (a writable
    array of its shape and dtype; for a scalar output a 0-d array of the script's dtype or
    float64) and returns it in the dict in place of a new array.
    """

    def __init__(self, native: "_core.Program") -> None:
        self._native = native
        self._dtype = np.dtype(native.dtype)
        self._shapes = {name: tuple(shape) for name, shape in native.inputs}
        self._scalars = frozenset(name for name, shape in self._shapes.items() if not shape)
        self._outputs = tuple(native.outputs)

    def __call__(self, *, out: Optional[Mapping[str, np.ndarray]] = None, **arrays: object) -> Dict[str, Output]:
        if out is not None and not isinstance(out, Mapping):
            raise TypeError(f"out must be a dict of output names to arrays ({{'q': q_buf}}), not {_kind(out)}")
        for name in out or ():
            if name not in self._outputs:
                raise InputError(f"out: there is no output `{name}` (the outputs are {', '.join(self._outputs)})")
        prepared = {name: self._prepare(name, value) for name, value in arrays.items()}
        result = self._native.run(prepared)
        for name, target in (out or {}).items():
            result[name] = self._write(name, result[name], target)
        return result

    def _prepare(self, name: str, value: object) -> object:
        dtype = self._dtype
        if type(value) is np.ndarray and value.dtype == dtype and value.flags.c_contiguous:
            return value  # read in place
        what = f"input `{name}`"
        if type(value) in _PLAIN_NUMBERS and name in self._scalars:
            return _scalar(what, value, dtype)
        device = _dlpack_device(value)
        if device is not None and device[0] == 2:
            return value  # a CUDA array: read in place by the native half, through DLPack
        if device is None and not isinstance(value, (list, tuple)) and np.ndim(value) == 0:
            if name in self._scalars:
                return _scalar(what, value, dtype)
            if name in self._shapes:
                raise _not_an_array(what, value, self._shapes[name])
        array = _host_array(what, value, self._shapes.get(name, ()))
        _real(what, array)
        lossless = array.dtype == dtype or np.can_cast(array.dtype, dtype, "safe")
        if not lossless and not isinstance(value, (list, tuple)):
            raise InputError(
                f"input `{name}` is {array.dtype} but {self.name} computes in {dtype}; "
                f"convert it yourself (e.g. `{name}.astype(numpy.{dtype})`) if rounding is intended"
            )
        return _converted(what, array, dtype)

    def _write(self, name: str, value: Output, target: object) -> np.ndarray:
        if isinstance(value, DeviceArray):
            raise InputError(f"out: output `{name}` stays on the GPU (a DeviceArray); out= writes host arrays")
        # A scalar output is a Python float: exactly the script's value, so float64 holds it too.
        dtypes = [self._dtype]
        if not isinstance(value, np.ndarray) and self._dtype != np.float64:
            dtypes.append(np.dtype(np.float64))
        value = np.asarray(value)
        if not isinstance(target, np.ndarray) or target.shape != value.shape or target.dtype not in dtypes:
            want = f"{' or '.join(d.name for d in dtypes)} {value.shape}"
            raise InputError(f"out: output `{name}` needs an array of {want}, the one given is {_kind(target)}")
        if not target.flags.writeable:
            raise InputError(f"out: the array given for output `{name}` is read-only")
        np.copyto(target, value)
        return target

    @property
    def name(self) -> str:
        """The script's name."""
        return self._native.name

    @property
    def dtype(self) -> np.dtype:
        """The dtype every input array must have and every output has."""
        return self._dtype

    @property
    def backend(self) -> str:
        """The backend it runs on."""
        return self._native.backend

    @property
    def inputs(self) -> Dict[str, Tuple[str, ...]]:
        """Each input's declared shape in size symbols (``()`` for a scalar)."""
        return dict(self._shapes)

    @property
    def outputs(self) -> Tuple[str, ...]:
        """The outputs' names, in the script's order (the order of the returned dict)."""
        return self._outputs

    @property
    def sizes(self) -> Dict[str, int]:
        """The script's default sizes."""
        return dict(self._native.default_sizes)

    def describe(self, **sizes: int) -> str:
        """The plan at ``sizes`` (default: the script's and ``compile``'s): which calls share
        each kernel, the predicted time, and how the timing table was chosen."""
        return self._native.describe([(k, _size(k, v)) for k, v in sizes.items()])

    def __repr__(self) -> str:
        return f"<fuseblas.Program {self.name!r} on {self.backend}, {self.dtype}>"


Operand = Union["_core.Value", float]


class Session:
    """A lazy BLAS session: each call records and returns a :class:`Value` at once, shape
    checked; nothing runs until a result is read (``numpy.asarray(v)``, :meth:`read`,
    ``float(v)`` for a scalar) or :meth:`flush`. Then every recorded call that a value you
    still hold depends on runs as one fused program; results you dropped are temporaries that
    may never reach memory. Programs are cached, so the second iteration of a loop compiles
    nothing.

    The dtype of the values picks the precision (float32 or float64; one call's values must
    agree). :meth:`array` copies its argument once: values never change, and numpy arrays may.
    Scalar arguments (``alpha``, ``a``) are Python floats, which become compile-time constants
    until a flush of the same calls meets another number in their place (from then on they are
    passed at run time: one more compile, then none), or scalar values such as :meth:`scalar`
    or the result of :meth:`dot`.

    **Scalar arithmetic.** Scalar values (results of :meth:`dot`, :meth:`nrm2`, :meth:`scalar`,
    …) take ``+ - * /``, unary ``-`` and ``abs()``, with each other and with real numbers (Python
    or numpy ints and floats) on either side, and :meth:`sqrt`, :meth:`recip`, :meth:`max` and
    :meth:`min`: each records a scalar call computed on the device, so that ::

        beta = (rho1 / rho) * (alpha / omega)
        p = s.axpy(beta, p, r)

    reads nothing back until a value is read. A number in an expression is a constant as a
    float argument is. A vector or matrix, a str, or a value of another session or dtype there
    is a ``TypeError``.
    """

    def __init__(self, backend: str = "auto", threads: Optional[int] = None) -> None:
        """A session on ``backend`` (see :func:`compile`)."""
        self._native = _core.Session(backend=_backend(backend), threads=_threads(threads))

    @property
    def backend(self) -> str:
        """The backend the session runs on."""
        return self._native.backend

    def array(self, data: object, dtype: object = None, copy: bool = True) -> "_core.Value":
        """A value holding a copy of ``data`` (a scalar, vector or matrix), in ``dtype`` if
        given, else ``data``'s own dtype (float64 for Python numbers and lists). On a session on
        a GPU, ``data`` may be a GPU array of that GPU (CuPy, PyTorch, JAX: float32 or float64,
        C-contiguous, taken through DLPack; ``dtype`` must then be None): the copy is made there.

        ``copy=False`` reads a matrix in place rather than copying it — no copy and no fresh
        memory for a large A, as ``scipy.sparse.linalg`` reads it — where ``data`` is a
        C-contiguous float32 or float64 numpy matrix of the dtype asked for (else the one copy
        converting it is read; on a GPU, the upload is the one copy). The array must then not
        change while the value lives: a value never changes, and its computations on the host
        read the array whenever they run."""
        if (_dlpack_device(data) or (1, 0))[0] == 2 and dtype is None:
            return self._native.array_from_gpu(data)
        array = _host_array("the array", data)
        _real("the array", array)
        if dtype is not None:
            target = np.dtype(_dtype_name(dtype))
        elif array.dtype in (np.float32, np.float64):
            target = array.dtype
        elif np.can_cast(array.dtype, np.float64, "safe"):
            target = np.dtype(np.float64)
        else:
            raise InputError(f"the array is {array.dtype}: give dtype=numpy.float64 or numpy.float32 to round it")
        if target not in (np.float32, np.float64):
            raise InputError(f"a session computes in float32 or float64, not {target}")
        if not copy and array.ndim != 2:
            raise InputError(f"copy=False reads a matrix in place: the array has shape {array.shape}")
        converted = array if array.dtype == target and (copy or array.flags.c_contiguous) else \
            _converted("the array", array, target)
        return self._native.array(converted, copy=copy)

    def scalar(self, value: float, dtype: object = np.float64) -> "_core.Value":
        """A run-time scalar value: a new number never compiles anew (a Python float passed as
        an argument is a constant until it first changes, which costs one more compile).
        ``value`` is a real number that fits ``dtype``."""
        return self._native.scalar(_number("Session.scalar: value", value), _dtype_name(dtype))

    def to_device(self, value: "_core.Value") -> "_core.DeviceArray":
        """A copy of ``value``, made on the session's GPU, as a :class:`DeviceArray`
        (``torch.from_dlpack`` and ``cupy.from_dlpack`` take it without a further copy)."""
        return self._native.to_device(_value("Session.to_device", value))

    def read(self, value: "_core.Value") -> Output:
        """``value`` as a numpy array (a float for a scalar), running what it waits for."""
        return _value("Session.read", value).read()

    def flush(self) -> None:
        """Runs every recorded call that a held value depends on."""
        self._native.flush()

    def stats(self) -> Dict[str, Union[int, float]]:
        """Counts so far: ``flushes``, ``compilations``, ``cache_hits``, ``calls``, bytes
        ``to_device``/``from_device``, ``device_allocations`` and ``compute_seconds``."""
        return self._native.stats()

    def pending_scripts(self) -> Sequence[str]:
        """The fuse scripts the next flush would run (one per precision that has work)."""
        return self._native.pending_scripts()

    def call(self, function: str, *args: Operand) -> "_core.Value":
        """Records library function ``function`` (named without its ``s``/``d`` prefix) in the
        form that takes ``len(args)`` arguments — also functions you added to the library.
        Each argument is a value of the session or a real number (see :meth:`scalar`)."""
        expected = "a value of the session or a real number"
        operands = [
            a if isinstance(a, Value) else _number(f"{function}: argument {i}", a, expected) for i, a in enumerate(args, 1)
        ]
        return self._native.call(function, operands)

    # BLAS-1
    def scal(self, a: Operand, x: "_core.Value") -> "_core.Value":
        """a·x."""
        return self.call("scal", a, x)

    def axpy(self, a: Operand, x: "_core.Value", y: "_core.Value") -> "_core.Value":
        """a·x + y."""
        return self.call("axpy", a, x, y)

    def axpby(self, a: Operand, x: "_core.Value", b: Operand, y: "_core.Value") -> "_core.Value":
        """a·x + b·y."""
        return self.call("axpby", a, x, b, y)

    def add(self, x: "_core.Value", y: "_core.Value") -> "_core.Value":
        """x + y."""
        return self.call("add", x, y)

    def copy(self, x: "_core.Value") -> "_core.Value":
        """x, as a new value."""
        return self.call("copy", x)

    def dot(self, x: "_core.Value", y: "_core.Value") -> "_core.Value":
        """xᵀ·y (a scalar value)."""
        return self.call("dot", x, y)

    def asum(self, x: "_core.Value") -> "_core.Value":
        """Σ|xᵢ| (a scalar value)."""
        return self.call("asum", x)

    def nrm2(self, x: "_core.Value") -> "_core.Value":
        """‖x‖₂ (a scalar value), scaled as BLAS scales it: no overflow or underflow."""
        return self.call("nrm2", x)

    # BLAS-2
    def gemv(
        self,
        A: "_core.Value",
        x: "_core.Value",
        alpha: Optional[Operand] = None,
        beta: Optional[Operand] = None,
        y: Optional["_core.Value"] = None,
    ) -> "_core.Value":
        """alpha·A·x + beta·y: ``A·x`` alone, ``alpha·A·x`` with ``alpha``, and with ``y`` the
        whole form (``alpha`` and ``beta`` default to 1)."""
        return self.call("gemv", *_blas2(A, x, alpha, beta, y))

    def gemtv(
        self,
        A: "_core.Value",
        x: "_core.Value",
        alpha: Optional[Operand] = None,
        beta: Optional[Operand] = None,
        y: Optional["_core.Value"] = None,
    ) -> "_core.Value":
        """alpha·Aᵀ·x + beta·y, in the forms of :meth:`gemv`."""
        return self.call("gemtv", *_blas2(A, x, alpha, beta, y))

    def ger(self, x: "_core.Value", y: "_core.Value", A: "_core.Value", alpha: Optional[Operand] = None) -> "_core.Value":
        """A + alpha·x·yᵀ (a new matrix; ``alpha`` defaults to 1)."""
        return self.call("ger", x, y, A) if alpha is None else self.call("ger", alpha, x, y, A)

    def madd(self, A: "_core.Value", B: "_core.Value") -> "_core.Value":
        """A + B."""
        return self.call("madd", A, B)

    # Matrices from vectors, and triangular products
    def outer(self, x: "_core.Value", y: "_core.Value", alpha: Optional[Operand] = None) -> "_core.Value":
        """alpha·x·yᵀ: a new m×n matrix from x of length m and y of length n, reading no
        matrix (``alpha`` defaults to 1)."""
        return self.call("outer", x, y) if alpha is None else self.call("outer", alpha, x, y)

    def mscal(self, a: Operand, A: "_core.Value") -> "_core.Value":
        """a·A, a new matrix."""
        return self.call("mscal", a, A)

    def trmv(
        self,
        A: "_core.Value",
        x: "_core.Value",
        lower: bool = False,
        trans: bool = False,
        unitdiag: bool = False,
    ) -> "_core.Value":
        """T·x (Tᵀ·x where ``trans``), T the upper triangle of the n×n ``A`` (the lower where
        ``lower``), its diagonal taken as ones where ``unitdiag`` — the options of
        ``scipy.linalg.blas.dtrmv``. Only T's elements are read: the other triangle (and the
        diagonal where ``unitdiag``) may hold anything, NaN included."""
        for name, flag in (("lower", lower), ("trans", trans), ("unitdiag", unitdiag)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"Session.trmv: {name} is a bool, not {_kind(flag)}")
        product = "trmtv" if trans else "trmv"
        function = f"{product}_{'lower' if lower else 'upper'}{'_unit' if unitdiag else ''}"
        return self.call(function, A, x)

    # Scalar functions: recorded like the BLAS calls (computed on the device, read back only
    # when read). The operators + - * / and unary -, abs() of scalar values record plus, sub,
    # mul, div, neg and abs; these are the functions without an operator.
    def sqrt(self, a: Operand) -> "_core.Value":
        """√a of a scalar value (IEEE: NaN where a < 0)."""
        return self._native.scalar_call("sqrt", [a])

    def recip(self, a: Operand) -> "_core.Value":
        """1 / a of a scalar value (IEEE: ±inf where a is ±0)."""
        return self._native.scalar_call("recip", [a])

    def max(self, a: Operand, b: Operand) -> "_core.Value":
        """max(a, b) of scalar values or numbers, as C's fmax (a NaN argument gives the other)."""
        return self._native.scalar_call("max", [a, b])

    def min(self, a: Operand, b: Operand) -> "_core.Value":
        """min(a, b) of scalar values or numbers, as C's fmin (a NaN argument gives the other)."""
        return self._native.scalar_call("min", [a, b])

    def __repr__(self) -> str:
        return f"<fuseblas.Session on {self.backend}>"


def _value(what: str, value: object) -> "_core.Value":
    if not isinstance(value, Value):
        raise TypeError(f"{what} takes a value of the session, not {_kind(value)}")
    return value


def _blas2(A: object, x: object, alpha: object, beta: object, y: object) -> Tuple[object, ...]:
    if y is not None:
        return (1.0 if alpha is None else alpha, A, x, 1.0 if beta is None else beta, y)
    if beta is not None:
        raise InputError("beta scales y: give y too")
    return (A, x) if alpha is None else (alpha, A, x)
