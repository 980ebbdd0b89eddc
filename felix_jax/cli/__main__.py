"""``python -m felix_jax.cli``: the ``felix-jax`` command."""

import sys

from . import main

sys.exit(main())
