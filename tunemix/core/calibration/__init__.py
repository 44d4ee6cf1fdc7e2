"""Calibration of multi-class members: raw K-vector scores -> one real score per document.

Tune and mix (Busa-Fekete et al., Machine Learning 2013), Sect. 5. Families:

- ``ShiftCalibrator`` (``shift``): naive shift and normalisation, Sect. 5.1;
- ``SigmoidCalibrator`` (``cpc:<tcf>``): sigmoid class-probability calibration fitted by one of
  five target calibration functions, Sects. 5.2-5.3;
- ``RegressionCalibrator`` (``rbc:<model>:<target>``): regression of gains on the K-vector,
  Sect. 5.4.

``make_calibrator(spec)`` builds one by name, ``DEFAULT_CALIBRATORS`` lists the default pool and
``calibrator_from_params`` rebuilds a fitted one from plain arrays. Transforms need numpy only.
"""

from tunemix.core.calibration.base import CalibrationError, Calibrator, CalibratorParams
from tunemix.core.calibration.registry import (
    DEFAULT_CALIBRATORS,
    calibrator_from_params,
    make_calibrator,
)
from tunemix.core.calibration.regression_calibration import RegressionCalibrator
from tunemix.core.calibration.shift import ShiftCalibrator
from tunemix.core.calibration.sigmoid_calibration import SigmoidCalibrator

__all__ = [
    "DEFAULT_CALIBRATORS",
    "CalibrationError",
    "Calibrator",
    "CalibratorParams",
    "RegressionCalibrator",
    "ShiftCalibrator",
    "SigmoidCalibrator",
    "calibrator_from_params",
    "make_calibrator",
]
