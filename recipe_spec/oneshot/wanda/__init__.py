"""wanda."""
