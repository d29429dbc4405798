"""The kernel websocket of a classroom server: one client cannot make the server hold without bound.

``GuardedKernelConnection`` is jupyter_server's ``ZMQChannelsWebsocketConnection`` (the bridge
between a page's websocket and its kernel), named in ``etc/jupyter/voila.json`` and
``jupyter_server_config.json`` (``kernel_websocket_connection_class``). What it changes:

The legacy protocol is refused.
    jupyter_server still accepts a client that offers no subprotocol and then speaks its older
    JSON protocol, where a message with binary buffers (a widget state with an image, the
    heatmaps) goes out in the legacy binary layout (a 4-byte big-endian count). Voila's websocket
    handler reads every outgoing binary frame as a v1 frame (an 8-byte little-endian count): for
    a legacy frame that count is about 10**18, and the list of offsets it builds grows by ~25 MB a
    second in the server's only thread, forever. No page is served meanwhile, TERM is not
    handled, and the server grew to 12 GB (issue 33). Every page Voila, JupyterLab and Notebook 7
    serve offers ``v1.kernel.websocket.jupyter.org``; a client that does not gets HTTP 400 naming it.
Incoming frames are checked before they reach the kernel.
    A v1 frame larger than ``max_message_bytes``, whose offset table does not fit the frame (the
    same 8-byte count, read by jupyter_server's own parser, would loop as above), or whose
    header, parent header, metadata or content is not a JSON object, is dropped and logged; the
    socket and the kernel go on.
A dead kernel closes its page's socket.
    Voila does not restart a dashboard kernel that died (``restart_limit`` 0): its page gets the
    ``dead`` status, then the socket closes; the page template says to reload (a new seat).
What the server queues for a slow client is bounded.
    A client that stops reading (a stalled laptop, a script) leaves the server holding what its
    kernel sends. Past ``max_queued_bytes`` waiting to be written, that connection is closed
    (logged); the page's own reconnection, or a reload, starts it again. While a socket closes,
    the kernel's last messages are still written in the v1 layout (``subprotocol``): jupyter_server
    would fall back to the legacy one, and Voila's parser would loop on them as above.
"""

from __future__ import annotations

import json

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from tornado.iostream import StreamBufferFullError
from tornado.web import Finish
from tornado.websocket import WebSocketClosedError
from traitlets import Integer

V1 = "v1.kernel.websocket.jupyter.org"
MB = 2**20
# A v1 frame: the count, then channel, header, parent header, metadata, content, buffers.
V1_MIN_OFFSETS = 6


class GuardedKernelConnection(ZMQChannelsWebsocketConnection):
    """A kernel websocket that speaks only the v1 protocol, checks each incoming frame and bounds
    what it queues for its client."""

    max_message_bytes = Integer(1 * MB, config=True,
                                help="Largest frame a page may send; a larger one is dropped and logged.")
    max_queued_bytes = Integer(16 * MB, config=True,
                               help="Most bytes waiting to be written to one client; past it the socket is closed.")

    async def prepare(self):
        offered = self.websocket_handler.request.headers.get("Sec-WebSocket-Protocol", "")
        if V1 not in (p.strip() for p in offered.split(",")):
            self.log.warning("Refused a kernel websocket for %s without the %s subprotocol (offered: %r)",
                             self.kernel_id, V1, offered)
            refusal = f"This server speaks the {V1} kernel websocket protocol only"
            self.websocket_handler.set_status(400, reason=refusal)
            raise Finish(refusal + "\n")  # an answer without Voila's missing error.html template
        await super().prepare()

    @property
    def subprotocol(self):
        # jupyter_server reads the handler's selected subprotocol for every message, and once the
        # handler is closing that read fails and it falls back to the legacy layout: the messages
        # still on their way then reach Voila's parser as legacy frames, and it loops as above.
        # Only v1 clients get this far (prepare), so the protocol is v1 for the socket's lifetime.
        return V1

    def connect(self):
        handler = self.websocket_handler
        if handler.ws_connection is not None:  # tornado's IOStream refuses a write past this bound
            handler.ws_connection.stream.max_write_buffer_size = self.max_queued_bytes
        return super().connect()

    @property
    def write_message(self):
        return self._write_bounded

    def _write_bounded(self, message, binary=False):
        try:
            return self.websocket_handler.write_message(message, binary=binary)
        except StreamBufferFullError:
            self.log.warning("Closing the websocket of kernel %s: its client is not reading "
                             "(more than %d MB waiting)", self.kernel_id, self.max_queued_bytes // MB)
            self.websocket_handler.ws_connection.stream.close()  # a close frame would queue behind the rest
        except WebSocketClosedError:  # closing: what the kernel still sends has nowhere to go
            self.log.debug("Dropped a message for the closed websocket of kernel %s", self.kernel_id)
        return None

    def on_restart_failed(self):
        """The kernel died and is not restarted (``KernelRestarter.restart_limit`` 0 in voila.json: a
        restarted kernel has not run the dashboard, so the page would show controls that do
        nothing). Say so, then close the socket: the page tells its student to reload for a new seat."""
        super().on_restart_failed()
        self.websocket_handler.close(1011, "the kernel of this page stopped: reload the page")

    def handle_incoming_message(self, incoming_msg) -> None:
        problem = self._frame_problem(incoming_msg)
        if problem:
            self.log.warning("Dropped a websocket frame for kernel %s: %s", self.kernel_id, problem)
            return
        super().handle_incoming_message(incoming_msg)

    def _frame_problem(self, frame) -> str | None:
        """Why ``frame`` is not a v1 kernel message this server will pass on, or None."""
        if not isinstance(frame, bytes):
            return f"a {type(frame).__name__} frame, expected a binary v1 frame"
        if len(frame) > self.max_message_bytes:
            return f"{len(frame)} bytes, more than max_message_bytes={self.max_message_bytes}"
        if len(frame) < 8:
            return f"{len(frame)} bytes, too short for a v1 frame"
        count = int.from_bytes(frame[:8], "little")
        if not V1_MIN_OFFSETS <= count <= len(frame) // 8 - 1:
            return f"an offset table of {count} entries in a frame of {len(frame)} bytes"
        offsets = [int.from_bytes(frame[8 * i:8 * (i + 1)], "little") for i in range(1, count + 1)]
        if offsets[0] != 8 * (count + 1) or offsets != sorted(offsets) or offsets[-1] > len(frame):
            return "offsets out of order or past the frame's end"
        channel = frame[offsets[0]:offsets[1]]
        if channel not in (b"shell", b"control", b"stdin"):
            return f"channel {channel[:20]!r}, expected shell, control or stdin"
        for name, start, stop in zip(("header", "parent header", "metadata", "content"),
                                     offsets[1:5], offsets[2:6], strict=True):
            try:
                part = json.loads(frame[start:stop])
            except ValueError:
                return f"its {name} is not JSON"
            if not isinstance(part, dict):
                return f"its {name} is a {type(part).__name__}, expected a JSON object"
            if name == "header" and not isinstance(part.get("msg_type"), str):
                return "its header has no msg_type"
        return None
