import sys

from pan.cli import main

sys.exit(main())
