"""engine/models/sd3."""
