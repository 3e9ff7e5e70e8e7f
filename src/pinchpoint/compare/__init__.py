"""Comparing runs: is B faster than A beyond the noise, what changed per phase and per finding, did the
bottleneck move, and is the comparison even fair (same machine, same software)."""
