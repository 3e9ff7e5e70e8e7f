"""Serving: the load pinchpoint puts on a model server over loopback, and what the requests measured."""
