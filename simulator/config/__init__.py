"""Configuration: the scenario schema, model and hardware specs, presets, the loader and sweeps. Everything reads it."""
