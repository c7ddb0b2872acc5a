"""Wire contract: the .proto files and their committed generated stubs.

Regenerate with `scripts/gen_protos.sh`; `tests/test_protos.py` fails when the
committed stubs describe other messages than the .proto files.
"""
