"""Diagnostics of the methods table: one question each about a result, run beside it (their rows in lab/results/)."""
