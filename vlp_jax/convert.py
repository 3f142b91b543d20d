"""`python -m vlp_jax.convert`: the convert command of vlp_jax/cli/convert_command.py, at the module path users type."""
from vlp_jax.cli import convert_command

if __name__ == '__main__':
  __doc__ = convert_command.__doc__  # what `--help` prints (absl prints the __main__ module's docstring)
  convert_command.run_command()
