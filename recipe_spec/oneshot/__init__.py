"""One-shot compression with calibration data (llm-compressor's ``oneshot``), framework-free:
the modifiers a recipe holds (:mod:`.modifiers`), the calibration samples and their order
(:mod:`.calibration`), the pipelines (:mod:`.pipeline`) over a backend's calibration host
(:mod:`.host`), and the entry point (:mod:`.api`, exported as ``recipe_spec.oneshot``)."""

from __future__ import annotations

from .api import apply_oneshot, last_report, oneshot
from .calibration import Calibration, prepare
from .compress import LayerReport
from .host import CalibrationHost, ModuleInfo
from .modifiers import OneShotModifier, resolve, select_modules
from .pipeline import PIPELINES, OneShotReport, run_pipeline

__all__ = [
    "oneshot", "apply_oneshot", "last_report", "Calibration", "prepare", "LayerReport",
    "CalibrationHost", "ModuleInfo", "OneShotModifier", "resolve", "select_modules", "PIPELINES",
    "OneShotReport", "run_pipeline",
]
