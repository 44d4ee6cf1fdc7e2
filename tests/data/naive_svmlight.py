"""A slow, obviously correct LETOR/SVMlight reader: the twin of tunemix.core.data.svmlight."""

from __future__ import annotations

import numpy as np


def naive_read(text: str) -> tuple[np.ndarray, np.ndarray, list[str], list[int], list[str | None]]:
    rows: list[dict[int, float]] = []
    labels: list[int] = []
    qids: list[str] = []
    docids: list[str | None] = []
    for line in text.splitlines():
        body, _, comment = line.partition("#")
        tokens = body.split()
        if not tokens:
            continue
        labels.append(int(float(tokens[0])))
        feats: dict[int, float] = {}
        for tok in tokens[1:]:
            key, value = tok.split(":", 1)
            if key == "qid":
                qids.append(value)
            else:
                feats[int(key)] = float(value)
        rows.append(feats)
        doc = None
        if "docid" in comment:
            after = comment.split("docid", 1)[1].strip()
            if after.startswith("="):
                parts = after[1:].split()
                doc = parts[0] if parts else ""
        docids.append(doc)
    d = max((max(r) for r in rows if r), default=0)
    x = np.zeros((len(rows), d), dtype=np.float32)
    for i, r in enumerate(rows):
        for j, v in r.items():
            x[i, j - 1] = v
    sizes: list[int] = []
    block_qids: list[str] = []
    for q in qids:
        if block_qids and block_qids[-1] == q:
            sizes[-1] += 1
        else:
            block_qids.append(q)
            sizes.append(1)
    return x, np.asarray(labels), block_qids, sizes, docids
