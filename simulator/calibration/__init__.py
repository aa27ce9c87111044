"""Calibration: measured tables brought in (AIConfigurator), the roofline fitted to them, the modeled profile
written from it, and the check that a profile was measured on the scenario's device."""
