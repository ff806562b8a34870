"""Hostile recipes for fuzzing, and the one check every input must pass.

:func:`make_input` builds one input from a seeded :class:`random.Random`: a corpus recipe
mutated the way an attacker edits YAML (hostile scalars, expressions, parameter patterns,
nesting, tags, lines dropped or re-indented, bytes inserted, the text cut), a modifier of the
catalogue with arguments drawn from hostile pools, or plain random text. :func:`exercise` runs
it through the public paths (``check`` / ``loads``, ``validate``, ``compile_plan`` and plan
queries, ``lint``, and the CLI's ``validate``, ``lint`` and ``schedule``) and raises
:class:`FuzzFailure` for anything a user must never see: an uncaught exception, an internal
error, an exit code other than 0 or 1, an error without a line, or a call over its time limit
(CPU time).

``tests/test_fuzz.py`` drives it through hypothesis (a minute in the suite);
``benchmarks/fuzz_recipes.py`` runs it for as long as asked and reports the figures.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testdata import CORPUS, missing

from recipe_spec import RecipeError
from recipe_spec.cli import main
from recipe_spec.lint import lint_recipe
from recipe_spec.loader import check
from recipe_spec.modifiers import all_specs
from recipe_spec.params import ParamRecord, write_manifest
from recipe_spec.schedule import compile_plan
from recipe_spec.schedule.events import PlanError
from recipe_spec.text.source import from_text
from recipe_spec.validation import validate_recipe

#: scalars an attacker puts where a value goes
HOSTILE_SCALARS = [
    ".inf", "-.inf", ".nan", "1e309", "-1e309", "9" * 401, "-" + "9" * 5000, "0x" + "f" * 600, "1e-320",
    "-0.0", "0", "1", "-1", "0.5", "1.0000001", "2", "1e-6", "1e9", "1e18", "true", "null", "~", "''",
    "'é'", "é", "\u202e", "\U0001f600", "'\\x00'", "\"\\0\"", "!!binary AAAA", "!!python/object:os.system x",
    "eval(round(1, -999999999))", "eval(10 ** 10 ** 10)", "eval(2 ** 100000)", "eval(9 ** 9 ** 9)",
    "eval('a' * 10 ** 9)", "eval([0] * 10 ** 9)", "eval((1,) * 10 ** 8)", "eval(1 / 0)", "eval(x)",
    "eval(__import__('os'))", "eval(().__class__)", "eval(open('/etc/passwd'))", "eval(" * 300 + ")" * 300,
    "eval(" + "+".join(["1"] * 5000) + ")", "eval(max(range(10 ** 12)))", "eval(sum([1] * 10 ** 8))",
    "eval(num_epochs * 1e308)", "eval(-num_epochs)", "eval(num_epochs)", "eval('%s' % 1)",
    "re:(.|.)*X", "re:(a|aa)+$", "re:(a+)+$", "re:(.*a){12}x", "re:(a{1,100}){1,100}$", "re:" + ".*" * 14,
    "re:[", "re:(?P<x>a)(?P=x)", "re:(?=a)", "re:" + "(" * 500, "re:.*weight", "re:\\", "re:a{99999}",
    "__ALL__", "__ALL_PRUNABLE__", "[__ALL__]", "[]", "{}", "[[[[", "]]]", "{a: b}", "[1, 2, 3]",
    "&a x", "*a", "*missing", "&a [*a]", "!GMPruningModifier", "!NoSuch", "? x", "| \n  x", "> x",
    "'" + "x" * 100_000 + "'", "x" * 5000, "\t", "'\\ud800'", "- x", ": x", "%YAML 1.1", "---", "...",
]
#: keys an attacker adds or renames
HOSTILE_KEYS = [
    "params", "start_epoch", "end_epoch", "update_frequency", "init_sparsity", "final_sparsity",
    "inter_func", "mask_type", "leave_enabled", "global_sparsity", "lr_func", "init_lr", "final_lr",
    "num_epochs", "init_lr_x", "<<", "__proto__", "", "x" * 2000, "é", "1", "null", "[a]", "modifiers",
    "stages", "training_modifiers", "version", "__metadata__", "eval", "params__", "&a k", "!!str k",
]
TAGS = sorted(all_specs()) + ["NoSuchModifier", "gmpruningmodifier", "GMPruningModifier!", ""]
MANIFEST_RECORDS = [
    ParamRecord.from_json({"name": n, "shape": s, "layer_type": t, "prunable": p})
    for n, s, t, p in [
        ("conv1.weight", [8, 3, 3, 3], "Conv2d", True), ("conv1.bias", [8], "Conv2d", False),
        ("bn1.weight", [8], "BatchNorm2d", False), ("fc1.weight", [32, 64], "Linear", True),
        ("encoder.layer.0.attention.self.query.weight", [64, 64], "Linear", True),
        ("encoder.layer.0.attention.self.query.bias", [64], "Linear", False), ("fc2.weight", [10, 32], "Linear", True),
    ]
]


class FuzzFailure(AssertionError):
    """An input reached something a user must never see."""


class Hang(BaseException):
    """A call ran past its time limit (BaseException: no ``except Exception`` swallows it)."""


def corpus_texts() -> list[str]:
    """The text of every corpus recipe (YAML and Markdown)."""
    files = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".yaml", ".yml", ".md", ".json") and p.is_file())
    if not files:
        raise missing(CORPUS)
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


# -- making inputs ---------------------------------------------------------------------------
def _scalar(rnd: random.Random) -> str:
    if rnd.random() < 0.2:
        return repr(rnd.choice([rnd.uniform(-2, 2), rnd.randint(-5, 500), rnd.random() * 10 ** rnd.randint(-9, 12)]))
    return rnd.choice(HOSTILE_SCALARS)


def _mutate_line(rnd: random.Random, lines: list[str]) -> None:
    if not lines:
        lines.append(_scalar(rnd))
        return
    i = rnd.randrange(len(lines))
    line = lines[i]
    op = rnd.randrange(9)
    if op == 0 and ":" in line:  # a hostile value
        key = line.split(":", 1)[0]
        lines[i] = f"{key}: {_scalar(rnd)}"
    elif op == 1 and ":" in line:  # a hostile or renamed key
        indent = len(line) - len(line.lstrip())
        lines[i] = " " * indent + f"{rnd.choice(HOSTILE_KEYS)}:{line.split(':', 1)[1]}"
    elif op == 2:
        del lines[i]
    elif op == 3:
        lines.insert(i, lines[rnd.randrange(len(lines))])
    elif op == 4:  # re-indented
        shift = rnd.choice([-4, -2, -1, 1, 2, 4])
        lines[i] = (" " * shift + line) if shift > 0 else line[min(-shift, len(line) - len(line.lstrip())):]
    elif op == 5:  # another tag
        lines[i] = line.replace("!", "!" + rnd.choice(TAGS) + " #", 1) if "!" in line else f"  - !{rnd.choice(TAGS)}"
    elif op == 6:  # deep nesting, sometimes behind a quote that hides it
        n = rnd.choice([10, 63, 64, 65, 300, 5000, 50_000])
        quote = rnd.choice(["", "x'y, ", '"', "#"])
        lines[i] = f"{line.split(':', 1)[0] if ':' in line else 'a'}: [{quote}" + "[" * n + "]" * n + "]  # '"
    elif op == 7:  # a chain of variables
        n = rnd.choice([5, 64, 250, 2000])
        chain = [f"v{k}: eval(v{k + 1} + 1)" for k in range(n)] + [f"v{n}: 1"]
        lines[i:i] = chain
    else:  # an alias or anchor
        lines.insert(i, rnd.choice(["a: &a [x, x, x, x, x, x, x, x]", "b: &b [*a, *a, *a, *a, *a, *a, *a, *a]",
                                    "c: *b", "d: &d {<<: *d}", "e: !!set {a, b}", "<<: *a"]))


def _mutate_text(rnd: random.Random, text: str) -> str:
    op = rnd.randrange(4)
    if op == 0 and text:  # bytes inserted
        i = rnd.randrange(len(text))
        junk = "".join(chr(rnd.choice([0, 7, 9, 10, 13, 0x85, 0xA0, 0xFEFF, 0x2028, rnd.randrange(32, 0x2FFF)]))
                       for _ in range(rnd.randint(1, 20)))
        return text[:i] + junk + text[i:]
    if op == 1 and text:  # cut
        return text[: rnd.randrange(len(text))]
    if op == 2:  # front matter of either kind
        fence = rnd.choice(["---", "+++", "--- ", "+++\r", "----"])
        return f"{fence}\n{text}\n{fence}\n# title\n"
    return text.replace("\n", rnd.choice(["\r\n", "\r", "\n\n", "\n#\n"]), rnd.randint(1, 50))


def mutated_corpus(rnd: random.Random, texts: list[str]) -> str:
    lines = rnd.choice(texts).splitlines()
    for _ in range(rnd.randint(1, 5)):
        _mutate_line(rnd, lines)
    text = "\n".join(lines) + "\n"
    return _mutate_text(rnd, text) if rnd.random() < 0.3 else text


def generated_modifier(rnd: random.Random) -> str:
    """A modifier of the catalogue with some of its arguments, some hostile, some plausible."""
    specs = all_specs()
    name = rnd.choice(sorted(specs))
    args: dict[str, Any] = {}
    for arg in specs[name].args:
        if rnd.random() < 0.7:
            args[arg.name] = rnd.choice([
                _scalar(rnd), rnd.uniform(0, 1), rnd.randint(-3, 100), rnd.choice(["__ALL_PRUNABLE__", "re:.*weight"]),
                ["fc1.weight", "re:conv.*"], rnd.choice(["cubic", "linear", "unstructured", "block4", "2:4", "channel"]),
            ])
    body = "\n".join(f"    {k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in args.items())
    head = rnd.choice(["", "num_epochs: 10\n", "version: 1.1.0\n", "init_lr: eval(0.1 * 2)\n"])
    return f"{head}modifiers:\n  - !{name}\n{body}\n"


def random_text(rnd: random.Random) -> str:
    size = rnd.choice([0, 1, 10, 300, 5000])
    if rnd.random() < 0.5:
        return bytes(rnd.randrange(256) for _ in range(size)).decode("utf-8", errors="replace")
    alphabet = "ab:-[]{}!&*'\"#|>%@`\n \t,?.eval()re0123456789"
    return "".join(rnd.choice(alphabet) for _ in range(size))


def tweaked_corpus(rnd: random.Random, texts: list[str]) -> str:
    """A corpus recipe with a few numbers changed to other plausible numbers: mostly still
    valid, so the plan, its queries and lint run on it."""
    text = rnd.choice(texts)
    numbers = list(re.finditer(r"(?<=: )-?\d+(\.\d+)?(?=\s)", text))
    picked = rnd.sample(numbers, min(len(numbers), rnd.randint(1, 3)))
    for m in sorted(picked, key=lambda m: -m.start()):  # from the end: earlier offsets hold
        value = rnd.choice([0, 0.5, 1, 2, 3, 0.05, 0.95, 0.999, 1e-4, 7.5, 100, 1e4, -1, 250])
        text = text[: m.start()] + repr(value) + text[m.end():]
    return text


def make_input(rnd: random.Random, texts: list[str]) -> str:
    """One hostile recipe text (see the module docstring)."""
    kind = rnd.random()
    if kind < 0.2:
        return tweaked_corpus(rnd, texts)
    if kind < 0.65:
        return mutated_corpus(rnd, texts)
    if kind < 0.92:
        return generated_modifier(rnd)
    return random_text(rnd)


# -- the check ---------------------------------------------------------------------------------
@contextlib.contextmanager
def time_limit(seconds: float, what: str) -> Iterator[None]:
    """Raise :class:`Hang` once the process has spent ``seconds`` of CPU time inside: what runs
    too long spends it, while a machine busy with other work only delays the process (a
    wall-clock limit read a loaded machine as hangs). A process that waits without computing
    is the long run's ``faulthandler`` watchdog's, on the wall clock."""
    def ring(signum: int, frame: Any) -> None:
        raise Hang(f"{what} ran past {seconds} s of CPU time")

    old = signal.signal(signal.SIGPROF, ring)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _located(diagnostics: list[Any], what: str) -> None:
    for d in diagnostics:
        if not (isinstance(d.line, int) and d.line >= 1 and d.message):
            raise FuzzFailure(f"{what}: a diagnostic without a line or message: {d!r}")


def _cli(args: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(args)
    text = out.getvalue() + err.getvalue()
    if rc not in (0, 1) or "internal error" in text or "Traceback" in text:
        raise FuzzFailure(f"recipe-spec {' '.join(args[:1])} exited {rc}: {text[-2000:]}")


def exercise(text: str, workdir: Path, limit: float = 2.0) -> str:
    """Run ``text`` through every public path; returns ``"clean"``, ``"errors"`` or
    ``"plan-error"`` and raises :class:`FuzzFailure` (or :class:`Hang`) otherwise."""
    manifest = workdir / "params.json"
    if not manifest.exists():
        write_manifest(manifest, MANIFEST_RECORDS, "torch")
    path = workdir / "recipe.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    outcome = "errors"
    try:
        with time_limit(limit, "check()"):
            try:
                source = from_text(text)
            except RecipeError as exc:  # e.g. NUL bytes: refused before parsing, located
                _located(list(exc.diagnostics), "from_text")
                source = None
            recipe, diagnostics = check(source) if source is not None else (None, [])
        _located(diagnostics, "check")
        if recipe is not None:
            with time_limit(limit, "validate"):
                found = validate_recipe(recipe)
            _located(found, "validate")
            with time_limit(limit, "lint"):
                _located(lint_recipe(recipe, MANIFEST_RECORDS, "torch"), "lint")
            if not any(d.severity.name == "ERROR" for d in found):
                outcome = "clean"
                for steps_per_epoch in (1, 7):
                    with time_limit(limit, "compile_plan"):
                        try:
                            plan = compile_plan(recipe, steps_per_epoch)
                        except PlanError:
                            outcome = "plan-error"
                            continue
                        plan.events_bound()
                        for k in (0, 1, steps_per_epoch, 10 * steps_per_epoch):
                            plan.events_at(k)
                        for n, _ in enumerate(plan.iter_events(0)):
                            if n >= 2000:
                                break
        with time_limit(limit * 2, "the CLI"):
            _cli(["validate", str(path), "--format", "json"])
            _cli(["lint", str(path), "--params", str(manifest)])
            _cli(["schedule", str(path), "--steps-per-epoch", "3", "--format", "json"])
    except (FuzzFailure, Hang):
        raise
    except RecipeError as exc:  # the documented error of loads(); check() must not raise it
        raise FuzzFailure(f"check() raised RecipeError: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - anything else is the failure being looked for
        raise FuzzFailure(f"uncaught {type(exc).__name__}: {exc}") from exc
    return outcome
