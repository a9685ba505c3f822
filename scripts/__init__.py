"""Developer scripts; a package only so tests can import the llama-server and tiny-model helpers."""
