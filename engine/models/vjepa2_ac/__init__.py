"""V-JEPA 2 model code: the video encoder (a transformers VJEPA2Model checkpoint's
encoder), the action-conditioned predictor (V-JEPA 2-AC), their 3D rotary embedding and
checkpoint loaders (engine/models/vjepa2_ac runs the predictor with a paged KV cache)."""
