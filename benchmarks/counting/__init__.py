"""Counting and the estimate: how close the default count lands to real tokenizers and to
llama-server's count, and whether a request ever goes over the window because of it."""
