"""`python -m vlp_jax.weights`: the weights command of vlp_jax/cli/weights_command.py, at the module path users type."""
from vlp_jax.cli import weights_command

if __name__ == '__main__':
  __doc__ = weights_command.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  weights_command.run_command()
