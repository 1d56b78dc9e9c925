"""Reusable test tools for Conveyor adapters (a hypothesis state machine)."""
