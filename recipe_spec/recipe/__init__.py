"""The recipe object model: a :class:`Recipe` of :class:`Modifier` s (and, for the stage/group
dialect, :class:`Stage` s and :class:`Group` s), each modifier with the position of every value
it holds; the findings rules yield about them; writing a recipe back as YAML.

- :mod:`.model`: the classes;
- :mod:`.build`: building a recipe from a read YAML document (the ``!Modifier`` dialect);
- :mod:`.findings`: position-free :class:`~.findings.Finding` s and their positioning;
- :mod:`.serialize`: back to YAML.
"""

from .model import DialectName, Group, Modifier, Recipe, Stage

__all__ = ["Modifier", "Group", "Stage", "Recipe", "DialectName"]
