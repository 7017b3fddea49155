import sys

from localspec.cli.commands import main

sys.exit(main())
