"""``python3 -m imagebuild [IMAGE...]`` (what ``localcluster/images/build.sh`` runs)."""

import sys

from .cli import main

sys.exit(main())
