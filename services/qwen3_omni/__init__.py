"""The Qwen3-Omni talker as a component service (`starmesh serve talker --checkpoint DIR`)."""
