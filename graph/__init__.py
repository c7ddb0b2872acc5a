"""Walk graph API and chunk policies; pure Python, no I/O."""
