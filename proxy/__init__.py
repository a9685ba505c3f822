"""compacting-proxy: a transparent OpenAI-compatible proxy that compacts long chats."""

__version__ = "0.1.0"
