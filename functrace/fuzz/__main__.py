"""``python -m functrace.fuzz``: the fuzzer's command line (:mod:`functrace.fuzz.cli`)."""
import sys

from .cli import main

sys.exit(main())
