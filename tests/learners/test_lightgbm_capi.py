"""LightGBM's C API called directly (``tunemix.train.learners.lightgbm_capi``) against its slow, obvious
twin: the ``lightgbm`` package doing the same thing (a Dataset of a ``Sequence`` of code rows or
of a float matrix, ``lightgbm.train`` with ``early_stopping`` and ``record_evaluation``, the
booster kept up to its best iteration). The trees must be the same to the last bit: the JSON
dumps are compared whole, with the iterations trained, the best iteration, its score and the
validation history."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

from tunemix.train.data.binned import BinnedView, bin_view
from tunemix.train.learners import lightgbm_capi as capi
from tunemix.train.learners.lambdamart import LambdaMART
from tunemix.train.learners.lightgbm_data import code_dataset_params, sharing_datasets
from tunemix.train.learners.mcrank import McRank, lightgbm_params, sampling_params

lgb = pytest.importorskip("lightgbm")


def _ranking(seed: int, n_queries: int, levels: int = 4, d: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 30, size=n_queries)
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x = rng.normal(size=(int(off[-1]), d)).astype(np.float32)
    x[:, 2] = np.round(x[:, 2])  # a column of few values, zeros among them
    signal = x[:, 0] + 0.5 * x[:, 1] * x[:, 3] + 0.3 * rng.normal(size=x.shape[0])
    y = np.digitize(signal, np.quantile(signal, np.linspace(0, 1, levels + 1)[1:-1])).astype(np.int64)
    return x, y, off


def _package_code_dataset(binned: BinnedView, label: np.ndarray, params: dict[str, Any], group: Any,
                          reference: Any = None) -> Any:
    """The package's Dataset of the codes, as ``lightgbm_data`` built it before the C API."""

    class CodeRows(lgb.Sequence):
        batch_size = capi.BATCH_ROWS

        def __init__(self, codes: np.ndarray) -> None:
            self.codes = codes

        def __len__(self) -> int:
            return int(self.codes.shape[1])

        def __getitem__(self, idx: Any) -> np.ndarray:
            if isinstance(idx, int | np.integer):
                return self.codes[:, int(idx)].astype(np.float64)
            return np.ascontiguousarray(self.codes[:, idx].T, dtype=np.float64)

    ds = lgb.Dataset(CodeRows(binned.codes), label=label, group=group, reference=reference,
                     params=dict(reference.params) if reference is not None
                     else code_dataset_params(params, binned.n_docs), free_raw_data=True)
    return ds.construct()


def _package_train(params: dict[str, Any], ds: Any, n: int, valid: Any, patience: int, metric: str
                   ) -> tuple[Any, dict[str, Any]]:
    history: dict[str, Any] = {}
    callbacks = []
    kw: dict[str, Any] = {}
    if valid is not None:
        kw = {"valid_sets": [valid], "valid_names": ["eval"]}
        callbacks = [lgb.early_stopping(patience, first_metric_only=True, verbose=False),
                     lgb.record_evaluation(history)]
    booster = lgb.train(params, ds, num_boost_round=n, callbacks=callbacks, **kw)
    return booster, history.get("eval", {}).get(metric, [])


def _trees(dump: dict[str, Any]) -> list[Any]:
    return dump["tree_info"]


@pytest.mark.parametrize("sampling", [(1.0, 1.0), (0.7, 0.8)])
def test_lambdamart_on_codes_stopped_early_is_the_package_to_the_bit(sampling: tuple[float, float]) -> None:
    x, y, off = _ranking(1, 60)
    xv, yv, offv = _ranking(2, 25)
    train = bin_view(x, off, "raw")
    vali = bin_view(xv, offv, "raw", bins=train.bins)
    kw = dict(n_leaves=7, learning_rate=0.3, n_iterations=200, min_data_in_leaf=5, seed=3,
              feature_fraction=sampling[0], bagging_fraction=sampling[1])
    ours = LambdaMART(**kw).fit(train, y, off, eval_set=(vali, yv, offv), early_stopping_rounds=7)

    params = {**lightgbm_params(objective="lambdarank", n_leaves=7, learning_rate=0.3, min_data_in_leaf=5, n_bins=255,
                                seed=3, n_threads=1, **sampling_params(*sampling)), "metric": "ndcg", "eval_at": [10]}
    ds = _package_code_dataset(train, y, params, np.diff(off))
    vs = _package_code_dataset(vali, yv, {}, np.diff(offv), reference=ds)
    booster, history = _package_train(params, ds, 200, vs, 7, "ndcg@10")
    assert ours.iterations_trained_ == len(history) < 200 and ours.stop_reason_ == "early_stopping"
    assert ours.best_iteration_ == booster.best_iteration
    assert ours.best_score_ == booster.best_score["eval"]["ndcg@10"]
    assert _trees(capi.Booster.from_string(ours.model_).dump()) == _trees(booster.dump_model())
    np.testing.assert_array_equal(ours.decision_function(xv)[:, 0], booster.predict(
        train.bins.transform(xv).astype(np.float32), raw_score=True))


