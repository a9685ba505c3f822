"""Notes and facts: what the notes that replace old text keep of what an agent later uses."""
