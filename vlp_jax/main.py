"""`python -m vlp_jax.main`: the train command of vlp_jax/cli/train.py, at the module path users type."""
from vlp_jax.cli import train

if __name__ == '__main__':
  __doc__ = train.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  train.run_command()
