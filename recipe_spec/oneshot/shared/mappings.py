"""llm-compressor 0.14's default smoothing mappings, per architecture: which layers' input
activations are smoothed (the *balance* layers, whose weights take the scales) and which layer
produces them (the *smooth* layer, divided by the scales).

- :data:`SMOOTHQUANT_MAPPINGS` (``llmcompressor/modifiers/transform/smoothquant/utils.py``,
  ``MAPPINGS_REGISTRY``) and :data:`SMOOTHQUANT_DEFAULT`;
- :data:`AWQ_MAPPINGS` (``.../transform/awq/mappings.py``, ``AWQ_MAPPING_REGISTRY``) and
  :data:`AWQ_DEFAULT`;
- :data:`BUILT_FROM_CONFIG`: the architectures whose mappings llm-compressor builds from the
  model's config (hybrid attention: ``layer_types``); :func:`default_mappings` refuses them,
  since a recipe must then spell its mappings out.

Each table entry is a :class:`~.smoothing_match.SmoothMapping` (patterns with ``re:`` as in
compressed-tensors).

>>> [m.smooth for m in default_mappings("smoothquant", "LlamaForCausalLM")]
['re:.*input_layernorm', 're:.*post_attention_layernorm']
>>> len(default_mappings("awq", "SomeNewForCausalLM"))
4
"""

from __future__ import annotations

from .mapping_match import SmoothMapping

__all__ = ["SMOOTHQUANT_DEFAULT", "SMOOTHQUANT_MAPPINGS", "AWQ_DEFAULT", "AWQ_MAPPINGS",
           "BUILT_FROM_CONFIG", "default_mappings"]


def _m(smooth: str, *balance: str, hook: str | None = None) -> SmoothMapping:
    return SmoothMapping(smooth, tuple(balance), hook)


_QKV = ("re:.*q_proj", "re:.*k_proj", "re:.*v_proj")
SMOOTHQUANT_DEFAULT = (_m("re:.*input_layernorm", *_QKV),
                       _m("re:.*post_attention_layernorm", "re:.*gate_proj", "re:.*up_proj"))
_SQ_MIXTRAL = (_m("re:.*input_layernorm", *_QKV),)
_SQ_BLOOM = (_m("re:.*input_layernorm", "re:.*query_key_value"),
             _m("re:.*post_attention_layernorm", "re:.*dense_h_to_4h"))
_SQ_PHI3 = (_m("re:.*input_layernorm", "re:.*qkv_proj"),
            _m("re:.*post_attention_layernorm", "re:.*gate_up_proj"))
_SQ_WHISPER = (_m("re:.*self_attn_layer_norm", "re:.*k_proj", "re:.*v_proj", "re:.*q_proj"),
               _m("re:.*final_layer_norm", "re:.*fc1"))
_SQ_DEEPSEEK = (_m("re:.*input_layernorm", "re:.*q(_a)?_proj$", "re:.*kv_a_proj_with_mqa"),)
_SQ_QWEN_MOE = (_m("re:.*input_layernorm$", "re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$"),)
_SQ_COHERE = (_m("re:.*input_layernorm$", "re:.*self_attn\\.q_proj$", "re:.*self_attn\\.k_proj$",
                 "re:.*self_attn\\.v_proj$", "re:.*mlp\\.gate_proj$", "re:.*mlp\\.up_proj$"),)
_SQ_COHERE2_MOE = (_m("re:.*input_layernorm$", "re:.*self_attn\\.q_proj$", "re:.*self_attn\\.k_proj$",
                      "re:.*self_attn\\.v_proj$", "re:.*gate_proj$", "re:.*up_proj$"),)
_SQ_AFMOE = (_m("re:.*input_layernorm", "re:.*self_attn\\.q_proj", "re:.*self_attn\\.k_proj",
                "re:.*self_attn\\.v_proj", "re:.*self_attn\\.gate_proj"),
             _m("re:.*pre_mlp_layernorm", "re:.*mlp.*gate_proj", "re:.*mlp.*up_proj"))

