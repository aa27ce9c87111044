"""From a planned scenario to a deployment: the layout in one line, engine launch commands, the files to keep."""
