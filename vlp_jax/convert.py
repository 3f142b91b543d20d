"""`python -m vlp_jax.convert`: the convert command of vlp_jax/cli/convert.py, at the module path users type."""
from vlp_jax.cli import convert

if __name__ == '__main__':
  convert.run_command()
