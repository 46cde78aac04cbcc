"""The reading engine: trace_processor (a native shell or the embedded wasm build), the
shared SQL views every reader loads (scope.sql, xpu_views.sql), and the caches in front of
it (result_cache, engine_snapshot, cached_trace), each a pure optimisation.

It sits above the encoder (exporters/perfetto, whose wire format and engine size limits it
reads) and below the readers (exporters/analysis, folded, report); it never imports a
producer or a reader (tests/test_layers.py)."""
