"""The embedded engine behind the `perfetto` package's TraceProcessor API: its RPC client
over `wasm_engine.WasmTransport` instead of a socket to a shell process."""

from __future__ import annotations

from typing import Any

from perfetto.trace_processor import TraceProcessor
from perfetto.trace_processor.backend import TraceProcessorBackend
from perfetto.trace_processor.protos import ProtoFactory
from perfetto.trace_processor.rpc import TraceProcessorRpc


class WasmRpcBackend(TraceProcessorRpc):
    """perfetto's RPC client, plus the two trace-loading calls it leaves out."""

    def __init__(self, protos: ProtoFactory) -> None:
        # Imported here: wasmtime is only for the embedded engine (a native shell, and
        # any command that never opens a trace, do without it).
        from exporters.perfetto.engine.wasm_engine import WasmTransport

        super().__init__(WasmTransport(), protos)

    def _call(self, fill: Any) -> Any:
        stream = self.protos.TraceProcessorRpcStream()
        request = stream.msg.add()
        fill(request)
        self.transport.send(stream.SerializeToString())
        reply = self.protos.TraceProcessorRpc()
        reply.MergeFromString(self._read_payload())
        self._check_envelope(reply)
        return reply

    def parse(self, chunk: bytes) -> Any:
        def fill(req: Any) -> None:
            req.request = self.protos.TraceProcessorRpc.TPM_APPEND_TRACE_DATA
            req.append_trace_data = chunk

        return self._call(fill).append_result

    def notify_eof(self) -> Any:
        def fill(req: Any) -> None:
            req.request = self.protos.TraceProcessorRpc.TPM_FINALIZE_TRACE_DATA

        return self._call(fill)


class EmbeddedTraceProcessor(TraceProcessor):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # What the package leaves unset without a trace to load, and a trace loaded from
        # bytes has: an engine that gets a snapshot's heap (engine_snapshot.py) needs it.
        if not hasattr(self, "_metadata"):
            self._metadata: dict[str, Any] = {}

    def _create_backend(self, remote: str | None, addr: str | None) -> TraceProcessorBackend:
        return WasmRpcBackend(self.protos)
