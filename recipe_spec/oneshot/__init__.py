"""One-shot compression with calibration data (llm-compressor's ``oneshot``), framework-free:
the modifiers a recipe holds (:mod:`.modifiers`), the calibration samples and their order
(:mod:`.calibration`), the pipelines (:mod:`.pipeline`) over a backend's calibration host
(:mod:`.host`), one folder per algorithm behind one interface (:mod:`.algorithm`, the registry
:mod:`.algorithms`), and the entry point (:mod:`.api`, exported as ``recipe_spec.oneshot``).

The package sits below the validator in the layers (``validate --backend`` reads a recipe as a
run would); :mod:`.api` and :mod:`.objects`, which load recipes and refuse invalid ones, sit at
the top, so this package's face does not import them."""

from __future__ import annotations

from .calibration import Calibration, prepare
from .compress import LayerReport
from .host import CalibrationHost, ModuleInfo
from .modifiers import OneShotModifier, resolve, select_modules
from .pipeline import PIPELINES, OneShotReport, last_report, run_pipeline

__all__ = [
    "last_report", "Calibration", "prepare", "LayerReport",
    "CalibrationHost", "ModuleInfo", "OneShotModifier", "resolve", "select_modules", "PIPELINES",
    "OneShotReport", "run_pipeline",
]
