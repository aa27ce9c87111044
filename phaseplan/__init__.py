"""The front door: the `phaseplan` command line over the simulator (planning) and kernels (measuring, replaying)."""
