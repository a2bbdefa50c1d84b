"""Type stubs of fuseblas.linalg: SciPy's iterative solvers on fuse (see the module)."""

from typing import Any, Callable, Literal, Optional, Tuple, Union, overload

import numpy as np

from ._core import DeviceArray, Value

ArrayLike = Any
Matrix = Union[np.ndarray, Value, Any]
X = Union[np.ndarray, Value, DeviceArray]
Callback = Callable[[np.ndarray], Any]

@overload
def cg(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5, atol: float = 0.0,
       maxiter: Optional[int] = None, M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
       backend: Optional[str] = None, check_every: int = 1, return_history: Literal[False] = False) -> Tuple[X, int]: ...
@overload
def cg(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5, atol: float = 0.0,
       maxiter: Optional[int] = None, M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
       backend: Optional[str] = None, check_every: int = 1, return_history: Literal[True]) -> Tuple[X, int, np.ndarray]: ...
@overload
def bicg(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5, atol: float = 0.0,
         maxiter: Optional[int] = None, M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
         backend: Optional[str] = None, check_every: int = 1, return_history: Literal[False] = False) -> Tuple[X, int]: ...
@overload
def bicg(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5, atol: float = 0.0,
         maxiter: Optional[int] = None, M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
         backend: Optional[str] = None, check_every: int = 1, return_history: Literal[True]) -> Tuple[X, int, np.ndarray]: ...
@overload
def bicgstab(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5,
             atol: float = 0.0, maxiter: Optional[int] = None, M: Optional[ArrayLike] = None,
             callback: Optional[Callback] = None, backend: Optional[str] = None, check_every: int = 1,
             return_history: Literal[False] = False) -> Tuple[X, int]: ...
@overload
def bicgstab(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5,
             atol: float = 0.0, maxiter: Optional[int] = None, M: Optional[ArrayLike] = None,
             callback: Optional[Callback] = None, backend: Optional[str] = None, check_every: int = 1,
             return_history: Literal[True]) -> Tuple[X, int, np.ndarray]: ...
@overload
def gmres(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5,
          atol: float = 0.0, restart: Optional[int] = None, maxiter: Optional[int] = None,
          M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
          callback_type: Optional[Literal["x"]] = "x", backend: Optional[str] = None,
          return_history: Literal[False] = False) -> Tuple[X, int]: ...
@overload
def gmres(A: Matrix, b: ArrayLike, x0: Optional[Union[ArrayLike, str]] = None, *, rtol: float = 1e-5,
          atol: float = 0.0, restart: Optional[int] = None, maxiter: Optional[int] = None,
          M: Optional[ArrayLike] = None, callback: Optional[Callback] = None,
          callback_type: Optional[Literal["x"]] = "x", backend: Optional[str] = None,
          return_history: Literal[True]) -> Tuple[X, int, np.ndarray]: ...
