"""The environment variables `pinchpoint run` sets for the program's processes, in one light module:
the launcher names them before it starts the program, without importing what reads them."""

RUN_DIR_ENV = "PINCHPOINT_RUN_DIR"
OPWINDOW_ENV = "PINCHPOINT_OPWINDOW"  # "START:STEPS", or "off"
RECORDER_ENV = "PINCHPOINT_OP_RECORDER"
"""`kineto` records a CPU program's window with torch.profiler too (op durations as Kineto sees them,
at the price of a slower rest of the run); the default on CPU is the census (`opcensus`)."""
