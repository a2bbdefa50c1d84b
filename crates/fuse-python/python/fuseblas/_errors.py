"""The exceptions fuseblas raises. Each carries fuse's one-line message, which says what is
wrong and where (a script error also as ``file``, ``line`` and ``column``)."""

from typing import Optional


class FuseError(RuntimeError):
    """Anything fuse reports that the classes below do not cover (a failed compile or run)."""


class ScriptError(FuseError, ValueError):
    """A malformed script or library entry: ``file``, ``line`` and ``column`` say where
    (``line``/``column`` are ``None`` where the position is not known)."""

    file: Optional[str] = None
    line: Optional[int] = None
    column: Optional[int] = None


class InputError(FuseError, ValueError):
    """Arrays or arguments that do not fit: a wrong shape, dtype or name, sizes that disagree,
    an unknown backend."""


class OutOfMemoryError(FuseError, MemoryError):
    """A run needs more host or device memory than there is; nothing was allocated."""


class NoDeviceError(FuseError):
    """The CUDA backend was asked for and no usable GPU or driver is here."""
