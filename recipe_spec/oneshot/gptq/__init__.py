"""gptq."""