#: SmoothQuant's mappings by model class name (``MAPPINGS_REGISTRY``).
SMOOTHQUANT_MAPPINGS: dict[str, tuple[SmoothMapping, ...]] = {
    "BloomForCausalLM": _SQ_BLOOM, "ChatGLMForConditionalGeneration": _SQ_BLOOM,
    "CohereForCausalLM": _SQ_COHERE, "Cohere2ForCausalLM": _SQ_COHERE,
    "Cohere2MoeForCausalLM": _SQ_COHERE2_MOE, "Cohere2VisionForConditionalGeneration": _SQ_COHERE,
    "DeepseekV2ForCausalLM": _SQ_DEEPSEEK, "DeepseekV3ForCausalLM": _SQ_DEEPSEEK,
    "Ernie4_5_MoeForCausalLM": _SQ_MIXTRAL,
    **{name: SMOOTHQUANT_DEFAULT for name in (
        "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration", "Glm4MoeForCausalLM",
        "GraniteForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM",
        "Mistral3ForConditionalGeneration", "MistralForCausalLM", "NanbeigeForCausalLM", "Qwen2ForCausalLM",
        "Qwen2_5OmniModel", "Qwen2_5OmniThinkerForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
        "Qwen3ForCausalLM", "SeedOssForCausalLM")},
    "Glm4MoeLiteForCausalLM": _SQ_DEEPSEEK, "GlmMoeDsaForCausalLM": _SQ_DEEPSEEK,
    "MixtralForCausalLM": _SQ_MIXTRAL, "Phi3ForCausalLM": _SQ_PHI3, "Phi3VForCausalLM": _SQ_PHI3,
    "Qwen2MoeForCausalLM": _SQ_QWEN_MOE, "Qwen3MoeForCausalLM": _SQ_QWEN_MOE,
    "WhisperForConditionalGeneration": _SQ_WHISPER, "AfmoeForCausalLM": _SQ_AFMOE,
}

_UP_DOWN = _m("re:.*up_proj$", "re:.*down_proj$")
_V_O = _m("re:.*v_proj$", "re:.*o_proj$")
_ATTN_IN = _m("re:.*input_layernorm$", "re:.*q_proj$", "re:.*k_proj$", "re:.*v_proj$")
AWQ_DEFAULT = (_ATTN_IN, _V_O, _m("re:.*post_attention_layernorm$", "re:.*gate_proj$", "re:.*up_proj$"),
               _UP_DOWN)
_AWQ_MOE = (_ATTN_IN, _V_O, _m("re:.*post_attention_layernorm$", "re:.*mlp.gate$",
                               "re:.*mlp.experts.*.gate_proj$", "re:.*mlp.experts.*.up_proj$"), _UP_DOWN)
_AWQ_LLAMA4 = (_ATTN_IN, _V_O, _m("re:.*post_attention_layernorm$", "re:.*feed_forward.router$",
                                  "re:.*feed_forward.*.gate_proj$", "re:.*feed_forward.*.up_proj$"), _UP_DOWN)
_AWQ_PHI = (_m("re:.*input_layernorm$", "re:.*qkv_proj$"), _m("re:.*qkv_proj$", "re:.*o_proj$"),
            _m("re:.*post_attention_layernorm$", "re:.*gate_up_proj$"),
            _m("re:.*gate_up_proj$", "re:.*down_proj$"))
_PRE_FF = _m("re:.*pre_feedforward_layernorm$", "re:.*gate_proj$", "re:.*up_proj$")
_AWQ_GEMMA2 = (_ATTN_IN, _V_O, _PRE_FF, _UP_DOWN)
_AWQ_GEMMA3 = (_V_O, _PRE_FF, _UP_DOWN)
_LM = "re:.*language_model.layers.\\d+."
_AWQ_MUSE = (_m(f"{_LM}input_layernorm$", f"{_LM}self_attn.q_proj$", f"{_LM}self_attn.k_proj$",
                f"{_LM}self_attn.v_proj$", f"{_LM}self_attn.gate_proj$"),
             _m(f"{_LM}self_attn.v_proj$", f"{_LM}self_attn.o_proj$"),
             _m(f"{_LM}pre_feedforward_layernorm$", f"{_LM}mlp.gate_proj$", f"{_LM}mlp.up_proj$"),
             _m(f"{_LM}mlp.up_proj$", f"{_LM}mlp.down_proj$"))
_AWQ_COHERE = (_m("re:.*input_layernorm$", "re:.*self_attn.q_proj$", "re:.*self_attn.k_proj$",
                  "re:.*self_attn.v_proj$", "re:.*mlp.gate_proj$", "re:.*mlp.up_proj$"), _V_O, _UP_DOWN)
_AWQ_COHERE2_MOE = (_m("re:.*input_layernorm$", "re:.*self_attn.q_proj$", "re:.*self_attn.k_proj$",
                       "re:.*self_attn.v_proj$", "re:.*gate_proj$", "re:.*up_proj$"), _V_O, _UP_DOWN)
_MLA = (_m("re:.*input_layernorm$", "re:.*(q|q_a)_proj$", "re:.*kv_a_proj_with_mqa$"),
        _m("re:.*q_a_layernorm$", "re:.*q_b_proj$"), _m("re:.*kv_a_layernorm$", "re:.*kv_b_proj$"))
_AWQ_DEEPSEEK = (*_MLA, _m("re:.*post_attention_layernorm$", "re:.*mlp.gate$", "re:.*gate_proj$",
                           "re:.*up_proj$"), _UP_DOWN)
