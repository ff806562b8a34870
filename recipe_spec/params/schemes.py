"""Parameter naming schemes: what a recipe's names were written for, and the rewrite that
would carry them onto a model that names its parameters otherwise.

SparseML's model-zoo ResNet-50 names a bottleneck's first convolution
``sections.0.0.conv1.weight``; torchvision's names the same weight ``layer1.0.conv1.weight``.
A recipe written for one and linted against the other misses with every name. Rather than one
"matches no parameter" per name, :func:`infer_mapping` finds the few rewrites that carry most
of the missed names onto real, unclaimed parameter names:

- a rewrite replaces a run of dot-separated segments by another; numbers are variables
  (``sections.N.M -> layer(N+1).M``: each number of the target is the source's plus an
  offset), or, where the two sides hold different counts of numbers, literal
  (``identity.conv -> downsample.0``);
- each missed name votes for every rewrite that turns it into a model name no other name of
  the recipe takes; the rewrite with the most votes (at least two) wins, is applied, and the
  search goes on over the names still missed, up to :data:`MAX_REWRITES` rewrites.

:func:`scheme_label` names the layout a list of names follows, from :data:`KNOWN_SCHEMES`
or, for others, from the shape of the names' first segments.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["KNOWN_SCHEMES", "MAX_REWRITES", "Rewrite", "Mapping", "infer_mapping", "scheme_label"]

#: Known layouts: a pattern of their names and how to call them.
KNOWN_SCHEMES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), label) for pattern, label in (
        (r"^sections\.\d+\.\d+\.", "SparseML's model-zoo ResNet/MobileNet layout (sections.N.M)"),
        (r"^layer\d+\.\d+\.", "torchvision's ResNet layout (layerN.M)"),
        (r"^features\.\d+\.", "torchvision's VGG/MobileNet/EfficientNet layout (features.N)"),
        (r"^(?:bert|roberta|distilbert|deberta|electra)\.(?:encoder|transformer)\.layers?\.\d+\.",
         "Hugging Face's BERT-style layout with its model prefix (bert.encoder.layer.N)"),
        (r"^encoder\.layers?\.\d+\.", "an encoder's layout without a model prefix (encoder.layer.N)"),
        (r"^model\.layers\.\d+\.", "Hugging Face's decoder layout (model.layers.N)"),
        (r"^model\.decoder\.layers\.\d+\.", "Hugging Face's OPT layout (model.decoder.layers.N)"),
        (r"^transformer\.h\.\d+\.", "Hugging Face's GPT-2 layout (transformer.h.N)"),
        (r"^blocks\.\d+\.", "timm's transformer layout (blocks.N)"),
        (r"^module\.", "names of a DataParallel/DistributedDataParallel wrapper (module.)"),
    )
)

#: At most this many rewrites in one mapping.
MAX_REWRITES = 4
#: Candidate model names a missed name is compared with, at most, before sampling by template.
_MAX_POOL = 64
#: Names of one template that vote, and model names of one template compared, when there are more.
_PER_TEMPLATE = 4
_NUMBER = re.compile(r"\d+")
_LETTERS = "NMKJL"


def _template(segments: Sequence[str]) -> tuple[str, tuple[int, ...]]:
    """(``segments`` joined with each number as ``{}``, the numbers)."""
    text = ".".join(segments)
    return _NUMBER.sub("{}", text), tuple(int(n) for n in _NUMBER.findall(text))


@dataclass(frozen=True)
class Rewrite:
    """Segments matching ``source`` (a template, ``{}`` for each number) become ``target``,
    whose numbers are the source's plus ``offsets``; with ``offsets`` None both are literal."""

    source: str
    target: str
    offsets: tuple[int, ...] | None

    def apply(self, name: str) -> str | None:
        """``name`` rewritten at the first run of segments that fits, or None.

        >>> Rewrite("sections.{}.{}", "layer{}.{}", (1, 0)).apply("sections.2.0.conv1.weight")
        'layer3.0.conv1.weight'
        >>> Rewrite("identity.conv", "downsample.0", None).apply("layer1.0.identity.conv.weight")
        'layer1.0.downsample.0.weight'
        >>> Rewrite("module", "", None).apply("module.fc.weight"), Rewrite("", "bert", None).apply("pooler.weight")
        ('fc.weight', 'bert.pooler.weight')
        """
        if not self.source:  # a prefix added: ``X -> bert.X``
            return f"{self.target}.{name}"
        if not self.target:  # a prefix dropped: ``module.X -> X``
            return name[len(self.source) + 1:] if name.startswith(self.source + ".") else None
        segments = name.split(".")
        width = self.source.count(".") + 1
        for i in range(len(segments) - width + 1):
            window = segments[i: i + width]
            if self.offsets is None:
                if ".".join(window) != self.source:
                    continue
                replaced = self.target
            else:
                template, numbers = _template(window)
                if template != self.source:
                    continue
                replaced = self.target.format(*(n + o for n, o in zip(numbers, self.offsets, strict=True)))
            return ".".join(segments[:i] + [replaced] + segments[i + width:])
        return None

    def __str__(self) -> str:
        """``sections.N.M -> layer(N+1).M``: numbers as letters, offsets written out; a
        prefix dropped or added as ``module.X -> X``, ``X -> bert.X``."""
        if not self.source or not self.target:
            return f"{self.source}.X -> X" if self.source else f"X -> {self.target}.X"
        if self.offsets is None:
            return f"{self.source} -> {self.target}"
        letters = [_LETTERS[i] if i < len(_LETTERS) else f"N{i}" for i in range(len(self.offsets))]
        target = [f"({x}{o:+d})" if o else x for x, o in zip(letters, self.offsets, strict=True)]
        return f"{self.source.format(*letters)} -> {self.target.format(*target)}"


