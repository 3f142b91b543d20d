"""`python -m vlp_jax.main`: the train command of vlp_jax/cli/train_command.py, at the module path users type."""
from vlp_jax.cli import train_command

if __name__ == '__main__':
  __doc__ = train_command.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  train_command.run_command()
