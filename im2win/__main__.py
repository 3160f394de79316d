"""``python -m im2win``: the benchmark (see `im2win.bench`)."""

import sys

from im2win.bench import main

sys.exit(main())
