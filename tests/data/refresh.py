#!/usr/bin/env python3
"""Refresh the tests' vendored data (``tests/data/``) from the project's shared reference
folder (``../shared`` beside the repository, or ``--shared PATH``), and report what changed.

    python tests/data/refresh.py            # copy, then list what was added, changed, removed
    python tests/data/refresh.py --check    # change nothing; exit 1 when a copy is out of date

What is taken is listed in :data:`SETS` below: the files the tests read, not whole folders
(the trained quality checkpoint and its evaluation windows stay outside: the benchmarks read
them from ``../shared``; of the MoE runs, the cases, the GPTQ run's saved folder and the
SparseGPT run's final tensors are kept, and the initial weights are rebuilt from their seeds). The calibration file of the quality anchor is cut to
its first :data:`QUALITY_SAMPLES` samples. Each set keeps the README that says where it came
from and how it was made.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parent
REPO = DATA.parent.parent
#: the calibration samples of the quality anchor the tests keep (of 256)
QUALITY_SAMPLES = 8
LLMC_CASES = ("02_sparsegpt_2of4", "04_wanda_2of4", "06_gptq_int8_channel_explicit", "08_rtn_fp8_dynamic",
              "10_staged_sparse24_gptq_w4a16", "12_error_cases")
MOE_GPTQ = "conformance/llmcompressor/moe/21_qwen3moe_gptq_w4a16"
MOE_SPARSE = "conformance/llmcompressor/moe/24_qwen3moe_sparsegpt_50"
LLMC_FILES = ("case.json", "masks.json", "initial.safetensors", "final.safetensors", "intermediates.safetensors")


def _quality_slice(raw: bytes) -> bytes:
    """The anchor's calibration file with its first samples only (same format and fields)."""
    d = json.loads(raw)
    d["samples"] = d["samples"][:QUALITY_SAMPLES]
    d["num_samples"] = len(d["samples"])
    if not d["description"].startswith("the first "):  # once: a slice of a slice is the same slice
        d["description"] = f"the first {d['num_samples']} of: {d['description']}"
    return (json.dumps(d, separators=(",", ":")) + "\n").encode()


#: READMEs name the folders of the cases that are not copied here (the odd-numbered ones) and where
#: their generators live outside the repository: those sentences are reworded for this copy.
README_REWORDING = (
    (r"The cases are split between two folders\s+by alternating index \(.*?\),\s+so each folder holds a mix of "
     r"every kind\.\s+", "This set holds the even-numbered cases of a series that mixes every kind. "),
    (r"Cases alternate between two folders by index:.*?`heldout/[^`]*`\.\s+",
     "This set holds the even-numbered cases of a series. "),
    (r"Even index in\s+`shared/[^`]*`, odd index in `heldout/[^`]*`\.\s+",
     "This set holds the even-numbered cases of a series. "),
    (r"The generator is `[^`]*` \(steering repo\);", "The generator is a script kept outside the repository;"),
    (r"Generator:\s+`[^`]*` \(steering repo\)\.", "The generator is a script kept outside the repository."),
)


def _readme(raw: bytes) -> bytes:
    """A set's README for this copy (see :data:`README_REWORDING`)."""
    text = raw.decode()
    for pattern, replacement in README_REWORDING:
        text = re.sub(pattern, replacement, text, flags=re.S)
    return text.encode()


@dataclass(frozen=True)
class Set:
    """One set of vendored files: ``patterns`` relative to the shared folder (globs; ``**``
    walks folders); ``derive`` maps a path to the function that makes its vendored bytes."""

    name: str
    patterns: tuple[str, ...]
    derive: tuple[tuple[str, Callable[[bytes], bytes]], ...] = ()


SETS = (
    Set("corpus", ("corpus/README.md", "corpus/INDEX.tsv", "corpus/real/**/*")),
    Set("seeds", ("seeds/*",)),
    Set("sparseml", ("conformance/sparseml/*",)),
    Set("sparseml-mfac", ("conformance/sparseml-mfac/*",)),
    Set("sparsify-create", ("conformance/sparsify-create/*",)),
    Set("llmcompressor", ("conformance/llmcompressor/README.md",
                          *(f"conformance/llmcompressor/{c}/{f}" for c in LLMC_CASES for f in LLMC_FILES))),
    Set("quality", ("conformance/llmcompressor/quality/README.md",
                    "conformance/llmcompressor/quality/perplexity.py",
                    "conformance/llmcompressor/quality/results.json",
                    "conformance/llmcompressor/quality/recipes/*.yaml",
                    "conformance/llmcompressor/quality/calibration.json"),
        derive=(("conformance/llmcompressor/quality/calibration.json", _quality_slice),)),
    Set("moe", ("conformance/llmcompressor/moe/README.md", "conformance/llmcompressor/moe/*/case.json",
                f"{MOE_GPTQ}/saved/config.json", f"{MOE_GPTQ}/saved/model.safetensors",
                f"{MOE_SPARSE}/final.safetensors")),
)


def wanted(shared: Path) -> dict[str, bytes]:
    """Every vendored file's relative path and the bytes it should hold."""
    out: dict[str, bytes] = {}
    for s in SETS:
        derive = dict(s.derive)
        for pattern in s.patterns:
            matches = sorted(p for p in shared.glob(pattern) if p.is_file())
            if not matches and not any(ch in pattern for ch in "*?["):
                continue  # an optional file (masks.json exists for pruning cases only)
            if not matches:
                raise SystemExit(f"refresh: nothing in {shared} matches {pattern!r} (set {s.name})")
            for p in matches:
                rel = p.relative_to(shared).as_posix()
                make = derive.get(rel, _readme if p.name == "README.md" else None)
                out[rel] = make(p.read_bytes()) if make else p.read_bytes()
    return out


def present() -> set[str]:
    """The vendored files now under tests/data (its own README and this script excepted)."""
    own = {"README.md", "refresh.py"}
    return {p.relative_to(DATA).as_posix() for p in DATA.rglob("*")
            if p.is_file() and p.relative_to(DATA).as_posix() not in own and "__pycache__" not in p.parts}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="the shared folder (default ../shared)")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when a copy differs")
    a = p.parse_args(argv)
    if not (a.shared / "corpus").is_dir():
        print(f"refresh: no shared folder at {a.shared} (give --shared PATH)", file=sys.stderr)
        return 2
    want = wanted(a.shared)
    have = present()
    added = sorted(set(want) - have)
    removed = sorted(have - set(want))
    changed = sorted(r for r in set(want) & have if (DATA / r).read_bytes() != want[r])
    for word, rows in (("added", added), ("changed", changed), ("removed", removed)):
        for r in rows:
            print(f"{word:8} {r}")
    size = sum(len(b) for b in want.values())
    print(f"{len(want)} files ({size / 2**20:.1f} MiB): {len(added)} added, {len(changed)} changed, "
          f"{len(removed)} removed, {len(want) - len(added) - len(changed)} unchanged")
    if a.check:
        return 1 if added or changed or removed else 0
    for r in added + changed:
        (DATA / r).parent.mkdir(parents=True, exist_ok=True)
        (DATA / r).write_bytes(want[r])
    for r in removed:
        (DATA / r).unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
