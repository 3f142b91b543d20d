"""The commands: train (`python -m vlp_jax.main`), evaluate, embed, weights and convert (`python -m vlp_jax.<name>`,
thin modules that call `run()` here). Every command maps the errors of vlp_jax/errors.py to the same exit codes."""
