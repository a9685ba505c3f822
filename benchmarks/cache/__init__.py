"""The prompt cache and agent loops: how much of each request the next one sends again unchanged
(the pattern's algorithm, ours, `clear_tool_uses`, llama-server's own cache), and compacting the proxy's
own output again."""
