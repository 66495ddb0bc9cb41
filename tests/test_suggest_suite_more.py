"""The suggest suite (test_suggest_suite.py) on its other two programs: the same tests and
fixtures, a file of its own so that `--dist loadfile` runs the two halves on two workers."""
from test_suggest_suite import (  # noqa: F401 - collected here with this file's NAMES
    default_runs,
    pytest_generate_tests,
    pytestmark,
    recorded,
    test_multi_device_answers_are_short_and_exact,
    test_suggest_then_rerun,
)

NAMES = ["convnet", "kernel_ridge"]
