"""Numerical gradients by centred differences, for checking hand-written backward passes."""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["eval_numerical_gradient", "eval_numerical_gradient_array", "rel_error"]


def eval_numerical_gradient(f: Callable[[np.ndarray], float], x: np.ndarray, verbose: bool = True,
                            h: float = 1e-5) -> np.ndarray:
    """Gradient (shape of x) of a scalar function f at x: ``(f(x + h e_i) - f(x - h e_i)) / 2h``.

    ``x`` (float array) is modified in place while evaluating and restored entry by entry.
    """
    _check_float(x)
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        grad[index] = _centred(lambda: f(x), x, index, h)
        if verbose:
            print(index, grad[index])
    return grad


def eval_numerical_gradient_array(f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, df: np.ndarray,
                                  h: float = 1e-5) -> np.ndarray:
    """Gradient (shape of x) of ``sum(f(x) * df)``: the backward of an array function f.

    ``df`` has the shape of ``f(x)`` (the upstream gradient).
    """
    _check_float(x)
    if np.shape(f(x)) != np.shape(df):
        raise ValueError(f"df must have the shape of f(x), {np.shape(f(x))}; found {np.shape(df)}")
    grad = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        grad[index] = _centred(lambda: np.sum(np.copy(f(x)) * df), x, index, h)
    return grad


def rel_error(x, y) -> float:
    """max |x - y| / max(1e-8, |x| + |y|), elementwise (the notebooks' error measure)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return float(np.max(np.abs(x - y) / np.maximum(1e-8, np.abs(x) + np.abs(y))))


def _centred(value: Callable[[], float], x: np.ndarray, index: tuple, h: float) -> float:
    old = x[index]
    try:
        x[index] = old + h
        plus = value()
        x[index] = old - h
        minus = value()
    finally:
        x[index] = old
    return (plus - minus) / (2 * h)


def _check_float(x) -> None:
    if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.floating):
        found = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(f"x must be a float NumPy array (it is perturbed in place), found {found}; "
                        "use x.astype(np.float64)")
