"""``python -m recipe_spec.docgen [--check] [--root DIR]``."""

import sys

from .files import main

sys.exit(main())
