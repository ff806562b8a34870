"""``recipe-spec fix``: rewrite what a finding says to write, where the rewrite is exact.

- :mod:`.edits`: fixes as text edits at the reader's positions (nothing is re-dumped, so
  comments, key order and layout stay byte for byte);
- :mod:`.stage`: the fixes of stage/group recipes, per tool release (``--compat``);
- :mod:`.tagged`: the fixes of ``!Modifier`` recipes;
- :mod:`.engine`: fixing a file in passes, never adding a finding.

Which diagnostic codes have fixes is recorded with the codes
(:data:`recipe_spec.diagnostics.fixes.FIXES`).
"""

from .edits import Edit, Fix
from .engine import FileFix, fix_file, fix_text

__all__ = ["Edit", "Fix", "FileFix", "fix_file", "fix_text"]
