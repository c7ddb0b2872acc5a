"""World-model rollouts on a paged KV cache: the V-JEPA 2-AC predictor advanced one
timestep per engine step against the cached keys/values of earlier timesteps, several
rollouts per step, planning candidates sharing their context's blocks."""