@dataclass(frozen=True)
class Mapping:
    """The rewrites found, in the order they apply, and each missed name's model name."""

    rewrites: tuple[Rewrite, ...]
    mapped: dict[str, str]

    def __str__(self) -> str:
        return ", ".join(str(r) for r in self.rewrites)


def _candidate_rewrites(name: str, target: str) -> Rewrite | None:
    """The rewrite of the segments where ``name`` and ``target`` differ, or None."""
    a, b = name.split("."), target.split(".")
    if len(a) != len(b) and a[-min(len(a), len(b)):] == b[-min(len(a), len(b)):]:
        longer, shorter = (a, b) if len(a) > len(b) else (b, a)
        prefix_text = ".".join(longer[: len(longer) - len(shorter)])
        return Rewrite(prefix_text, "", None) if longer is a else Rewrite("", prefix_text, None)
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    # a number just after the change belongs to it (``sections.0.0`` -> ``layer1.0``)
    while suffix > 1 and a[-suffix].isdigit():
        suffix -= 1
    if suffix == 0 or prefix + suffix >= len(a) or prefix + suffix >= len(b):
        return None
    source, target_part = a[prefix: len(a) - suffix], b[prefix: len(b) - suffix]
    (src, src_numbers), (dst, dst_numbers) = _template(source), _template(target_part)
    if src_numbers and len(src_numbers) == len(dst_numbers):
        offsets = tuple(d - s for s, d in zip(src_numbers, dst_numbers, strict=True))
        return Rewrite(src, dst, offsets)
    return Rewrite(".".join(source), ".".join(target_part), None)


def _candidates(names: set[str]) -> dict[str, list[str]]:
    """Model names by their last segment, and by their last two."""
    index: dict[str, list[str]] = {}
    for n in sorted(names):
        parts = n.split(".")
        index.setdefault(parts[-1], []).append(n)
        if len(parts) > 1:
            index.setdefault(".".join(parts[-2:]), []).append(n)
    return index


@lru_cache(maxsize=1 << 16)
def _name_template(name: str) -> tuple[str, tuple[int, ...]]:
    """:func:`_template` of a whole name (a model's names are looked at in every round)."""
    return _template(name.split("."))


def _nearest(name: str, pool: list[str]) -> list[str]:
    """``pool`` when small; else, from each template of names in it, the
    :data:`_PER_TEMPLATE` whose numbers are closest to ``name``'s (a model has thousands of
    ``*.weight`` names, of a few dozen templates)."""
    if len(pool) <= _MAX_POOL:
        return pool
    numbers = _name_template(name)[1]
    groups: dict[str, list[tuple[int, str]]] = {}
    for n in pool:
        template, theirs = _name_template(n)
        distance = sum(abs(a - b) for a, b in zip(numbers, theirs, strict=False)) + abs(len(numbers) - len(theirs))
        groups.setdefault(template, []).append((distance, n))
    return [n for group in groups.values() for _, n in sorted(group)[:_PER_TEMPLATE]]


