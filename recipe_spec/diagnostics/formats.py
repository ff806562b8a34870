"""The report formats of ``recipe-spec validate`` and ``lint``: plain text, JSON, GitHub
Actions annotations and SARIF, each over ``[(path, diagnostics)]``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .base import Diagnostic, Severity
from .codes import CODES
from .links import docs_url, rule_url

__all__ = ["JSON_FORMAT_VERSION", "FORMATS", "emit_text", "emit_json", "emit_github", "emit_sarif"]

#: The version of the JSON report's layout.
JSON_FORMAT_VERSION = 1

Results = list[tuple[str, list[Diagnostic]]]


def emit_text(results: Results, out: Any, version: str = "") -> None:
    """One ``file:line:col: CODE [severity] message`` line per diagnostic, then the releases
    stage/group recipes were checked against where they said which tool they were written
    for (``checked_against`` of :class:`recipe_spec.validation.Findings`), then a summary."""
    count = {s: 0 for s in Severity}
    against: dict[str, int] = {}
    for path, diags in results:
        for d in diags:
            count[d.severity] += 1
            print(d.in_file(path).format(), file=out)
        label = getattr(diags, "checked_against", "")
        if label:
            against[label] = against.get(label, 0) + 1
    files = len(results)
    for label, n in against.items():
        print(f"{n} of {files} file(s) checked against {label}", file=out)
    bad = sum(1 for _, ds in results if any(d.severity is Severity.ERROR for d in ds))
    print(
        f"{files} file(s) checked: {bad} with errors; {count[Severity.ERROR]} error(s), "
        f"{count[Severity.WARNING]} warning(s), {count[Severity.INFO]} info",
        file=out,
    )


def emit_json(results: Results, out: Any, version: str = "") -> None:
    """The JSON report (format :data:`JSON_FORMAT_VERSION`)."""
    summary = {s.value: 0 for s in Severity}
    files = []
    for path, diags in results:
        for d in diags:
            summary[d.severity.value] += 1
        files.append({"path": path, "diagnostics": [{**d.to_json(), "url": rule_url(d.code)} for d in diags]})
    doc = {
        "version": JSON_FORMAT_VERSION,
        "tool": {"name": "recipe-spec", "version": version},
        "files": files,
        "summary": {
            "files": len(results),
            "files_with_errors": sum(
                1 for _, ds in results if any(d.severity is Severity.ERROR for d in ds)
            ),
            "errors": summary["error"],
            "warnings": summary["warning"],
            "infos": summary["info"],
        },
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


def _gh_escape(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if prop:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def emit_github(results: Results, out: Any, version: str = "") -> None:
    """GitHub Actions workflow commands (annotations on the pull request)."""
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}
    for path, diags in results:
        for d in diags:
            props = (
                f"file={_gh_escape(path, True)},line={d.line},col={d.column},"
                f"endLine={d.end_line or d.line},endColumn={d.end_column or d.column},"
                f"title={_gh_escape(d.code, True)}"
            )
            message = d.message + (f"\n{d.hint}" if d.hint else "")
            print(f"::{level[d.severity]} {props}::{_gh_escape(message)}", file=out)


def emit_sarif(results: Results, out: Any, version: str = "") -> None:
    """SARIF 2.1.0, for code-scanning services."""
    used = sorted({d.code for _, ds in results for d in ds})
    level = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
    rules = [
        {
            "id": c,
            "name": CODES[c].title.replace(" ", "-") if c in CODES else c,
            "shortDescription": {"text": CODES[c].title if c in CODES else c},
            "fullDescription": {"text": CODES[c].why if c in CODES else c},
            "helpUri": rule_url(c),
            "defaultConfiguration": {"level": level[CODES[c].severity] if c in CODES else "error"},
        }
        for c in used
    ]
    index = {c: i for i, c in enumerate(used)}
    sarif_results = []
    for path, diags in results:
        for d in diags:
            sarif_results.append(
                {
                    "ruleId": d.code,
                    "ruleIndex": index[d.code],
                    "level": level[d.severity],
                    "message": {"text": d.message + (f" ({d.hint})" if d.hint else "")},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": Path(path).as_posix()},
                                "region": {
                                    "startLine": d.line,
                                    "startColumn": d.column,
                                    "endLine": d.end_line or d.line,
                                    "endColumn": d.end_column or d.column,
                                },
                            }
                        }
                    ],
                }
            )
    doc = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "recipe-spec",
                        "version": version,
                        "informationUri": docs_url(),
                        "rules": rules,
                    }
                },
                "results": sarif_results,
            }
        ],
    }
    json.dump(doc, out, indent=2)
    out.write("\n")


#: Format name (``--format``) -> writer.
FORMATS: dict[str, Callable[[Results, Any, str], None]] = {
    "text": emit_text, "json": emit_json, "github": emit_github, "sarif": emit_sarif,
}
