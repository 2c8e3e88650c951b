"""`python -m ascentrt`: the same as the `ascentrt` command."""

import sys

from .cli import main

sys.exit(main())
