"""`compacting-proxy run <cli>`: start a proxy, point an agent CLI at it, stop it when the CLI exits."""
