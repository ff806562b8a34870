"""Getting the YAML text of a recipe: files, strings and Markdown recipe cards.

A Markdown card (``.md``) keeps its recipe in YAML front matter: the block between the first
line that is ``---`` and the next line that is ``---`` (``+++`` lines count as delimiters too,
as SparseML's loader accepted them). Text before it (a licence comment) is
allowed; a ``---`` inside a value or later in the body does not end it early. The line of every
YAML value is mapped back to its line in the card.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..diagnostics import codes
from ..diagnostics.base import RecipeError, Span

__all__ = ["Source", "read_source", "from_text", "check_size", "RECIPE_SUFFIXES", "MAX_BYTES"]

#: File name endings read as recipes.
RECIPE_SUFFIXES = (".yaml", ".yml", ".json", ".md")
#: The largest recipe file read (the largest real recipe known is 64 KiB).
MAX_BYTES = 2 * 1024 * 1024



def _boundary() -> re.Pattern[str]:
    """python-frontmatter's own boundary rule (``^-{3,}\\s*$``, multiline, imported lazily),
    widened to ``+++`` lines: SparseML's loader took ``(?:---|\\+\\+\\+)`` as the opening and
    the closing delimiter (``sparseml/optim/helpers.py``, ``_load_yaml_str_from_file``), so
    either kind opens the front matter and the next line of either kind closes it."""
    from frontmatter.default_handlers import YAMLHandler

    return re.compile(rf"(?:{YAMLHandler.FM_BOUNDARY.pattern})|^\+{{3,}}\s*$", re.M)


@dataclass(frozen=True)
class Source:
    """The recipe text of one file or string.

    ``yaml_text`` is the YAML to read and ``line_offset`` the number of lines of the file
    before it (non-zero for Markdown front matter).
    """

    path: str | None
    text: str
    yaml_text: str
    line_offset: int = 0
    front_matter: bool = False


def _front_matter(text: str, path: str | None, required: bool) -> tuple[str, int, str] | None:
    """(YAML text, lines before it, the text after the closing line), or None."""
    matches = _boundary().finditer(text)
    first = next(matches, None)
    second = next(matches, None)
    if first is None or second is None:
        if required:
            raise RecipeError(
                [
                    codes.Y006(
                        "no YAML front matter: the recipe must stand between a line '---' "
                        "(or '+++') and a second such line",
                        "Put the recipe's YAML at the top of the card between two '---' lines.",
                        Span.point(1),
                    ).in_file(path)
                ]
            )
        return None
    start = first.end()
    offset = text.count("\n", 0, start)
    return text[start: second.start()], offset, text[second.end():]


def text_size(text: str) -> int:
    """The UTF-8 size of ``text`` in bytes, or a lower bound above MAX_BYTES when it is
    larger (a long text is never encoded just to be refused)."""
    if len(text) > MAX_BYTES or 4 * len(text) <= MAX_BYTES:
        return len(text)  # every character is 1-4 bytes: decided without encoding
    return len(text.encode("utf-8", "surrogatepass"))


def check_size(text: str, path: str | None = None) -> None:
    """Refuse recipe text over MAX_BYTES, before anything reads it (the cap on files, for
    text from ``loads()``, ``load(text)`` and ``--var`` values too)."""
    size = text_size(text)
    if size > MAX_BYTES:
        raise RecipeError(
            [
                codes.Y007(
                    f"the text is {size / 1024 / 1024:.1f} MiB or more; recipes are at most "
                    f"{MAX_BYTES // 1024 // 1024} MiB",
                    "Is this the right text? Real recipes are a few kilobytes.",
                    Span.point(1),
                ).in_file(path)
            ]
        )


def from_text(text: str, path: str | None = None, kind: str | None = None) -> Source:
    """A :class:`Source` for recipe ``text``; ``kind`` is the file suffix, if any.

    Markdown (``.md``) must have front matter. Other text starting with a ``---`` line that
    is later closed by a second ``---`` line followed by more text is read as a recipe card
    too (a recipe pasted with its card); anything else is read whole as YAML.
    """
    check_size(text, path)
    if "\x00" in text:
        raise RecipeError(
            [
                codes.Y007(
                    "the file contains NUL bytes: it is binary, not a recipe",
                    "Check the path.",
                    Span.point(text.count("\n", 0, text.index("\x00")) + 1),
                ).in_file(path)
            ]
        )
    if kind == ".md":
        found = _front_matter(text, path, required=True)
        assert found is not None
        return Source(path, text, found[0], found[1], True)
    if kind is None:
        first = _boundary().search(text)
        # A card's text may start with a licence comment (51 of the 55 real cards do); YAML
        # with such a preamble would be a multi-document stream, so nothing is misread.
        if first is not None and _PREAMBLE.fullmatch(text[: first.start()]):
            found = _front_matter(text, path, required=False)
            if found is not None:
                yaml_text, offset, body = found
                if not body.strip() or not _looks_like_yaml_document(body):
                    return Source(path, text, yaml_text, offset, True)
    return Source(path, text, text, 0, False)


#: What may stand before a card's front matter: blank lines and HTML comments.
_PREAMBLE = re.compile(r"\s*(?:<!--.*?-->\s*)*", re.S)


def _looks_like_yaml_document(body: str) -> bool:
    """Whether the text after a closing '---' is another YAML document (not Markdown)."""
    for line in body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        # "key: value" or "- !Modifier" starts a YAML document; prose does not, even when
        # it holds a colon ("[ResNet-50](https://...)", as most real cards' text does).
        return bool(_YAML_LINE.match(stripped))
    return False


_YAML_LINE = re.compile(r"""(?:["']?[A-Za-z_][\w.\-]*["']?[ \t]*:(?:[ \t]|$)|-[ \t]+!)""")


def read_source(path: str | os.PathLike[str]) -> Source:
    """Read a recipe file (``.yaml``, ``.yml``, ``.json`` or ``.md``)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:  # one open and one fstat: validate reads many small files
            size = os.fstat(f.fileno()).st_size
            if size > MAX_BYTES:
                raise RecipeError(
                    [
                        codes.Y007(
                            f"the file is {size / 1024 / 1024:.1f} MiB; recipes are at most "
                            f"{MAX_BYTES // 1024 // 1024} MiB",
                            "Is this the right file? Real recipes are a few kilobytes.",
                            Span.point(1),
                        ).in_file(name)
                    ]
                )
            data = f.read()
    except OSError as exc:
        why = "it is a directory" if isinstance(exc, IsADirectoryError) else exc.strerror or exc
        raise RecipeError(
            [
                codes.Y007(
                    f"cannot read the file: {why}",
                    "Check the path and its permissions.",
                    Span.point(1),
                ).in_file(name)
            ]
        ) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        column = len(before[before.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        raise RecipeError(
            [
                codes.Y007(
                    f"the file is not UTF-8 text (byte {data[exc.start]:#04x} at line {line})",
                    "Save the recipe as UTF-8; if it is binary, check the path.",
                    Span.point(line, column),
                ).in_file(name)
            ]
        ) from None
    suffix = os.path.splitext(name)[1].lower()
    return from_text(text.replace("\r\n", "\n"), name, suffix if suffix == ".md" else "")
