"""The commands, one module each, named `<command>_command.py`: train (`python -m vlp_jax.main`), evaluate, embed,
weights and convert (`python -m vlp_jax.<name>`, thin modules at the package root that call `run_command()` of the
module here). Each command defines its absl flags when it runs (`define_flags`) and raises the errors of
vlp_jax/errors.py; `common.run` gives every command the same exit codes for them. clip_benchmark_command.py
(`python -m vlp_jax.clip_benchmark`) instead runs LAION's CLIP_benchmark CLI, with its own flags, on a vlp_jax model
type. allocator.py is the CPU trainer's malloc setting, which the train command makes first."""
