"""`python -m client ...` is `starmesh ...`."""
import sys

from client.cli import main

sys.exit(main())
