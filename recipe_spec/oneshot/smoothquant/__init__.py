"""smoothquant."""
