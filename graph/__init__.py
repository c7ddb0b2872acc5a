"""Walk graph API and chunk policies (DESIGN section 3); pure Python, no I/O."""
