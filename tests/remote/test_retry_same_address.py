"""One address that stands for many servers (a Ray Serve proxy, a load balancer): a connection cut
mid-take is asked again at the same address, and the take ends complete, equal to the local one.

A real TCP relay on loopback in front of a real ``s2studio serve`` cuts the first connection after
some audio went through, as a proxy does when the replica behind it dies (the chunked answer
ends without its last chunk)."""

from __future__ import annotations

import socket
import threading

import numpy as np

from s2studio.engine.params import GenerationParams
from s2studio.engine.pipeline import SynthesisRequest
from s2studio.remote import RemoteEngine, RemoteSettings, ServerDropped

CUT_AFTER_BYTES = 64 * 1024  # response bytes the first connection passes before it is cut


class CuttingRelay:
    """Forwards loopback connections to ``port``; the first ``cuts`` connections are closed after
    ``CUT_AFTER_BYTES`` of the answer."""

    def __init__(self, port: int, cuts: int):
        self.upstream = port
        self.cuts = cuts
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            limit = CUT_AFTER_BYTES if self.connections <= self.cuts else None
            thread = threading.Thread(target=self._relay, args=(client, limit), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _relay(self, client: socket.socket, limit: int | None) -> None:
        server = socket.create_connection(("127.0.0.1", self.upstream), timeout=30)
        client.settimeout(30)

        def pump_up():
            try:
                while data := client.recv(65536):
                    server.sendall(data)
            except OSError:
                pass

        up = threading.Thread(target=pump_up, daemon=True)
        up.start()
        sent = 0
        try:
            while not self._stop.is_set():
                data = server.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) >= limit:
                    client.sendall(data[:limit - sent])
                    break  # cut: both sides closed without the rest of the answer
                client.sendall(data)
                sent += len(data)
        except OSError:
            pass
        finally:
            for s in (client, server):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            up.join(5)

    def close(self) -> None:
        self._stop.set()
        self._accepting.join(5)
        self._listener.close()
        for thread in self._threads:
            thread.join(10)


REQUEST = SynthesisRequest(text="This sentence is cut once on its way.", stream_stride=2, generation=GenerationParams(
    max_new_tokens=60, min_tokens_before_end=60, temperature=0.8, seed=21))


def test_a_cut_connection_is_retried_at_the_same_address(served, local_pipeline, caplog):
    relay = CuttingRelay(served.port, cuts=1)
    try:
        job = RemoteEngine(RemoteSettings(relay.url)).synthesize(REQUEST)
        with caplog.at_level("WARNING", logger="s2studio.remote.engine"):
            received = list(job)
    finally:
        relay.close()
    assert relay.connections == 2  # the cut one and its retry
    assert "stopped answering" in caplog.text and "retrying segment 1 at the same address" in caplog.text
    local_job = local_pipeline.synthesize(REQUEST)
    local_chunks = list(local_job)
    # Nothing received twice, nothing lost: the chunks join into the local take's samples.
    np.testing.assert_array_equal(np.concatenate([c.samples for c in received]),
                                  np.concatenate([c.samples for c in local_chunks]))
    np.testing.assert_array_equal(job.result.audio, local_job.result.audio)


def test_an_address_that_always_cuts_fails_with_the_first_drop(served):
    relay = CuttingRelay(served.port, cuts=100)
    try:
        job = RemoteEngine(RemoteSettings(relay.url)).synthesize(REQUEST)
        try:
            list(job)
        except ServerDropped as exc:
            assert f"The server at {relay.url} stopped answering" in str(exc)
        else:
            raise AssertionError("a take through an address that always cuts must fail")
    finally:
        relay.close()
    assert relay.connections == 3  # the first try and two retries, then the error
