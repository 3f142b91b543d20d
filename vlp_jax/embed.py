"""`python -m vlp_jax.embed`: the embed command of vlp_jax/cli/embed.py, at the module path users type."""
from vlp_jax.cli import embed

if __name__ == '__main__':
  embed.run_command()
