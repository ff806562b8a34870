"""Second-order pruning (M-FAC / WoodFisher and OBS / oBERT), written once over the array
operations a backend supplies (:class:`recipe_spec.pruning.second_order.ops.FisherOps`).

- :mod:`.fisher`: the block-diagonal inverse empirical Fisher ``F⁻¹``,
  ``F = damp·I + (1/m)·Σ g gᵀ``, by the M-FAC recurrence (``diag``, ``F⁻¹v``, diagonal
  sub-blocks);
- :mod:`.settings`: a modifier's arguments, both spellings, checked; the ``num_grads`` rule;
- :mod:`.window`: the sliding window of recent masked gradients (training-time M-FAC);
- :mod:`.scoring`: scores, masks and the Optimal Brain Surgeon update of one pruning step;
- :mod:`.memory`: what the buffer and the inverse will take, checked before allocating.
- :mod:`.pruner`: one modifier's pruning steps, driven by a backend runtime;
- one-shot solvers over :class:`~.ops.SolverOps`: the calibration statistics
  (:mod:`.hessian`), the block-wise OBS update with SparseGPT's masks (:mod:`.blockwise`) or
  GPTQ's quantizer (:mod:`.gptq`, on the grid of :mod:`recipe_spec.quantization`), and Wanda
  (:mod:`.wanda`).

Imported by backends, never by ``import recipe_spec``.
"""
