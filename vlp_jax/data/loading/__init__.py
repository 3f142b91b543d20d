"""The grain pipeline that turns shards into training batches (pipeline.py), how batches draw on the sources
(mixing.py), what the data delivered and skipped (record_stats.py), the teacher embeddings looked up by key
(teacher_table.py) and the host memory the run holds outside the devices (host_memory.py)."""
