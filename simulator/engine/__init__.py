"""The engine: a SimPy process per instance stepping its ranks in lock-step, each run of steps timed by a step
timer (the cost model by default, a device for the replay); a finished run is handed to `results/` as a record."""
