"""``python -m catcap`` is the ``catcap`` command."""

from catcap.cli.main import main

raise SystemExit(main())
