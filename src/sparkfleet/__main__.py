"""`python -m sparkfleet`: what the watch's unit runs (a root-owned interpreter and this package, never a script
path another user could replace)."""

import sys

from sparkfleet.cli import main

sys.argv[0] = "sparkfleet"  # the command as reports record it (typed_argv), not __main__.py
sys.exit(main())
