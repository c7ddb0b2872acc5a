"""The shared DiT component: a guided denoising loop (its nodes, the loop run inside the
replica, lockstep groups) for any model whose dit hook recognises its checkpoint."""
