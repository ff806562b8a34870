"""One-shot compression with calibration data (llm-compressor's ``oneshot``), framework-free:
the modifiers a recipe holds (:mod:`.modifiers`), the calibration samples and their order
(:mod:`.calibration`), the pipelines (:mod:`.pipeline`) over a backend's calibration host
(:mod:`.host`), one folder per algorithm behind one interface (:mod:`.algorithm`, the registry
:mod:`.algorithms`), and the entry point (:mod:`.api`, exported as ``recipe_spec.oneshot``).

The package sits below the validator in the layers (``validate --backend`` reads a recipe as a
run would); :mod:`.api` and :mod:`.objects`, which load recipes and refuse invalid ones, sit at
the top, so this package's face does not import them."""

from __future__ import annotations

import importlib
from typing import Any

from .reports import last_report

__all__ = [
    "last_report", "Calibration", "prepare", "LayerReport",
    "CalibrationHost", "ModuleInfo", "OneShotModifier", "resolve", "select_modules", "PIPELINES",
    "OneShotReport", "run_pipeline",
]

#: Where each name of this face is defined, imported when first used (``import recipe_spec``
#: stays light).
_WHERE = {
    "Calibration": ".calibration", "prepare": ".calibration", "LayerReport": ".algorithm",
    "CalibrationHost": ".host", "ModuleInfo": ".host", "OneShotModifier": ".algorithm",
    "resolve": ".modifiers", "select_modules": ".modifiers", "PIPELINES": ".pipeline",
    "OneShotReport": ".pipeline", "run_pipeline": ".pipeline",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
