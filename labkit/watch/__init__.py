"""`labkit watch`: a config's probes on a schedule for days, each round a run, into a store."""

__all__ = []  # type: ignore[var-annotated]
