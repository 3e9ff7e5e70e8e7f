"""Run history: every `pinchpoint run` recorded in an embedded SQLite database, and the way a run is
named on the command line (a run directory, or a history id)."""
