"""Readers of each dataset's released format, one module per dataset.

Every reader is `read_xxx(path, *, skip_invalid=False) -> (records, ReadReport)`
and raises `records.RecordError` naming file, line (or index) and field.
TFDS builders over the same readers live in `tfds_builders` (imports TensorFlow).
"""
