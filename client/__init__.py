"""The Python SDK and the `starmesh` CLI (`client.cli`)."""
