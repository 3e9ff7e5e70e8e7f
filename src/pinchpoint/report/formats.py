"""The names of the formats `pinchpoint export` writes, importable without the renderers (the command
line builds its parser from them before anything heavy loads; `renderers.RENDERERS` holds one each)."""

EXPORT_FORMATS = ("text", "perfetto", "speedscope", "flamegraph", "tensorboard")
"""Every file format but the two `pinchpoint report` writes itself (report.json, report.html)."""
