"""``tunemix.read_letor``: a LETOR/SVMlight file as the arrays ``fit``, ``predict`` and ``explain`` take."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tunemix.core.data.svmlight import read_svmlight
from tunemix.model import PathLike


class LetorData(NamedTuple):
    """A ranking file's contents: ``X, y, group, qids, docids = tunemix.read_letor(path)``."""

    X: Any                                  # (n, d) float32, or scipy.sparse CSR with sparse=True
    y: npt.NDArray[np.int32]                # grades, one per document
    group: npt.NDArray[np.int64]            # query sizes, in file order (LightGBM's group)
    qids: npt.NDArray[np.str_]              # one per query
    docids: npt.NDArray[np.str_] | None     # one per document ('# docid = X' comments), else None


def read_letor(path: PathLike, *, n_features: int | None = None, sparse: bool = False,
               missing: str = "zero") -> LetorData:
    """Read a LETOR/SVMlight file (``label qid:Q 1:v 2:v ... # docid = X``, a query's lines
    contiguous) with the project's reader; bad lines raise ``tunemix.DataFormatError`` naming the
    file and line. ``n_features``: the column count (give the model's, ``model.n_features``, for a
    file whose largest feature id is smaller); default the largest id in the file. ``sparse``:
    X as a scipy CSR matrix (scipy must be installed). ``missing``: a feature a line omits is 0
    (``"zero"``, LETOR's rule) or a missing value (``"nan"``: NaN, which every member type handles
    in its own way, docs/missing-values.md).

    >>> X, y, group, qids, docids = tunemix.read_letor("test.txt")          # doctest: +SKIP
    >>> model.predict(X, group=group)                                      # doctest: +SKIP
    """
    data = read_svmlight(path, n_features=n_features, missing=missing)
    x: Any = data.features
    if sparse:
        try:
            from scipy.sparse import csr_matrix
        except ImportError:
            raise ImportError("read_letor(sparse=True) needs scipy: pip install scipy") from None
        x = csr_matrix(x)
    return LetorData(X=x, y=np.asarray(data.labels, dtype=np.int32), group=np.diff(data.query_offsets),
                     qids=np.asarray(data.qids), docids=None if data.docids is None else np.asarray(data.docids))
