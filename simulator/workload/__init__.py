"""Workload: requests, traffic generators, trace readers and length distributions. Both clocks consume it."""
