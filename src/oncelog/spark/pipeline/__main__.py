"""`python -m oncelog.spark.pipeline`."""

import sys

from oncelog.spark.pipeline.command import main

sys.exit(main())
