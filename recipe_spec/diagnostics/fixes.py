"""Which diagnostic codes ``recipe-spec fix`` rewrites, and how safely.

:data:`FIXES` maps a code to ``(availability, what the fix does)``; availability is
``"safe"`` (some findings of the code have an exact fix, made by ``recipe-spec fix``; others
may have an unsafe one) or ``"unsafe"`` (only with ``--unsafe-fixes``). A code not in the
table has no automatic fix: :func:`fix_availability` says ``"none"``. The fixes themselves
are :mod:`recipe_spec.fix`'s; the test suite checks that every code a fix reports is here.

>>> fix_availability("M002"), fix_availability("E001")
('safe', 'none')
"""

from __future__ import annotations

__all__ = ["FIXES", "fix_availability", "fix_text_of"]

FIXES: dict[str, tuple[str, str]] = {
    "M001": ("safe", "A misspelt modifier name with exactly one candidate at most two edits "
             "away is renamed; an import path (`llmcompressor.modifiers.quantization."
             "GPTQModifier`) becomes the bare class name. With several candidates, "
             "`--unsafe-fixes` writes the closest."),
    "M002": ("safe", "A misspelt argument with exactly one candidate at most two edits away "
             "is renamed (`final_sparsty` -> `final_sparsity`). With several candidates, or "
             "one that is further away (another argument rather than a typo), "
             "`--unsafe-fixes` writes the closest."),
    "M007": ("safe", "A deprecated argument with an exact rewrite: deleted where it has no "
             "effect (`log_types`; `phased: false`, `score_type: magnitude`, "
             "`global_sparsity: false`, the only values still accepted), renamed where it is an "
             "old name (`available_gpus` -> `available_devices`), and the grouped "
             "`mfac_options:` written as the flat arguments it groups. In stage/group recipes, "
             "with `--compat`, an argument the release ignores (`sequential_update` from "
             "llm-compressor 0.5) is deleted."),
    "C001": ("safe", "What the target release requires (every release, or the one `--compat` "
             "names): a renamed argument is renamed (`percdamp` -> `dampening_frac`; `prunen` "
             "and `prunem` -> `mask_structure: \"N:M\"`); an argument the release removed "
             "without changing what it does is deleted (GPTQ `sequential_update`, SparseGPT "
             "`target_ids` and `layer_prefix`, `group`); a development name is renamed "
             "(`vLLMQuantizationModifier` -> `QuantizationModifier`). `--unsafe-fixes` deletes "
             "`sequential_targets` (the setting moved to the `oneshot()` call)."),
    "C002": ("safe", "A numbered stage key is renamed to one every release reads, in the same "
             "order (`quant_stage_1:` -> `quant_1_stage:`)."),
}


def fix_availability(code: str) -> str:
    """``"safe"``, ``"unsafe"`` or ``"none"`` for diagnostic code ``code``."""
    return FIXES.get(code, ("none", ""))[0]


def fix_text_of(code: str) -> str:
    """What ``recipe-spec fix`` does about ``code`` (empty when nothing)."""
    return FIXES.get(code, ("none", ""))[1]
