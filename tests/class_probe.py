"""A class of students as the server sees it: the protocol a page speaks, without rendering.

Each arrival GETs the dashboard page, opens its kernel's websocket with the subprotocol browsers
speak (``v1.kernel.websocket.jupyter.org``), asks ipywidgets' control comm for every widget's
state (what a page's widget manager does first), then moves a slider a few times, one move a
second, timing each move until its kernel is idle again. Nothing is rendered: a class renders on
its own devices, so the figures are the server's alone. tests/test_dashboard_load.py runs it
against ``make dashboard`` and classroom mode; against any server of yours on 127.0.0.1:

    .venv/bin/python tests/class_probe.py http://127.0.0.1:8866/ 60 [--every 1] [--moves 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import uuid

from jupyter_server.services.kernels.connection.base import (
    deserialize_msg_from_ws_v1,
    serialize_msg_to_ws_v1,
)
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

SUBPROTOCOL = "v1.kernel.websocket.jupyter.org"
TIMEOUT_S = 300  # a lost seat is one that has not answered in this long


def pack(msg_type: str, content: dict, session: str, metadata: dict | None = None,
         channel: str = "shell") -> tuple[str, bytes]:
    """(msg_id, a v1 websocket frame): jupyter_server's own v1 layout (8-byte little-endian count
    and offsets, then channel, header, parent header, metadata and content)."""
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "msg_type": msg_type, "session": session, "username": "student",
              "version": "5.3", "date": ""}
    parts = [json.dumps(x).encode() for x in (header, {}, metadata or {}, content)]
    return msg_id, serialize_msg_to_ws_v1(parts, channel)


def unpack(frame: bytes) -> dict:
    """A v1 frame from the server -> {channel, msg_type, header, parent_header, content, nbytes}."""
    channel, parts = deserialize_msg_from_ws_v1(frame)
    header, parent, _metadata, content = (json.loads(p) for p in parts[:4])
    return {"channel": channel, "msg_type": header.get("msg_type"), "header": header,
            "parent_header": parent, "content": content, "nbytes": len(frame)}


async def get_page(url: str, timeout: float = TIMEOUT_S) -> tuple[int, str]:
    """Status and body of a GET (an error status is returned, not raised)."""
    response = await AsyncHTTPClient().fetch(HTTPRequest(url, request_timeout=timeout, connect_timeout=timeout),
                                             raise_error=False)
    return response.code, response.body.decode(errors="replace") if response.body else ""


def widget_views(html: str) -> int:
    """How many widgets the page displays: one view record each in its HTML. A page whose kernel's
    outputs came late loses them (Voila's executor waits ``iopub_timeout`` for them, then moves
    on), so an incomplete page has fewer than a quiet one."""
    return html.count("application/vnd.jupyter.widget-view+json")


def kernel_id(html: str) -> str | None:
    """The kernel Voila started for this page (None: no kernel in the page)."""
    found = re.search(r'"kernelId":\s*"([0-9a-f-]{36})"', html)
    return found.group(1) if found else None


class KernelClient:
    """One page's kernel websocket in the v1 protocol."""

    def __init__(self, ws, session: str):
        self.ws, self.session = ws, session
        self.received_bytes = 0

    @classmethod
    async def open(cls, url: str, kernel: str, timeout: float = TIMEOUT_S) -> KernelClient:
        session = uuid.uuid4().hex
        base = re.match(r"http://[^/]+", url).group(0)
        ws = await websocket_connect(f"ws{base[4:]}/api/kernels/{kernel}/channels?session_id={session}",
                                     connect_timeout=timeout, max_message_size=512 * 2**20,
                                     subprotocols=[SUBPROTOCOL])
        return cls(ws, session)

    async def send(self, msg_type: str, content: dict, metadata: dict | None = None) -> str:
        msg_id, frame = pack(msg_type, content, self.session, metadata)
        await self.ws.write_message(frame, binary=True)
        return msg_id

    async def send_raw(self, frame) -> None:
        await self.ws.write_message(frame, binary=isinstance(frame, bytes))

    async def receive(self, timeout: float = TIMEOUT_S) -> dict:
        frame = await asyncio.wait_for(self.ws.read_message(), timeout=timeout)
        if frame is None:
            raise ConnectionError(f"websocket closed ({self.ws.close_code}: {self.ws.close_reason})")
        message = unpack(frame)
        self.received_bytes += message["nbytes"]
        return message

    async def request_states(self, timeout: float = TIMEOUT_S) -> dict:
        """Every widget's state, as ipywidgets 8's control comm answers a page: {model_id: state}."""
        comm = uuid.uuid4().hex
        await self.send("comm_open", {"comm_id": comm, "target_name": "jupyter.widget.control", "data": {}},
                        {"version": "1.0.0"})
        await self.send("comm_msg", {"comm_id": comm, "data": {"method": "request_states"}})
        deadline = time.monotonic() + timeout
        while True:
            message = await self.receive(max(0.01, deadline - time.monotonic()))
            data = message["content"].get("data", {}) if message["msg_type"] == "comm_msg" else {}
            if data.get("method") == "update_states":
                return data["states"]

    async def move(self, comm_id: str, value, timeout: float = TIMEOUT_S) -> float:
        """Set a widget's value as a page does; seconds until the kernel is idle after it."""
        t0 = time.monotonic()
        msg_id = await self.send("comm_msg", {"comm_id": comm_id, "data": {
            "method": "update", "state": {"value": value}, "buffer_paths": []}}, {"version": "2.1.0"})
        await self.wait_idle(msg_id, timeout)
        return time.monotonic() - t0

    async def wait_idle(self, msg_id: str, timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            message = await self.receive(max(0.01, deadline - time.monotonic()))
            if (message["msg_type"] == "status" and message["parent_header"].get("msg_id") == msg_id
                    and message["content"].get("execution_state") == "idle"):
                return

    def close(self) -> None:
        self.ws.close()


def sliders(states: dict) -> list[tuple[str, dict]]:
    """The enabled IntSliders of a page's widget states, (model id, state), by description."""
    found = [(k, v["state"]) for k, v in states.items()
             if v.get("model_name") == "IntSliderModel" and not v["state"].get("disabled")]
    return sorted(found, key=lambda kv: str(kv[1].get("description")))


async def student(seat: int, url: str, moves: int = 3) -> dict:
    """One arrival: page, states, ``moves`` slider moves a second apart. A record with ``ok``,
    ``html_s`` and ``states_s`` (from arrival), ``moves_s``, or the ``error`` that lost the seat."""
    record: dict = {"seat": seat, "ok": False}
    t0 = time.monotonic()
    try:
        status, html = await get_page(url)
        record["html_s"], record["status"], record["views"] = time.monotonic() - t0, status, widget_views(html)
        kernel = kernel_id(html)
        if status != 200 or kernel is None:
            record["error"] = f"HTTP {status}" + ("" if kernel else ", no kernel in the page")
            return record
        client = await KernelClient.open(url, kernel)
        try:
            states = await client.request_states()
            record["states_s"], record["n_widgets"] = time.monotonic() - t0, len(states)
            record["state_bytes"] = client.received_bytes
            record["moves_s"] = []
            choices = sliders(states)
            if choices and moves:
                comm, state = choices[seat % len(choices)]
                value = state.get("value", 0)
                for _ in range(moves):
                    value = value + 1 if value < state.get("max", 1) else state.get("min", 0)
                    record["moves_s"].append(await client.move(comm, value))
                    await asyncio.sleep(1.0)
            record["ok"] = True
        finally:
            client.close()
    except Exception as err:  # a lost seat is a result, not a crash of the class
        record["error"] = f"{type(err).__name__}: {err}"[:200]
    return record


async def run_class(url: str, seats: int, every: float = 1.0, moves: int = 3) -> list[dict]:
    """``seats`` students arriving ``every`` seconds apart; their records, by seat."""
    AsyncHTTPClient.configure(None, max_clients=max(10, 2 * seats))
    tasks = []
    for seat in range(seats):
        tasks.append(asyncio.create_task(student(seat, url, moves)))
        await asyncio.sleep(every)
    return list(await asyncio.gather(*tasks))


def quantile(values: list[float], p: float) -> float:
    """The nearest-rank ``p`` quantile (NaN for none)."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p * (len(values) - 1))))] if values else float("nan")


def summary(records: list[dict]) -> dict:
    """The class's figures: seats ok and lost, arrival -> HTML and -> all widget states (s), slider
    move -> kernel idle (ms): p50, p90, max; ``views``: the counts of widgets displayed in the pages
    (one value when every page is whole)."""
    ok = [r for r in records if r["ok"]]
    html = [r["html_s"] for r in records if "html_s" in r]
    states = [r["states_s"] for r in ok]
    moves = [1000 * m for r in ok for m in r["moves_s"]]

    def three(xs):
        return {"p50": quantile(xs, .5), "p90": quantile(xs, .9), "max": max(xs, default=float("nan"))}

    return {"seats": len(records), "ok": len(ok), "lost": len(records) - len(ok),
            "errors": sorted({r["error"] for r in records if not r["ok"]})[:3],
            "html_s": three(html), "states_s": three(states), "move_ms": three(moves),
            "views": sorted({r["views"] for r in ok}), "widgets": ok[0]["n_widgets"] if ok else 0, "state_kib": ok[0]["state_bytes"] // 1024 if ok else 0}


def describe(s: dict) -> str:
    return (f"{s['ok']} of {s['seats']} ok, lost {s['lost']} {s['errors'] or ''}\n"
            f"  arrival -> page HTML     p50 {s['html_s']['p50']:.2f}  p90 {s['html_s']['p90']:.2f}  "
            f"max {s['html_s']['max']:.2f} s\n"
            f"  arrival -> widget states p50 {s['states_s']['p50']:.2f}  p90 {s['states_s']['p90']:.2f}  "
            f"max {s['states_s']['max']:.2f} s ({s['widgets']} widgets, {s['state_kib']} KiB; "
            f"widgets displayed in a page: {', '.join(map(str, s['views']))})\n"
            f"  slider move -> idle      p50 {s['move_ms']['p50']:.0f}  p90 {s['move_ms']['p90']:.0f}  "
            f"max {s['move_ms']['max']:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("seats", type=int)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between two arrivals")
    parser.add_argument("--moves", type=int, default=3, help="slider moves per student")
    parser.add_argument("--json", help="write every student's record here")
    args = parser.parse_args()
    records = asyncio.run(run_class(args.url, args.seats, args.every, args.moves))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(records, out, indent=1)
    print(describe(summary(records)))


if __name__ == "__main__":
    main()
