"""toy-tagger: a byte tagger, the worked example of adding a model (docs/architecture.md)."""
