"""The modeled clock: a SimPy engine that advances instances by the cost model, a run of steps at a time."""
