"""Statistics every layer reads: quantiles, the typical step, rank and permutation tests, the bootstrap.

Pure functions over numbers (nanoseconds), importing nothing of pinchpoint: analysis/ prices trials
with them, compare/ judges two runs with them, report/ only shows what they computed.
"""
