"""`python -m vlp_jax.clip_benchmark eval ...`: LAION's CLIP_benchmark on a vlp_jax checkpoint (the model type of
vlp_jax/cli/clip_benchmark_command.py, registered, then CLIP_benchmark's own CLI), at the module path users type."""
from vlp_jax.cli import clip_benchmark_command

if __name__ == '__main__':
  clip_benchmark_command.run_command()
