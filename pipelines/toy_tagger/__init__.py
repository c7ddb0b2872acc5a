"""toy-tagger's walk graph and how the conductor serves it."""
