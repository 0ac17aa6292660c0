import sys

from dlxtool.entry import main

sys.exit(main())
