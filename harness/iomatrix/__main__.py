"""`python -m iomatrix` is the same as the `iomatrix` command."""

from __future__ import annotations

from iomatrix.cli.main import main

raise SystemExit(main())
