"""Names parse back, params are plain and round-trip, transforms load without scipy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tunemix.core.calibration import (
    DEFAULT_CALIBRATORS,
    RegressionCalibrator,
    ShiftCalibrator,
    SigmoidCalibrator,
    calibrator_from_params,
    make_calibrator,
)

from .naive import synthetic_member

BRIEF_NAMES = [
    "shift",
    "cpc:ls",
    "cpc:ewls(C=2)",
    "cpc:el",
    "cpc:ell",
    "cpc:sndcg(sigma=0.1)",
    "rbc:linear:gain",
    "rbc:logistic:ndcg",
    "rbc:poly3:gain",
    "rbc:poly4:ndcg",
    "rbc:nn:gain",
]
EXTRA_NAMES = [
    "shift(R=12.5)",
    "cpc:ewls(C=0.5)",
    "cpc:ls(n_starts=1,max_iter=50)",
    "rbc:nn(hidden=16,ridge=0.001):ndcg",
    "rbc:linear(ridge=0):gain",
]


@pytest.mark.parametrize("spec", BRIEF_NAMES + list(DEFAULT_CALIBRATORS))
def test_canonical_names_parse_back(spec):
    c = make_calibrator(spec)
    assert c.name == spec
    assert make_calibrator(c.name).name == spec


def test_parsed_parameters():
    c = make_calibrator("cpc:sndcg(sigma=0.25)")
    assert isinstance(c, SigmoidCalibrator) and c.tcf == "sndcg" and c.sigma == 0.25
    r = make_calibrator("rbc:poly4:ndcg")
    assert isinstance(r, RegressionCalibrator) and (r.model, r.degree, r.target) == ("poly", 4, "ndcg")
    n = make_calibrator("rbc:nn(hidden=16,ridge=0.001):ndcg")
    assert isinstance(n, RegressionCalibrator) and (n.hidden, n.ridge) == (16, 0.001)
    s = make_calibrator("shift", shift_scale=42.0)
    assert isinstance(s, ShiftCalibrator) and s.scale == 42.0 and s.name == "shift(R=42)"
    assert make_calibrator("cpc:ls", shift_scale=42.0).name == "cpc:ls"


@pytest.mark.parametrize(
    "spec",
    ["", "cpc", "cpc:foo", "cpc:ls:gain", "rbc:linear", "rbc:poly:gain", "rbc:poly9:gain",
     "rbc:linear:dcg", "rbc:svm:gain", "shift(X=1)", "cpc:ls(C=abc)", "cpc:ls(sigma)",
     "cpc:sndcg(sigma=-1)", "mix:uniform"],
)
def test_bad_specs_raise_value_error(spec):
    with pytest.raises(ValueError):
        make_calibrator(spec)


def _savez(path: Path, arrays: dict[str, Any]) -> None:
    np.savez(path, **arrays)


def _is_plain(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "fiu"
    return type(value) in (float, int, str)


@pytest.fixture(scope="module")
def member():
    raw, labels, off, gains = synthetic_member(40, 12, 5, margin=2.0, noise=2.0, seed=9)
    return raw, labels, off, gains


@pytest.mark.parametrize("spec", list(DEFAULT_CALIBRATORS) + EXTRA_NAMES[:1] + ["rbc:poly4:ndcg"])
def test_params_round_trip_gives_identical_transforms(spec, member, tmp_path):
    raw, labels, off, gains = member
    c = make_calibrator(spec)
    if isinstance(c, RegressionCalibrator) and c.model == "nn":
        c.max_iter = 100
    c.fit(raw, labels, off, gains)
    params = c.to_params()
    assert all(_is_plain(v) for v in params.values()), params
    new_raw = np.random.default_rng(1).normal(0, 3, size=(50, 5))
    expected = c.transform(new_raw)
    assert expected.shape == (50,) and np.all(np.isfinite(expected))
    again = calibrator_from_params(params)
    np.testing.assert_array_equal(again.transform(new_raw), expected)
    assert again.name == c.name
    # through an .npz file (how the artifact stores arrays): scalars come back as 0-d arrays
    _savez(tmp_path / "c.npz", {k: np.asarray(v) for k, v in params.items()})
    with np.load(tmp_path / "c.npz", allow_pickle=False) as f:
        loaded = calibrator_from_params({k: f[k] for k in f.files})
    np.testing.assert_array_equal(loaded.transform(new_raw), expected)


def test_from_params_rejects_bad_params(member):
    raw, labels, off, gains = member
    params = make_calibrator("rbc:linear:gain").fit(raw, labels, off, gains).to_params()
    with pytest.raises(ValueError, match="kind"):
        calibrator_from_params({**params, "kind": "magic"})
    with pytest.raises(ValueError, match="coef_"):
        calibrator_from_params({k: v for k, v in params.items() if k != "coef_"})
    with pytest.raises(ValueError, match="shapes"):
        calibrator_from_params({**params, "coef_": np.zeros(2)})
    with pytest.raises(ValueError, match="kind"):
        ShiftCalibrator.from_params(params)


def test_transforms_load_and_run_without_scipy(member, tmp_path):
    raw, labels, off, gains = member
    arrays: dict[str, np.ndarray] = {}
    for i, spec in enumerate(["shift", "cpc:ls", "rbc:poly2:gain", "rbc:logistic:ndcg"]):
        for key, value in make_calibrator(spec).fit(raw, labels, off, gains).to_params().items():
            arrays[f"{i}.{key}"] = np.asarray(value)
    _savez(tmp_path / "cals.npz", arrays)
    np.save(tmp_path / "raw.npy", raw[:7])
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["scipy"] = None  # any scipy import now fails
        import numpy as np
        from tunemix.core.calibration import calibrator_from_params
        f = np.load({str(tmp_path / "cals.npz")!r}, allow_pickle=False)
        raw = np.load({str(tmp_path / "raw.npy")!r})
        for i in range(4):
            d = {{k.split(".", 1)[1]: f[k] for k in f.files if k.startswith(f"{{i}}.")}}
            print(calibrator_from_params(d).transform(raw).tolist())
        assert "scipy.optimize" not in sys.modules
        """
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 4