_AWQ_GLM4_LITE = (*_MLA, _m("re:.*post_attention_layernorm$", "re:.*gate_proj$", "re:.*up_proj$"), _UP_DOWN)
_AWQ_BLOOM = (_m("re:.*input_layernorm$", "re:.*query_key_value$"),
              _m("re:.*post_attention_layernorm$", "re:.*dense_h_to_4h$"),
              _m("re:.*gelu_impl$", "re:.*dense_4h_to_h$"))
_AWQ_EXAONE4 = (_V_O, _UP_DOWN)
_AWQ_AFMOE = (_m("re:.*input_layernorm$", "re:.*self_attn.q_proj$", "re:.*self_attn.k_proj$",
                 "re:.*self_attn.v_proj$", "re:.*self_attn.gate_proj$"), _V_O,
              _m("re:.*pre_mlp_layernorm$", "re:.*mlp.router$", "re:.*mlp.*gate_proj$", "re:.*mlp.*up_proj$"),
              _UP_DOWN)
_LML = "re:.*language_model\\.layers\\.\\d+\\."
_AWQ_QWEN25_VL = (_ATTN_IN, _V_O,
                  _m(f"{_LML}post_attention_layernorm$", f"{_LML}mlp\\.gate_proj$", f"{_LML}mlp\\.up_proj$"),
                  _m(f"{_LML}mlp\\.up_proj$", f"{_LML}mlp\\.down_proj$"))

#: AWQ's mappings by model class name (``AWQ_MAPPING_REGISTRY``).
AWQ_MAPPINGS: dict[str, tuple[SmoothMapping, ...]] = {
    "AfmoeForCausalLM": _AWQ_AFMOE, "BloomForCausalLM": _AWQ_BLOOM,
    "CohereForCausalLM": _AWQ_COHERE, "Cohere2ForCausalLM": _AWQ_COHERE,
    "Cohere2MoeForCausalLM": _AWQ_COHERE2_MOE, "Cohere2VisionForConditionalGeneration": _AWQ_COHERE,
    "DeepseekV2ForCausalLM": _AWQ_GLM4_LITE, "DeepseekV3ForCausalLM": _AWQ_DEEPSEEK,
    "Exaone4ForCausalLM": _AWQ_EXAONE4, "Gemma2ForCausalLM": _AWQ_GEMMA2,
    "Gemma3ForCausalLM": _AWQ_GEMMA3, "Gemma3ForConditionalGeneration": _AWQ_GEMMA3,
    "Glm4MoeForCausalLM": _AWQ_MOE, "Glm4MoeLiteForCausalLM": _AWQ_GLM4_LITE,
    "GlmMoeDsaForCausalLM": _AWQ_GLM4_LITE, "Llama4ForConditionalGeneration": _AWQ_LLAMA4,
    "MuseGlimmerForConditionalGeneration": _AWQ_MUSE, "OlmoForCausalLM": _AWQ_EXAONE4,
    "Olmo3ForCausalLM": _AWQ_EXAONE4, "Phi3ForCausalLM": _AWQ_PHI, "Phi3VForCausalLM": _AWQ_PHI,
    "Qwen2_5_VLForConditionalGeneration": _AWQ_QWEN25_VL, "Qwen2MoeForCausalLM": _AWQ_MOE,
    "Qwen3MoeForCausalLM": _AWQ_MOE,
    **{name: AWQ_DEFAULT for name in (
        "GraniteForCausalLM", "LlamaForCausalLM", "Mistral3ForConditionalGeneration", "MistralForCausalLM",
        "NanbeigeForCausalLM", "Qwen2ForCausalLM", "Qwen2_5OmniModel",
        "Qwen2_5OmniThinkerForConditionalGeneration", "Qwen3ForCausalLM", "SeedOssForCausalLM",
        "Ernie4_5_MoeForCausalLM")},
}

#: Architectures whose mappings llm-compressor 0.14 builds from the model config, per algorithm.
BUILT_FROM_CONFIG: dict[str, frozenset[str]] = {
    "smoothquant": frozenset({"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
                              "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"}),
    "awq": frozenset({"Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
                      "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Step3p5ForCausalLM"}),
}


def default_mappings(algorithm: str, architecture: str) -> tuple[SmoothMapping, ...]:
    """The mappings llm-compressor 0.14 infers for a model of class ``architecture``
    (``algorithm``: ``smoothquant`` or ``awq``): its table's entry, else the default ones.
    Raises ValueError for an architecture whose mappings llm-compressor builds from the
    model's config (:data:`BUILT_FROM_CONFIG`)."""
    if architecture in BUILT_FROM_CONFIG[algorithm]:
        raise ValueError(f"llm-compressor builds the {algorithm} mappings of {architecture} from its "
                         "config (which layers use full attention); write `mappings:` in the recipe")
    if algorithm == "smoothquant":
        return SMOOTHQUANT_MAPPINGS.get(architecture, SMOOTHQUANT_DEFAULT)
    return AWQ_MAPPINGS.get(architecture, AWQ_DEFAULT)
