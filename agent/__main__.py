"""`python -m agent`."""

from agent.cli import entrypoint

entrypoint()
