"""Pricing: the op list of a step, the cost model, the roofline and profiles (modeled clock, profiler)."""
