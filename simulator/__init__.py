"""phaseplan's planning side: scenarios, presets, memory accounting and the serving model.

Never imports torch or triton at module import time, so planning works without them.
"""
