"""Parameter-pattern resolution: 100,000 parameter names x 1,000 patterns.

The names are those of a 2,000-layer transformer-like model (50 per layer); the patterns are
what recipes write: per-layer `re:` patterns, exact names, a few prefix-less `re:.*` ones and
the tokens. Resolution compiles every pattern once and matches each name only against the
patterns that can match it. The baseline, measured in the same run, is a naive loop of one
`re.match` per name-pattern pair over a 1% sample of the names, scaled up to all of them.
Target: under 2 s.

    python benchmarks/bench_params.py
"""

from __future__ import annotations

import random
import re
import time

from recipe_spec.params import ParamIndex, ParamRecord, resolve

SUBS = [
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm",
    "adapter.down", "adapter.up", "cross.q", "cross.k", "cross.v", "cross.o", "gate", "router",
    "expert0.w1", "expert0.w2", "expert1.w1", "expert1.w2", "expert2.w1", "expert2.w2",
    "expert3.w1", "expert3.w2",
]


def model(layers: int = 2000) -> list[ParamRecord]:
    out = []
    for i in range(layers):
        for sub in SUBS:
            norm = "layernorm" in sub
            out.append(ParamRecord(f"model.layers.{i}.{sub}.weight", (64, 64) if not norm else (64,), "LayerNorm" if norm else "Linear", not norm))
            out.append(ParamRecord(f"model.layers.{i}.{sub}.bias", (64,), "LayerNorm" if norm else "Linear", False))
    return out


def patterns(n: int = 1000, layers: int = 2000) -> list[str]:
    rng = random.Random(0)
    pats = ["__ALL_PRUNABLE__", "re:.*q_proj.weight", "re:.*expert\\d\\.w1\\.weight", "re:.*norm"]
    while len(pats) < n:
        i = rng.randrange(layers)
        kind = rng.random()
        if kind < 0.5:
            pats.append(f"re:model\\.layers\\.{i}\\.(self_attn|mlp)\\.\\w+_proj\\.weight")
        elif kind < 0.8:
            pats.append(f"model.layers.{i}.{rng.choice(SUBS)}.weight")
        else:
            pats.append(f"re:model\\.layers\\.{i}\\d*\\.expert\\d\\.w[12]\\.weight")
    return pats


def main() -> None:
    records = model()
    pats = patterns()
    assert len(records) == 100_000 and len(pats) == 1000

    t0 = time.perf_counter()
    index = ParamIndex(records)
    matched = resolve(pats, index)
    ours = time.perf_counter() - t0

    sample = records[:: 100]
    compiled = [re.compile(p[3:]) if p.startswith("re:") else p for p in pats]
    t0 = time.perf_counter()
    for r in sample:
        for c in compiled:
            if isinstance(c, str):
                _ = c == r.name
            else:
                c.match(r.name)
    naive = (time.perf_counter() - t0) * (len(records) / len(sample))

    print(f"names: {len(records):,}; patterns: {len(pats):,}; matched: {len(matched.matched):,}")
    print(f"resolve (index + match): {ours:.3f} s (target < 2 s)")
    print(f"naive re.match per pair (1% sample, scaled): {naive:.1f} s; ratio {naive / ours:.0f}x faster")


if __name__ == "__main__":
    main()
