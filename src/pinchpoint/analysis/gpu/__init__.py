"""Analyses of Kineto GPU traces (`trace.kineto.KinetoTrace`): pure functions with typed results."""
