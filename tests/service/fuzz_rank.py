"""A coverage-guided fuzzer (atheris, libFuzzer's engine) over /rank's whole decode-check-score
path: the body's bytes through ``one_pass`` and ``decode_json`` (msgspec) or ``letor_lists``, the checks and
arrays of ``rank_lists``, the model's kernels and the answer's encoder, exactly as the route
runs them. Any exception but a ``ServiceError`` (the route's 4xx), and any crash, is a finding.

    python -m tests.service.fuzz_rank MODEL_VERSION_DIR CORPUS_DIR -max_total_time=60

The first byte of an input picks the body's kind (odd: a LETOR text body, even: JSON). Run by
``tests/service/test_fuzz.py`` for a CI-sized time and by ``make fuzz`` for longer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris
import numpy as np

from tunemix.core.scoring.ensemble_model import load_model  # numba kernels: compiled, never instrumented

with atheris.instrument_imports(include=["tunemix.service", "tunemix.core"]):  # coverage of the service's own Python
    from tunemix.service.errors import ServiceError
    from tunemix.service.json_body import check_repeated_keys, decode_json, one_pass
    from tunemix.service.letor import letor_lists
    from tunemix.service.rank_answer import ENCODER, RankAnswer, ranked
    from tunemix.service.rank_body import DECODER, rank_lists
    from tunemix.service.settings import Settings

SETTINGS = Settings(max_documents=2_000, max_queries=200)


def seeds(d: int) -> list[bytes]:
    """Valid bodies of every shape, for the fuzzer to start from."""
    row = [round(0.1 * (j + 1), 3) for j in range(d)]
    bodies = [
        {"queries": [{"qid": "q1", "ids": ["a", "b"], "features": [row, row[::-1]]}], "top_k": 1},
        {"queries": [{"qid": 7, "documents": [{"id": 1, "features": row}, {"id": "x", "features": {"2": 0.5}}]}],
         "model": "m", "version": "v1"},
    ]
    text = "\n".join(f"{i % 3} qid:{i // 2} " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(row))
                     + f" # docid = D{i}" for i in range(4))
    return [b"\x00" + json.dumps(b).encode() for b in bodies] + [b"\x01" + text.encode()]


def main() -> None:
    model_dir, corpus = Path(sys.argv[1]), Path(sys.argv[2])
    model = load_model(model_dir)[0]
    d = model.n_features
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(seeds(d)):
        (corpus / f"seed-{i}").write_bytes(seed)

    def one_input(data: bytes) -> None:
        if not data:
            return
        body = data[1:]
        try:
            if data[0] % 2:
                lists, top_k = letor_lists(body, d, SETTINGS), None
            else:
                one_pass(DECODER, body)  # the one pass never raises: a struct, or None for the two passes
                req = decode_json(DECODER, body, "/rank")
                lists, top_k = rank_lists(req, d, SETTINGS), req.top_k
                check_repeated_keys(body)
        except ServiceError:
            return
        assert lists.features.shape == (lists.offsets[-1], d) and np.isfinite(lists.features).all()
        scores = model.score(lists.features, lists.offsets)
        ENCODER.encode(RankAnswer(model="m", version="v1", results=ranked(scores, lists, top_k), server_time_ms=0.0))

    atheris.Setup([sys.argv[0], str(corpus), *sys.argv[3:]], one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
