"""What one example is on disk and how shards hold it: the record schema (records.py), random access to the
records of ArrayRecord shards (shards.py), the one shard writer (shard_writer.py), and the record fields an objective
needs beyond the image and caption (record_needs.py)."""
