"""Pruning algorithms, each behind one interface (:class:`~.base.Pruner`) and registered by
the ``scores`` word of the modifiers it runs (:data:`~.registry.PRUNERS`): magnitude
(:mod:`.magnitude`, with the one mask-update policy every backend calls), movement
(:mod:`.movement`), M-FAC and OBS (:mod:`.second_order`). :class:`~.driver.PrunerSet` holds a
recipe's pruners on one runtime. Imported by backends, never by ``import recipe_spec``.
"""