def _spread(names: Sequence[str]) -> list[str]:
    """At most :data:`_PER_TEMPLATE` names of each template, spread over each template's
    names: the votes of thousands of names are those of a few."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(_name_template(n)[0], []).append(n)
    out = []
    for group in groups.values():
        step = max(1, len(group) // _PER_TEMPLATE)
        out += group[::step][:_PER_TEMPLATE]
    return out


def _best(missed: Sequence[str], free: set[str], preferred: set[str]) -> Rewrite | None:
    """The rewrite that carries the most of ``missed`` onto ``free`` names (at least two);
    between equals, the one that lands on more ``preferred`` names (prunable weights), then
    the shorter and the smaller shift."""
    index = _candidates(free)
    votes: Counter[Rewrite] = Counter()
    liked: Counter[Rewrite] = Counter()
    for name in _spread(missed):
        parts = name.split(".")
        pool = _nearest(name, index.get(".".join(parts[-2:])) or index.get(parts[-1], []))
        found = {r: t for t in pool if (r := _candidate_rewrites(name, t)) is not None}
        votes.update(found.keys())
        liked.update(r for r, t in found.items() if t in preferred)
    if not votes:
        return None
    ranked = sorted(votes.items(), key=lambda kv: (
        -kv[1], -liked[kv[0]], kv[0].source.count("."), sum(map(abs, kv[0].offsets or ())), str(kv[0])))
    rewrite, count = ranked[0]
    return rewrite if count >= 2 else None


def _unique(name: str, index: dict[str, list[str]]) -> Rewrite | None:
    """The rewrite onto the one free name that ends as ``name`` does (its last two segments,
    ``index`` of :func:`_candidates`), if exactly one does: ``classifier.fc.weight`` ->
    ``fc.weight``."""
    parts = name.split(".")
    pool = index.get(".".join(parts[-2:]), []) if len(parts) > 1 else []
    return _candidate_rewrites(name, pool[0]) if len(pool) == 1 else None


def infer_mapping(missed: Iterable[str], model_names: Iterable[str], taken: Iterable[str] = (),
                  preferred: Iterable[str] = ()) -> Mapping:
    """The rewrites that carry the ``missed`` names onto ``model_names`` not in ``taken``
    (the names the recipe already selects); ``preferred`` (the prunable weights) decide
    between rewrites that fit as many names. A name left over that ends as exactly one free
    model name does gets its own rewrite.

    >>> model = ["conv1.weight"] + [f"layer{i}.0.{c}.weight" for i in (1, 2) for c in ("conv1", "conv2")]
    >>> model += ["layer1.0.downsample.0.weight", "layer2.0.downsample.0.weight", "fc.weight"]
    >>> recipe = [f"sections.{i}.0.{c}.weight" for i in (0, 1) for c in ("conv1", "conv2", "identity.conv")]
    >>> found = infer_mapping(recipe + ["classifier.fc.weight"], model)
    >>> str(found)
    'sections.N.M -> layer(N+1).M, identity.conv -> downsample.0, classifier.X -> X'
    >>> found.mapped["sections.1.0.identity.conv.weight"]
    'layer2.0.downsample.0.weight'
    """
    todo = sorted(set(missed))
    free = set(model_names) - set(taken)
    rewrites: list[Rewrite] = []
    current = {n: n for n in todo}  # missed name -> its text after the rewrites so far
    mapped: dict[str, str] = {}
    liked = set(preferred)
    while len(rewrites) < MAX_REWRITES:
        pending = sorted({current[n] for n in todo if n not in mapped})
        rewrite = _best(pending, free, liked)
        if rewrite is None:
            index = _candidates(free)
            left = [u for n in todo if n not in mapped and (u := _unique(current[n], index)) is not None]
            if not left:
                break
            rewrite = left[0]
        rewrites.append(rewrite)
        for n in todo:
            if n in mapped:
                continue
            new = rewrite.apply(current[n])
            if new is None:
                continue
            current[n] = new
            if new in free:
                mapped[n] = new
        free -= set(mapped.values())
    return Mapping(tuple(rewrites), mapped)


def _shape(name: str) -> str:
    """The numbered structure a name starts with: ``stages.N.blocks.M`` for
    ``stages.0.blocks.1.conv.weight``; ``backbone.`` for ``backbone.conv1.weight``."""
    segments = name.split(".")[:4]
    last = max((i for i, seg in enumerate(segments) if seg.isdigit()), default=-1)
    if last < 0:
        return segments[0] + "."
    letters = iter(_LETTERS + "N" * 8)
    return ".".join(next(letters) if seg.isdigit() else seg for seg in segments[: last + 1])


def scheme_label(names: Iterable[str]) -> str:
    """The layout most of ``names`` follow.

    >>> scheme_label(["sections.0.0.conv1.weight", "sections.0.1.conv1.weight", "classifier.fc.weight"])
    "SparseML's model-zoo ResNet/MobileNet layout (sections.N.M)"
    >>> scheme_label(["stem.conv.weight", "stages.0.blocks.1.conv.weight", "stages.1.blocks.0.conv.weight"])
    'names like stages.N.blocks.M'
    >>> scheme_label(["backbone.conv1.weight", "backbone.fc1.weight"])
    'names under backbone.'
    >>> scheme_label(["conv1.weight", "conv1.bias", "fc1.weight", "fc2.weight"])
    'names like conv1.weight, fc1.weight'
    """
    names = list(names)
    if not names:
        return "no names"
    for pattern, label in KNOWN_SCHEMES:
        if 2 * sum(1 for n in names if pattern.match(n)) > len(names):
            return label
    root, count = Counter(n.split(".")[0] for n in names).most_common(1)[0]
    if 2 * count > len(names) and any("." in n for n in names):
        shape = Counter(_shape(n) for n in names if n.startswith(root + ".")).most_common(1)[0][0]
        return f"names under {shape}" if shape.endswith(".") else f"names like {shape}"
    weights = sorted({n for n in names if n.endswith(".weight")}) or sorted(set(names))
    firsts: dict[str, str] = {}
    for n in weights:
        firsts.setdefault(n.split(".")[0].rstrip("0123456789"), n)
    return "names like " + ", ".join(list(firsts.values())[:2])
