"""The old path of the converter command, kept so that `python -m vlp_jax.data.convert` still works: it runs
`python -m vlp_jax.convert` (vlp_jax/cli/convert.py). The converter library is vlp_jax/data/ingest/; the data package
itself never depends on the commands (the command is run by name, not imported)."""
import runpy

if __name__ == '__main__':
  runpy.run_module('vlp_jax.convert', run_name='__main__', alter_sys=True)