def test_mcrank_on_floats_with_an_eval_set_is_the_package_to_the_bit() -> None:
    """The relevance head's path: McRank multiclass on float features, stopped on the log loss."""
    x, y, _ = _ranking(3, 50, levels=3)
    xv, yv, _ = _ranking(4, 20, levels=3)
    ours = McRank(n_leaves=4, learning_rate=0.2, n_iterations=150, min_data_in_leaf=10, seed=5,
                  bagging_fraction=0.8).fit(x, y, eval_set=(xv, yv), early_stopping_rounds=6)
    params = {**lightgbm_params(objective="multiclass", num_class=3, n_leaves=4, learning_rate=0.2,
                                min_data_in_leaf=10, n_bins=255, seed=5, n_threads=1, **sampling_params(1.0, 0.8)),
              "metric": "multi_logloss"}
    ds = lgb.Dataset(x, y, params={"max_bin": 255, "verbose": -1}, free_raw_data=True)
    vs = lgb.Dataset(xv, yv, reference=ds)
    booster, history = _package_train(params, ds, 150, vs, 6, "multi_logloss")
    assert ours.iterations_trained_ == len(history) and ours.best_iteration_ == booster.best_iteration
    assert ours.best_loss_ == booster.best_score["eval"]["multi_logloss"]
    assert _trees(ours._dump()) == _trees(booster.dump_model())


def test_mcrank_on_shared_codes_and_the_ordinal_variant_are_the_package_to_the_bit() -> None:
    x, y, off = _ranking(5, 40, levels=3)
    xv, yv, offv = _ranking(6, 15, levels=3)
    train = bin_view(x, off, "raw")
    vali = bin_view(xv, offv, "raw", bins=train.bins)
    with sharing_datasets(seed=11):  # the pipeline's: the Dataset's rows drawn with the fit's seed
        ours = McRank(n_leaves=5, learning_rate=0.3, n_iterations=80, min_data_in_leaf=5, seed=2).fit(
            train, y, eval_set=(vali, yv), early_stopping_rounds=5, group=np.diff(off), eval_group=np.diff(offv))
    params = {**lightgbm_params(objective="multiclass", num_class=3, n_leaves=5, learning_rate=0.3,
                                min_data_in_leaf=5, n_bins=255, seed=2, n_threads=1), "metric": "multi_logloss"}
    ds = _package_code_dataset(train, y, {"seed": 11}, np.diff(off))
    vs = _package_code_dataset(vali, yv, {}, np.diff(offv), reference=ds)
    booster, _ = _package_train(params, ds, 80, vs, 5, "multi_logloss")
    assert _trees(ours._dump()) == _trees(booster.dump_model())

    ordinal = McRank(variant="ordinal", n_leaves=4, n_iterations=6, min_data_in_leaf=5).fit(x, y)
    for k, model in enumerate(ordinal.models_):
        p = lightgbm_params(objective="binary", n_leaves=4, learning_rate=0.1, min_data_in_leaf=5, n_bins=255, seed=0,
                            n_threads=1)
        b = lgb.train(p, lgb.Dataset(x, (y <= k).astype(np.float64), params={"max_bin": 255, "verbose": -1}),
                      num_boost_round=6)
        assert _trees(capi.Booster.from_string(model).dump()) == _trees(b.dump_model())
        np.testing.assert_array_equal(ordinal.decision_function(x)[:, k], b.predict(x, raw_score=True))


def test_a_time_budget_keeps_every_iteration_trained() -> None:
    """``after_iteration`` returning True stops the run there with all its iterations (the
    package's callback raising EarlyStopException at that iteration)."""
    x, y, off = _ranking(7, 30)
    ds = capi.matrix_dataset(x, {"max_bin": 255, "verbose": -1, "objective": "lambdarank", "seed": 0,
                                 "deterministic": True, "force_row_wise": True, "num_threads": 1}
                             ).set_fields(y, np.diff(off))
    seen: list[int] = []

    def stop_at_five(i: int) -> bool:
        seen.append(i)
        return i == 5

    run = capi.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "deterministic": True,
                      "force_row_wise": True}, ds, 50, after_iteration=stop_at_five)
    assert seen == [1, 2, 3, 4, 5] and run.stopped and run.trained == 5 and run.kept == 5
    assert capi.Booster.from_string(run.model).current_iteration() == 5


