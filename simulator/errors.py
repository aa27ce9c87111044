"""The one error type the CLI turns into a one-line message and exit code 2."""


class InputError(Exception):
    """Bad user input: the message names where (file, YAML path, line) and what was expected."""
