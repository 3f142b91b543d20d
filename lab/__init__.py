"""The research lab beside the library: the methods table's runs (catalogue.py), the runner that trains them through
`python -m vlp_jax.main` (runner.py, methods.py), their statistics and tables (statistics.py, tables.py), the
report that writes benchmarks/RESULTS.md from the stored rows (report.py), the experiments' configs (experiments/),
the rows (results/) and the diagnostics (diagnostics/). The library (vlp_jax/) never imports it."""
