"""`python -m vlp_jax.weights`: the weights command of vlp_jax/cli/weights.py, at the module path users type."""
from vlp_jax.cli import weights

if __name__ == '__main__':
  __doc__ = weights.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  weights.run_command()
