"""Request bodies: JSON read exactly and written back as it came (`jsonbody`), compressed ones
decoded (`encoding`), and large ones parsed and worked on off the event loop (`split_parse`,
`offload`), so other clients are served meanwhile; `work` is where a body's size decides which."""
