"""``python -m tunemix``: the ``tunemix`` command."""

from tunemix.cli import main

raise SystemExit(main())
