"""`python -m agent`."""

from agent.commands.main import entrypoint

entrypoint()
