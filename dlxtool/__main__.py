import sys

from dlxtool.cli import main

sys.exit(main())
