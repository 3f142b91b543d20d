"""`python -m vlp_jax.evaluate`: the evaluate command of vlp_jax/cli/evaluate_command.py, at the module path users
type."""
from vlp_jax.cli import evaluate_command

if __name__ == '__main__':
  __doc__ = evaluate_command.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  evaluate_command.run_command()
