"""On-disk and in-store byte formats, one module per format.

- `segment`: the `.kfs` segment (KafScale layout): `SegmentWriter`, `SegmentReader`,
  header/footer codecs for range reads.
- `index`: the sparse `.index` (offset -> batch position): `IndexReader`, the
  writer's `IndexSampler`, `encode_index`.
- `index_check`: an index against its segment's batches: `find_batch_position`,
  rebuilds (`build_index_from_segment`) and consistency checks (`check_index`).
- `wal`: WAL frames (length, header CRC, payload, data CRC, trailer), the KFS
  record payload and the torn-tail-aware scanner.
"""
