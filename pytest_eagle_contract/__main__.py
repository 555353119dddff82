import sys

from .shells.cli import main

sys.exit(main())
