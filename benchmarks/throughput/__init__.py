"""The real proxy process over loopback sockets: requests/s, latency, time to the first event, memory
and CPU per request, against bare passthroughs, LiteLLM and other checkouts (`run`), and the HTTP
layer, huge bodies, `/compact`, the Ollama bridge and many streams on their own."""
