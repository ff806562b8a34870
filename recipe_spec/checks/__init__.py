"""Validation beyond reading: each modifier's arguments against its schema and numbers
(:mod:`.arguments`, :mod:`.schema_fast`, :mod:`.schema_check`, :mod:`.schemas`), whether it can
run at all (:mod:`.support`: M001, S007, B001), and the recipe-wide rules (:mod:`.rules`).
Every check yields position-free :class:`~recipe_spec.recipe.findings.Finding` s.
"""
