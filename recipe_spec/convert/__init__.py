"""``recipe-spec convert``: a recipe in the other dialect, or for another tool release, where
the conversion is exact; refused, located, where it is not.

- :mod:`.twins`: the stage/group twin of a ``!Modifier`` modifier (the catalogue's
  translation inverted, then checked forward);
- :mod:`.to_stage` / :mod:`.to_modifier`: writing a recipe in the other dialect;
- :mod:`.releases`: a stage/group recipe moved to another release (renames, AWQ split,
  settings moved to the ``oneshot()`` call), with :mod:`recipe_spec.fix`'s edits;
- :mod:`.text`: writing that keeps the source's text and comments;
- :mod:`.engine`: choosing the direction and checking the result;
- :mod:`.result`: the target, the result, refusals and notes.
"""

from .engine import convert_file, convert_text
from .result import Conversion, Note, Refusal, Target

__all__ = ["convert_text", "convert_file", "Conversion", "Note", "Refusal", "Target"]
