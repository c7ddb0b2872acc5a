"""The Python SDK and the `starmesh` CLI (`cli.main`)."""
