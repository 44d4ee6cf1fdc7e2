"""Calibrators by name: ``make_calibrator(spec)``, ``DEFAULT_CALIBRATORS``, ``calibrator_from_params``.

Grammar of a spec (case-sensitive, no spaces)::

    shift | shift(R=<float>)
    cpc:<tcf>[(<key>=<value>,...)]            tcf in ls, ewls, el, ell, sndcg; keys C, sigma,
                                              n_starts, max_iter
    rbc:<model>[(<key>=<value>,...)]:<target>  model in linear, logistic, poly2..poly5, nn;
                                              keys ridge, hidden, seed, max_iter, max_samples;
                                              target in gain, ndcg
    er:<link>:<T>                              McRank's expected relevance; link in softmax,
                                              ordinal; T in linear (k), gain (2^k - 1)
    ordinal+<spec>                             <spec> on the class probabilities of a
                                              cumulative (ordinal) member
    identity                                   a one-score member as it is

Examples: ``shift``, ``cpc:ls``, ``cpc:ewls(C=2)``, ``cpc:ewls(C=-1)``, ``cpc:sndcg(sigma=0.01)``,
``rbc:linear:gain``, ``rbc:logistic:ndcg``, ``rbc:poly3:gain``, ``rbc:nn(hidden=16):gain``.
Every calibrator's ``name`` is its canonical spec and parses back to an equal calibrator.
"""

from __future__ import annotations

import re

from tunemix.core.calibration.base import Calibrator, calibrator_from_params
from tunemix.core.calibration.expected_relevance import (
    ExpectedRelevanceCalibrator,
    IdentityCalibrator,
    OrdinalCalibrator,
)
from tunemix.core.calibration.regression_calibration import RegressionCalibrator
from tunemix.core.calibration.shift import ShiftCalibrator
from tunemix.core.calibration.sigmoid_calibration import CPC_TARGETS, SigmoidCalibrator

#: one calibrator of every family and target: the trainer's default pool per member (method
#: section 4: polynomials of degree 2 to 4, every regression calibrator on raw and on
#: DCG-normalised targets). SNDCG's sigma is 0.01: at 0.1 the fit often runs to the slope bound
#: (a step function with ties; 912 distinct scores of 1,500 on a synthetic member against 1,500
#: at 0.01). EWLS with C = -1 (the paper lets C take either sign) stays inside the bounds where
#: EL and EWLS(C=2) run to them; the mixer drops members whose rankings repeat another's.
DEFAULT_CALIBRATORS: tuple[str, ...] = (
    "shift",
    "cpc:ls",
    "cpc:ewls(C=2)",
    "cpc:ewls(C=-1)",
    "cpc:el",
    "cpc:ell",
    "cpc:sndcg(sigma=0.01)",
    "rbc:linear:gain",
    "rbc:linear:ndcg",
    "rbc:logistic:gain",
    "rbc:logistic:ndcg",
    "rbc:poly2:gain",
    "rbc:poly2:ndcg",
    "rbc:poly3:gain",
    "rbc:poly3:ndcg",
    "rbc:poly4:gain",
    "rbc:poly4:ndcg",
    "rbc:nn:gain",
    "rbc:nn:ndcg",
)

_HEAD = re.compile(r"^(?P<name>[a-z]+[0-9]*)(?:\((?P<opts>[^()]*)\))?$")
_FLOAT_KEYS = {"R", "C", "sigma", "ridge"}
_INT_KEYS = {"n_starts", "max_iter", "hidden", "seed", "max_samples"}
_ALLOWED = {
    "shift": {"R"},
    "cpc": {"C", "sigma", "n_starts", "max_iter"},
    "rbc": {"ridge", "hidden", "seed", "max_iter", "max_samples"},
}


def _parse_head(part: str, spec: str, family: str) -> tuple[str, dict[str, float | int]]:
    match = _HEAD.match(part)
    if match is None:
        raise ValueError(f"calibrator spec {spec!r}: cannot parse {part!r}")
    opts: dict[str, float | int] = {}
    text = match.group("opts")
    if text is not None:
        for item in filter(None, text.split(",")):
            key, sep, value = item.partition("=")
            if not sep or key not in _ALLOWED[family]:
                raise ValueError(
                    f"calibrator spec {spec!r}: unknown option {item!r}; "
                    f"{family} takes {sorted(_ALLOWED[family])}"
                )
            try:
                opts[key] = int(value) if key in _INT_KEYS else float(value)
            except ValueError as exc:
                raise ValueError(f"calibrator spec {spec!r}: bad value in {item!r}") from exc
    return match.group("name"), opts


def make_calibrator(spec: str, *, shift_scale: float | None = None) -> Calibrator:
    """An unfitted calibrator from its spec (module docstring).

    ``shift_scale`` is the member's natural bound R (AdaBoost.MH: the sum of its alphas); it is
    used by a plain ``shift`` spec and ignored by the others.

    >>> make_calibrator("cpc:ewls(C=2)").name
    'cpc:ewls(C=2)'
    """
    if not isinstance(spec, str):
        raise TypeError(f"calibrator spec must be a string, got {type(spec).__name__}")
    spec = spec.strip()
    if spec.startswith("ordinal+"):
        return OrdinalCalibrator(inner=make_calibrator(spec[len("ordinal+"):], shift_scale=shift_scale))
    if spec == "identity":
        return IdentityCalibrator()
    parts = spec.split(":")
    family = parts[0].split("(")[0]
    if family == "er" and len(parts) == 3:
        er = ExpectedRelevanceCalibrator(link=parts[1], relevance=parts[2])
        er._check_params()
        return er
    if family == "shift" and len(parts) == 1:
        _, opts = _parse_head(parts[0], spec, "shift")
        scale = opts.get("R", shift_scale)
        return ShiftCalibrator(scale=None if scale is None else float(scale))
    if family == "cpc" and len(parts) == 2:
        tcf, opts = _parse_head(parts[1], spec, "cpc")
        if tcf not in CPC_TARGETS:
            raise ValueError(f"calibrator spec {spec!r}: TCF must be one of {CPC_TARGETS}")
        cpc = SigmoidCalibrator(tcf=tcf, **opts)  # type: ignore[arg-type]
        cpc._check_params()
        return cpc
    if family == "rbc" and len(parts) == 3:
        model, opts = _parse_head(parts[1], spec, "rbc")
        degree = 2
        poly = re.fullmatch(r"poly([0-9])", model)
        if poly is not None:
            model, degree = "poly", int(poly.group(1))
        elif model == "poly":
            raise ValueError(f"calibrator spec {spec!r}: write the degree, e.g. poly3")
        rbc = RegressionCalibrator(model=model, target=parts[2], degree=degree, **opts)  # type: ignore[arg-type]
        rbc._check_params()
        return rbc
    raise ValueError(
        f"calibrator spec {spec!r} is not one of shift, cpc:<tcf>, rbc:<model>:<target>, "
        "er:<link>:<T>, ordinal+<spec>, identity (e.g. 'cpc:ls', 'rbc:poly3:gain', 'er:softmax:linear')"
    )


#: ``calibrator_from_params`` lives in ``base`` (the families register themselves there) and is
#: offered here beside ``make_calibrator``
__all__ = ["DEFAULT_CALIBRATORS", "calibrator_from_params", "make_calibrator"]
