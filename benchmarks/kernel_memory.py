"""Memory of N real Jupyter kernels, each holding every dashboard panel with the real-model panel
open (SmolLM2's induction demo, then MiniLM).

Prints the unique memory (USS) per kernel and the sum of PSS, which counts the shared,
memory-mapped model weights once. Run after ``make models``:

    OPENBLAS_NUM_THREADS=1 .venv/bin/python -m benchmarks.kernel_memory 20
"""

from __future__ import annotations

import argparse
import time

from jupyter_client.manager import start_new_kernel

# What a student's kernel holds with the whole dashboard open and the real-model panel used.
PANELS = r"""
import os
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
from mha_core.ui.cost_panel import cost_panel
from mha_core.ui.heads_panel import head_explorer
from mha_core.ui.kv_panel import kv_cache_panel
from mha_core.ui.shapes_panel import shape_explorer
from mha_core.ui.real_heads_panel import real_heads_panel
panels = [shape_explorer(), head_explorer(), cost_panel(), kv_cache_panel()]
p = real_heads_panel()
p.model.value = "smollm2"
p.induction_demo()
p.model.value = "minilm"
print("ok", os.getpid())
"""


def smaps_rollup_kb(pid: int) -> dict[str, int]:
    """The kB fields of /proc/PID/smaps_rollup (Pss, Private_Clean, Private_Dirty, ...)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":") and parts[1].isdigit():
                fields[parts[0][:-1]] = int(parts[1])
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", type=int, nargs="?", default=20, help="how many kernels (default 20)")
    n = parser.parse_args().kernels
    if n < 1:
        parser.error(f"kernels must be at least 1, got {n}")
    started = []
    try:
        for i in range(n):
            km, kc = start_new_kernel(kernel_name="python3")
            started.append((km, kc))
            out = []
            kc.execute_interactive(PANELS, output_hook=out.append, timeout=600)
            text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
            errors = [m["content"]["evalue"] for m in out if m["msg_type"] == "error"]
            if "ok" not in text:
                raise RuntimeError(f"kernel {i} failed: {errors or text!r}")
            pid = int(text.split()[-1])
            started[-1] = (km, kc, pid)
            print(f"kernel {i + 1}/{n} ready (pid {pid})", flush=True)
        time.sleep(2)
        rollups = [smaps_rollup_kb(pid) for _, _, pid in started]
        uss = sorted((r["Private_Clean"] + r["Private_Dirty"]) / 1024 for r in rollups)
        pss = sum(r["Pss"] for r in rollups) / 1024
        print(f"{n} kernels: USS median {uss[len(uss) // 2]:.0f} MB (min {uss[0]:.0f}, max {uss[-1]:.0f}); "
              f"sum of USS {sum(uss):,.0f} MB; sum of PSS {pss:,.0f} MB")
    finally:
        for km, kc, *_ in started:
            kc.stop_channels()
            km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
