"""toy-tagger's component: the byte tagger on a StatelessEngine."""
