"""The examples' own clocks, per step, for the test suite (not part of any example's lesson).

The tests compare pinchpoint's phase medians with the program's over the same steps: beside a busy
process the medians of two different step sets differ by more than the tolerance."""

import json
import os


def write_test_clocks(**clocks):
    """Per-step clocks (seconds, by phase) to the file $PINCHPOINT_TEST_CLOCKS names; nothing without it."""
    path = os.environ.get("PINCHPOINT_TEST_CLOCKS")
    if path:
        with open(path, "w") as f:
            json.dump(clocks, f)
