"""The V-JEPA 2-AC world model: rollout and plan walks over the world service."""
