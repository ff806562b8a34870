"""``llmcompressor.datasets`` under the same path: the helpers llm-compressor's scripts import
(:mod:`.utils`)."""
