"""Model graphs, state machines and default deployments."""
