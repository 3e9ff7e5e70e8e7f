"""Run history: every `pinchpoint run` recorded in an embedded SQLite database. Naming a run on the
command line (a run directory, or a history id) is `pinchpoint.pipeline.resolve`'s."""