def test_errors_are_lightgbms_message() -> None:
    x, y, off = _ranking(8, 10)
    with pytest.raises(capi.LightGBMError, match="num_leaves"):
        ds = capi.matrix_dataset(x, {"max_bin": 255, "verbose": -1}).set_fields(y, np.diff(off))
        capi.train({"objective": "lambdarank", "num_leaves": 1, "verbose": -1}, ds, 3)
    with pytest.raises(ValueError, match="early_stopping_rounds must be at least 1"):
        LambdaMART(n_iterations=3).fit(x, y, off, eval_set=(x, y, off), early_stopping_rounds=0)
    with pytest.raises(ValueError, match="early_stopping_rounds must be at least 1"):
        McRank(n_iterations=3).fit(x, np.minimum(y, 2), eval_set=(x, np.minimum(y, 2)), early_stopping_rounds=0)
    with pytest.raises(ValueError, match="3 labels"):
        capi.matrix_dataset(x, {"verbose": -1}).set_fields(y[:3], None)
    assert capi.param_string({"a": 1, "b": [10, 20], "c": None, "d": True}) == "a=1 b=10,20 d=True num_threads=1"
    assert capi.param_string({"num_threads": 2}) == "num_threads=2"


def test_the_library_is_found_without_running_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    path = capi.library_path()
    assert path is not None and path.name.startswith("lib_lightgbm")
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # as if it were not installed
    assert capi.library_path() is None


def test_a_default_fit_never_imports_the_lightgbm_package() -> None:
    """The point of the C API: a fit loads LightGBM's library, not its Python package (which
    brings pandas, scikit-learn and SciPy's statistics: 1.4 CPU-s holding the GIL)."""
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import tunemix
        rng = np.random.default_rng(0)
        sizes = rng.integers(5, 15, size=60)
        x = rng.normal(size=(int(sizes.sum()), 6)).astype(np.float32)
        y = np.clip(np.round(x[:, 0] + rng.normal(size=x.shape[0]) * 0.5 + 1), 0, 2).astype(int)
        n = int(sizes[:45].sum())
        r = tunemix.TuneMixRanker(n_jobs=2, progress=False).fit(
            x[:n], y[:n], group=sizes[:45], eval_set=[(x[n:], y[n:])], eval_group=[sizes[45:]])
        assert any(t["type"] == "lambdamart" for t in r.record_["member_types"])
        print("imported:" + ",".join(m for m in ("lightgbm", "sklearn", "pandas") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("imported:")]
    assert line == ["imported:"], f"the fit imported {line}"


def test_every_call_with_parameters_names_the_thread_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """LightGBM keeps its thread count in one process-wide variable that each call with parameters
    sets, and a call without ``num_threads`` resets it to every core: a booster on another thread
    then evaluated NDCG on more threads than it sized its buffers for (a segfault). Every call this
    module makes with parameters must carry ``num_threads``: Datasets of codes and floats, the
    reference set, the booster, early stopping, a prediction."""
    real = capi.library()
    seen: list[tuple[str, str]] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            fn = getattr(real, name)

            def call(*args: Any) -> Any:
                for a in args:
                    if isinstance(a, bytes) and b"=" in a and name != "LGBM_BoosterLoadModelFromString":
                        seen.append((name, a.decode()))
                return fn(*args)

            return call

    monkeypatch.setattr(capi, "_lib", Recorder())
    x, y, off = _ranking(9, 30)
    xv, yv, offv = _ranking(10, 12)
    train = bin_view(x, off, "raw")
    vali = bin_view(xv, offv, "raw", bins=train.bins)
    lm = LambdaMART(n_leaves=5, n_iterations=8, min_data_in_leaf=5).fit(train, y, off, eval_set=(vali, yv, offv),
                                                                       early_stopping_rounds=3)
    McRank(n_leaves=4, n_iterations=5, min_data_in_leaf=5).fit(x, np.minimum(y, 2), eval_set=(xv, np.minimum(yv, 2)))
    lm.decision_function(xv)
    names = {n for n, _ in seen}
    assert {"LGBM_GetSampleCount", "LGBM_SampleIndices", "LGBM_DatasetCreateFromSampledColumn",
            "LGBM_DatasetCreateFromMat", "LGBM_BoosterCreate", "LGBM_BoosterPredictForMat"} <= names
    assert all("num_threads=1" in text.split() for _, text in seen), [n for n, t in seen if "num_threads=1" not in t]
