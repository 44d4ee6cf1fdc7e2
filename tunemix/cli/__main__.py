"""``python -m tunemix.cli``: the ``tunemix`` command."""

from tunemix.cli import main

raise SystemExit(main())
