"""``tunemix.dask.DaskTuneMixRanker`` on a LocalCluster of two worker processes: the distributed
fit against the one-process fit of the same members, the training chunks never fetched by the
client, predictions on NumPy and Dask input, the saved artifact, and the query-size checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("lightgbm")

import dask.array as da
from distributed import Client, LocalCluster

import tunemix
from tunemix.core.evaluation import mean_metric
from tunemix.dask import DaskTuneMixRanker, chunk_groups
from tunemix.ranker import TuneMixRanker
from tunemix.train.data.synthetic import make_synthetic_splits

#: the largest test NDCG@10 gap allowed between the distributed and the one-process fit of the same
#: members: LightGBM bins the floats across workers where one process reads the shared codes, so the
#: trees differ; on 20 test queries a mean NDCG@10 has a standard error of about 0.05
TOLERANCE = 0.06


def chunked(data: Any, n_chunks: int) -> tuple[Any, Any, list[np.ndarray]]:
    """X, y as Dask arrays of ``n_chunks`` row chunks of whole queries, and the sizes per chunk."""
    off = data.query_offsets
    cuts = np.linspace(0, data.n_queries, n_chunks + 1).astype(int)
    rows = tuple(int(off[cuts[i + 1]] - off[cuts[i]]) for i in range(n_chunks))
    sizes = [np.diff(off[cuts[i]:cuts[i + 1] + 1]) for i in range(n_chunks)]
    x = da.from_array(data.features, chunks=(rows, data.features.shape[1]))
    return x, da.from_array(data.labels, chunks=(rows,)), sizes


@pytest.fixture(scope="module")
def sets() -> dict[str, Any]:
    return make_synthetic_splits(n_queries={"train": 80, "vali": 20, "test": 20}, docs_per_query=(10, 20), n_features=8,
                                 n_levels=3, seed=3)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_port=0) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def fitted(client: Client, sets: dict[str, Any]) -> tuple[DaskTuneMixRanker, list[Any]]:
    """The fit, with every object the client gathered during it."""
    gathered: list[Any] = []
    original = Client._gather

    async def recording(self: Client, futures: Any, *args: Any, **kwargs: Any) -> Any:
        out = await original(self, futures, *args, **kwargs)
        gathered.append(out)
        return out

    X, y, g = chunked(sets["train"], 4)
    v = sets["vali"]
    Client._gather = recording  # type: ignore[method-assign]
    try:
        ranker = DaskTuneMixRanker(client=client).fit(X, y, group=g, eval_set=[(v.features, v.labels)],
                                                      eval_group=[np.diff(v.query_offsets)])
    finally:
        Client._gather = original  # type: ignore[method-assign]
    return ranker, gathered


def holds_chunk(obj: Any, chunks: list[np.ndarray]) -> bool:
    """Whether ``obj`` (nested in lists, tuples, dicts) holds an array equal to one of ``chunks``."""
    if isinstance(obj, np.ndarray):
        return any(obj.shape == c.shape and np.array_equal(obj, c) for c in chunks)
    if isinstance(obj, dict):
        return any(holds_chunk(v, chunks) for v in obj.values())
    if isinstance(obj, list | tuple):
        return any(holds_chunk(v, chunks) for v in obj)
    return False


def test_the_training_chunks_never_reach_the_client(fitted: Any, client: Client, sets: dict[str, Any]) -> None:
    ranker, gathered = fitted
    X, y, _ = chunked(sets["train"], 4)
    chunks = [np.asarray(b) for b in np.split(sets["train"].features, np.cumsum(X.chunks[0])[:-1])]
    chunks += [np.asarray(b) for b in np.split(sets["train"].labels, np.cumsum(y.chunks[0])[:-1])]
    chunks += [c.astype(np.float32) for c in chunks[:4]]
    assert gathered, "the recorder saw nothing: it does not watch the client's fetches"
    assert not any(holds_chunk(o, chunks) for o in gathered)
    # the check catches a fetch of a chunk (so the assertion above can fail)
    assert holds_chunk([client.compute(X.blocks[1]).result()], chunks)
    assert ranker.record_["dask"]["training"] == {"rows": sets["train"].n_docs, "queries": 80, "chunks": 4,
                                                  "features": 8}


def test_distributed_fit_against_the_one_process_fit_of_the_same_members(fitted: Any, sets: dict[str, Any]) -> None:
    ranker, _ = fitted
    record = ranker.record_
    assert {r["type"] for r in record["runs"]} == {"lambdamart", "mcrank"}
    assert set(record["dask"]["left_out"]) == {"adaboost", "lambdamart raw+std"}
    assert len(record["dask"]["workers"]) == 2
    assert record["relevance_head"].get("error") is None
    cfg = record["config"]
    one = TuneMixRanker({k: cfg[k] for k in ("members", "mixer", "relevance")}, n_jobs=1, progress=False)
    v, t = sets["vali"], sets["test"]
    one.fit(sets["train"].features, sets["train"].labels, np.diff(sets["train"].query_offsets),
            eval_set=[(v.features, v.labels)], eval_group=[np.diff(v.query_offsets)])
    assert [r["tag"] for r in one.record_["runs"]] == [r["tag"] for r in record["runs"]]
    ours = mean_metric(t.labels, ranker.predict(t.features, np.diff(t.query_offsets)), t.query_offsets, "ndcg@10")
    theirs = mean_metric(t.labels, one.predict(t.features, np.diff(t.query_offsets)), t.query_offsets, "ndcg@10")
    assert ours > 0.5 and abs(ours - theirs) <= TOLERANCE, (ours, theirs)


def test_predict_on_numpy_and_dask_input_agree(fitted: Any, sets: dict[str, Any]) -> None:
    ranker, _ = fitted
    t = sets["test"]
    X, _, g = chunked(t, 3)
    on_dask = ranker.predict(X, group=g)
    assert isinstance(on_dask, da.Array)
    local = ranker.predict(t.features, np.diff(t.query_offsets))
    np.testing.assert_allclose(on_dask.compute(), local, rtol=1e-6, atol=1e-9)
    assert np.std(local) > 0


def test_to_local_saves_an_artifact_that_loads_and_scores_the_same(fitted: Any, sets: dict[str, Any],
                                                                    tmp_path: Path) -> None:
    ranker, _ = fitted
    t = sets["test"]
    expected = ranker.predict(t.features, np.diff(t.query_offsets))
    path = ranker.to_local().save(tmp_path / "models", "dasky")
    loaded = tunemix.load(path)
    np.testing.assert_allclose(loaded.predict(t.features, np.diff(t.query_offsets)), expected, rtol=1e-6, atol=1e-9)


def test_group_chunks_that_do_not_match_x_name_the_chunk(sets: dict[str, Any]) -> None:
    X, y, g = chunked(sets["train"], 3)
    bad = [g[0], g[1][:-1], g[2]]
    with pytest.raises(ValueError, match="group chunk 1 sums to"):
        chunk_groups(X, y, bad)
    with pytest.raises(ValueError, match="group has 2 chunks but X has 3"):
        chunk_groups(X, y, g[:2])
    with pytest.raises(ValueError, match="group chunk 1 sums to"):  # before any work on a cluster
        DaskTuneMixRanker(client=object()).fit(X, y, group=bad, eval_set=[(X, y)], eval_group=[[1]])
    sizes = da.from_array(np.concatenate(g), chunks=(tuple(len(s) for s in g),))
    assert [list(s) for s in chunk_groups(X, y, sizes)] == [list(s) for s in g]


def test_a_worker_killed_mid_fit_ends_the_fit_naming_it(sets: dict[str, Any]) -> None:
    """A worker process killed while the members train: DistributedFitError names that worker and
    its chunks, and the fit returns no model."""
    import os
    import signal
    import threading
    import time

    from tunemix.dask import DistributedFitError

    X, y, g = chunked(sets["train"], 4)
    v = sets["vali"]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      scheduler_port=0) as cluster, Client(cluster) as c:
        ranker = DaskTuneMixRanker(client=c)
        outcome: dict[str, Any] = {}

        def fit() -> None:
            try:
                ranker.fit(X, y, group=g, eval_set=[(v.features, v.labels)], eval_group=[np.diff(v.query_offsets)])
            except Exception as exc:  # the outcome the test checks
                outcome["error"] = exc

        thread = threading.Thread(target=fit)
        thread.start()
        killed = None
        deadline = time.monotonic() + 240
        while killed is None and thread.is_alive() and time.monotonic() < deadline:
            for address, keys in c.processing().items():
                if any("train_on_worker" in str(k) for k in keys):
                    nanny = next(n for n in cluster.workers.values() if n.worker_address == address)
                    os.kill(nanny.process.process.pid, signal.SIGKILL)
                    killed = address
                    break
            time.sleep(0.02)
        thread.join(timeout=240)
    assert killed is not None, "no member fit was seen running"
    error = outcome.get("error")
    assert isinstance(error, DistributedFitError), outcome
    assert killed in str(error) and "was lost" in str(error) and "training chunks" in str(error)
    assert getattr(ranker, "model_", None) is None
