"""`python -m vlp_jax.embed`: the embed command of vlp_jax/cli/embed_command.py, at the module path users type."""
from vlp_jax.cli import embed_command

if __name__ == '__main__':
  __doc__ = embed_command.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  embed_command.run_command()
