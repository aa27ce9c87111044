"""Pricing: the op list of a step, the roofline, profiles, the plain reference pricing of an op list, and the
cost model built from faster pricers tested equal to it (decode runs, step parts by count)."""
