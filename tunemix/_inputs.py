"""Checks of the arrays a user passes to the Python API, each error naming the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tunemix.core.data.dataset import offsets_from_sizes


def features_matrix(X: Any, n_features: int | None = None, name: str = "X") -> npt.NDArray[np.float32]:
    """``X`` (a numpy array, a nested list, or a scipy sparse matrix) as a C-contiguous (n, d)
    float32 matrix without infinities (NaN, or None in a list, is a missing value:
    docs/missing-values.md); ``n_features``, when given, must be d."""
    if hasattr(X, "tocsr") and hasattr(X, "toarray"):  # scipy.sparse, without importing scipy
        X = X.toarray()
    try:
        with np.errstate(over="ignore"):
            arr = np.ascontiguousarray(np.asarray(X, dtype=np.float32))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a 2-D array of numbers: {exc}") from None
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_documents, n_features), got shape {arr.shape}")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"{name} has {arr.shape[1]} features; the model takes {n_features}")
    if np.isinf(arr).any():
        row, col = (int(v) for v in np.argwhere(np.isinf(arr))[0])
        raise ValueError(f"{name}[{row}, {col}] is not a finite float32 number (infinity or beyond ±3.4e38; "
                         "a missing value is NaN)")
    return arr


def query_offsets(group: Any, n_documents: int, name: str = "group") -> npt.NDArray[np.int64]:
    """Query sizes (``[2, 3, 1]``: the first two rows are one query, ...; None: one query of every
    row) as running offsets ``[0, 2, 5, 6]``; they must add up to ``n_documents``."""
    if group is None:
        return np.array([0, n_documents], dtype=np.int64)
    sizes = np.asarray(group)
    if sizes.ndim != 1 or sizes.dtype.kind not in "iu":
        raise ValueError(f"{name} must be a 1-D sequence of integer query sizes, got {sizes.dtype} {sizes.shape}")
    if (sizes <= 0).any():
        raise ValueError(f"{name}[{int(np.argmax(sizes <= 0))}] is {int(sizes[sizes <= 0][0])}; "
                         "every query needs at least one document")
    if int(sizes.sum()) != n_documents:
        raise ValueError(f"{name} sizes add up to {int(sizes.sum())} but there are {n_documents} documents")
    return offsets_from_sizes(sizes)


def grades(y: Any, n_documents: int, name: str = "y") -> npt.NDArray[np.int32]:
    """Integer relevance grades 0, 1, 2, ... one per document."""
    arr = np.asarray(y)
    if arr.shape != (n_documents,):
        raise ValueError(f"{name} must have one grade per document ({n_documents},), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.round(arr)).any():
            raise ValueError(f"{name} must hold integer grades")
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer grades, got dtype {arr.dtype}")
    if n_documents and arr.min() < 0:
        raise ValueError(f"{name} holds a negative grade ({int(arr.min())})")
    return arr.astype(np.int32)
