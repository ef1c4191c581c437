import sys

from dltop.cli import main

sys.exit(main())
