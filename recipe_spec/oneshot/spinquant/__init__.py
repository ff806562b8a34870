"""SpinQuant (``SpinQuantModifier``): rotations R1 (the residual stream: the embeddings' and
each block's output layers' outputs, inverted at every layer that reads the stream), R2 (per
attention head: ``v_proj``'s outputs, inverted at ``o_proj``'s inputs) and R4 (``down_proj``'s
inputs, inverted online), as llm-compressor 0.14 builds them for a Llama-style model (its
default mappings: ``embed_tokens``, ``q/k/v/o_proj``, ``up/gate/down_proj``, ``lm_head``), after
untying the word embeddings, centering the embeddings and fusing each normalisation's scale
into the layers it feeds (:class:`~.shared.rotation.Rotation`). ``transform_type`` (default
``hadamard``), ``transform_block_size`` (R1 and R4; default each layer's width; R2 takes the
head width), ``precision``; R3 (the queries after RoPE and the key cache, per head, online:
compressed-tensors' attention hooks; it changes no weight and cancels in the attention scores,
so it matters to a quantized KV cache). Refused, located: other ``mappings`` / ``norm_mappings``,
``transform_config`` (llm-compressor 0.14 stops on it: it skips the mappings the norm fusing
reads), ``randomize`` and ``learnable`` (refused by llm-compressor 0.14); R3 and R4 on a backend
without online rotations (``transform:online-rotations``: Keras, where R1 and R2 run).

>>> spinquant_rotation(("R1", "R2"), "hadamard", "torch.float64", None).head_dim_groups
('R2',)
"""

from __future__ import annotations

from typing import Any

from ...diagnostics.base import Diagnostic
from ...recipe.model import Modifier, Recipe
from ..algorithm import Algorithm, OneShotModifier, register
from ..settings import b001, refuse_unrun, value
from ..shared.rotation import Rotation, check_transform

__all__ = ["SpinQuant", "SPINQUANT", "spinquant_rotation", "LLAMA", "NORMS"]

#: llm-compressor 0.14's default SpinQuant mapping (``LlamaForCausalLM``'s).
LLAMA: dict[str, Any] = {
    "embedding": "re:.*embed_tokens$", "attn_q": "re:.*q_proj$", "attn_k": "re:.*k_proj$",
    "attn_v": "re:.*v_proj$", "attn_o": "re:.*o_proj$", "mlp_in": ("re:.*up_proj$", "re:.*gate_proj$"),
    "mlp_out": ("re:.*down_proj$",), "lm_head": "lm_head", "attn": "re:.*self_attn$"}
#: Its default norm mapping: each norm and the Linear layers it feeds.
NORMS = (("re:.*input_layernorm$", ("re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$")),
         ("re:.*post_attention_layernorm$", ("re:.*up_proj$", "re:.*gate_proj$")),
         ("model.norm", ("lm_head",)))


def _group(kind: str, precision: str, size: int | None, apply: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": kind, "randomize": False, "requires_grad": False, "precision": precision, "head_dim": size,
            "apply": [{"ignore": [], **a} for a in apply]}


def spinquant_rotation(rotations: tuple[str, ...], kind: str, precision: str, block: int | None) -> Rotation:
    """The rotations R1, R2, R3, R4 (those of ``rotations``) as llm-compressor's ``on_initialize``
    makes them, and the steps before them."""
    m = LLAMA
    groups: dict[str, Any] = {}
    if "R1" in rotations:
        groups["R1"] = _group(kind, precision, block, [
            {"targets": [m["embedding"], m["attn_o"], *m["mlp_out"]], "location": "weight_output"},
            {"targets": [m["attn_q"], m["attn_k"], m["attn_v"], *m["mlp_in"], m["lm_head"]],
             "location": "weight_input", "inverse": True}])
    if "R2" in rotations:
        groups["R2"] = _group(kind, precision, None, [
            {"targets": [m["attn_v"]], "location": "weight_output"},
            {"targets": [m["attn_o"]], "location": "weight_input", "inverse": True}])
    if "R3" in rotations:  # queries after RoPE and the key cache, per head, online (compressed-tensors' attention hooks)
        groups["R3"] = _group(kind, precision, None, [
            {"targets": [m["attn"]], "location": "q_attn"}, {"targets": [m["attn"]], "location": "k_cache"}])
    if "R4" in rotations:
        groups["R4"] = _group(kind, precision, block, [
            {"targets": list(m["mlp_out"]), "location": "input"},
            {"targets": list(m["mlp_out"]), "location": "weight_input", "inverse": True}])
    return Rotation({"config_groups": groups}, tuple(g for g in ("R2", "R3") if g in groups), untie=True,
                    center=m["embedding"], norms=NORMS)


def _read(recipe: Recipe, m: Modifier, errors: list[Diagnostic]) -> Rotation | None:
    before = len(errors)
    refuse_unrun(recipe, m, errors)
    rotations = value(m, "rotations")
    if isinstance(rotations, str) or not rotations:
        rotations = ()
    wanted = tuple(str(r).upper() for r in rotations)
    if not wanted or any(r not in ("R1", "R2", "R3", "R4") for r in wanted):
        errors.append(b001(recipe, m, f"{m.type} rotations {rotations!r} is not a list of R1, R2, R3, R4",
                           "Write rotations: [R1, R2] (the default), or with R4.", "rotations"))
    check_transform(recipe, m, errors)
    if len(errors) > before:
        return None
    return spinquant_rotation(wanted, str(value(m, "transform_type")), str(value(m, "precision")),
                              value(m, "transform_block_size"))


class SpinQuant(Algorithm):
    name = "spinquant"
    modifiers = ("SpinQuantModifier",)
    role = "transform"
    describe = ("rotations: SpinQuant's R1/R2 fused into the weights (norms fused and embeddings centred first), "
                "R3/R4 online")

    def read(self, recipe: Recipe, m: Modifier, errors: list[Diagnostic], version: Any) -> list[OneShotModifier]:
        rotation = _read(recipe, m, errors)
        return [] if rotation is None else [OneShotModifier(m.type, self.name, m, (), rotation=rotation)]

    def argument_needs(self, mod: OneShotModifier) -> list[tuple[str, str, str, str]]:
        online = [] if mod.rotation is None else [r for r in ("R3", "R4") if r in mod.rotation.config["config_groups"]]
        if not online:
            return []  # R1 and R2 are fused into the weights alone
        what = {"R3": "R3 rotates the queries and the key cache inside attention",
                "R4": "R4 rotates down_proj's inputs"}
        return [("transform:online-rotations", "rotations",
                 f"rotation {' and '.join(what[r] for r in online)} while the model runs",
                 f"Leave {' and '.join(online)} out (rotations: [R1, R2]: both are fused into the weights), or run it "
                 "on PyTorch.")]


SPINQUANT = register(SpinQuant())
