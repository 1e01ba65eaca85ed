"""On-disk and in-store byte formats, one module per format.

- `segment`: the `.kfs` segment (KafScale layout): `SegmentWriter`, `SegmentReader`,
  header/footer codecs for range reads.
- `index`: the sparse `.index` (offset -> batch position), lookups, rebuilds and
  index <-> segment consistency checks.
- `wal`: WAL frames (length, header CRC, payload, data CRC, trailer), the KFS
  record payload and the torn-tail-aware scanner.
"""
