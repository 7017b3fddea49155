import sys

from localspec.cli.main import main

sys.exit(main())
