"""The dashboard on a real JupyterHub: the route a class larger than one machine runs on.

A real ``jupyterhub`` (a test and deployment extra, never a package dependency) with its real
proxy, ``configurable-http-proxy`` (npm, pinned in tests/hub/package-lock.json), on 127.0.0.1.
``DummyAuthenticator`` (one shared password) logs users in and ``SimpleLocalProcessSpawner``
starts each user's own ``jupyterhub-singleuser`` server as the current OS user (the
``LocalProcessSpawner`` family without creating system users), each with its own home folder.
Every user server reads the project's installed settings (``jupyter_server_config.json``: the
bounded kernel manager; ``voila.json``: the offline ``mha`` template), as on any hub.

Three students log in in a real browser, each lands on the dashboard through the Voila server
extension at ``/user/NAME/voila/render/notebooks/dashboard.ipynb`` (``Spawner.default_url``),
sees the heatmaps and moves the N slider. Checked: each student's kernel is a child of that
student's own server process, listed by that server's API only; a student cannot open another
student's server (403, or a redirect to the login page, and no dashboard); the page makes no
request outside the hub's address.

``make hub-deps`` (run by .ci/run) installs jupyterhub and the proxy; without them the test skips,
naming that command (in CI the skip is a failure).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dashboard_server import REPO, descendants, free_port, http, is_local, launch_chromium

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

PROXY = REPO / "tests" / "hub" / "node_modules" / ".bin" / "configurable-http-proxy"
USERS = ("alice", "bob", "carol")
PASSWORD = "lecture-hall"
DASHBOARD = "voila/render/notebooks/dashboard.ipynb"
HEATMAP = ".mha-heads-figure.mha-heatmap[data-drawn] canvas"
TIMEOUT_MS = 240_000  # spawning a user server and executing the dashboard on 2 busy cores
ADMIN_TOKEN = "mha-test-" + os.urandom(8).hex()


def _requirements() -> None:
    try:
        import jupyterhub  # noqa: F401
    except ImportError:
        pytest.skip("jupyterhub is not installed: `make hub-deps` installs it (a test/deploy extra; .ci/run does this)")
    if not PROXY.exists():
        pytest.skip(f"configurable-http-proxy is missing ({PROXY}): `make hub-deps` runs "
                    "`npm ci --prefix tests/hub` (needs npm)")


CONFIG = """
import sys
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{work}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{work}/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {password!r}
c.Authenticator.allowed_users = set({users!r})
c.JupyterHub.spawner_class = "simple"  # SimpleLocalProcessSpawner: every user as this OS user
c.SimpleLocalProcessSpawner.home_dir_template = "{work}/home/{{username}}"
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--allow-root"] if {root} else []
c.Spawner.notebook_dir = {repo!r}
c.Spawner.default_url = "/{dashboard}"
c.Spawner.start_timeout = 240
c.Spawner.http_timeout = 240
c.Spawner.environment = {environment!r}
c.JupyterHub.services = [{{"name": "mha-test", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{"name": "mha-test", "services": ["mha-test"],
                             "scopes": ["admin:users", "admin:servers", "admin:server_state"]}}]
"""


@contextlib.contextmanager
def hub(work: Path):
    """Run JupyterHub (config in ``work``) on a free port; yields its URL and that port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH")}
    keep = {k: os.environ[k] for k in ("MHA_SHARED_CACHE", "MHA_MODELS_DIR") if k in os.environ}
    if "MHA_MODELS_DIR" not in keep:  # the users' homes are new: point them at the fetched models
        from mha_core.models import cache_dir

        keep["MHA_MODELS_DIR"] = str(cache_dir())
    config = work / "jupyterhub_config.py"
    config.write_text(CONFIG.format(
        port=port, hub_port=free_port(), proxy_api_port=free_port(), proxy=str(PROXY), work=work,
        password=PASSWORD, users=list(USERS), root=os.geteuid() == 0, repo=str(REPO), dashboard=DASHBOARD,
        environment={"OPENBLAS_NUM_THREADS": "1", **keep}, token=ADMIN_TOKEN))
    log = (work / "hub.log").open("w+b")
    proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=work, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while http(f"{url}hub/api", timeout=2) != 200:
            assert proc.poll() is None, f"jupyterhub exited:\n{(work / 'hub.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"jupyterhub did not start:\n{(work / 'hub.log').read_text()[-3000:]}"
            time.sleep(0.5)
        yield url, port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the hub stops the user servers it spawned
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _api(url: str, path: str) -> dict:
    import urllib.request

    req = urllib.request.Request(f"{url}hub/api/{path}", headers={"Authorization": f"token {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _kernel_ids_under(pid: int) -> set[str]:
    """Ids of the ipykernel processes below ``pid`` (from their connection file's name)."""
    ids = set()
    for child in descendants(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            for arg in argv:
                name = Path(arg.decode(errors="replace")).name
                if name.startswith("kernel-") and name.endswith(".json"):
                    ids.add(name[len("kernel-"):-len(".json")])
    return ids


# A page's own API request: the hub's cookie plus the _xsrf cookie echoed in a header, as
# JupyterLab's requests do (JupyterHub checks XSRF on cookie-authenticated API requests).
API_GET = """async (u) => {
  const xsrf = (document.cookie.match(/(?:^|; )_xsrf=([^;]*)/) || [])[1] || '';
  const r = await fetch(u, {headers: {'X-XSRFToken': decodeURIComponent(xsrf)}});
  return [r.status, await r.text()];
}"""


def _login_and_use_the_dashboard(browser, url: str, user: str, port: int) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    refused = []
    page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    t0 = time.perf_counter()
    page.goto(f"{url}hub/login", timeout=TIMEOUT_MS)
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("[type=submit]")
    page.wait_for_selector(HEATMAP, timeout=TIMEOUT_MS)  # spawned, redirected to default_url, rendered
    first_figure = time.perf_counter() - t0
    landed = page.url
    caption = page.locator(".mha-heads-caption")
    before = int(page.locator(".mha-heads-N .widget-readout").inner_text())
    page.locator(".mha-heads-N .noUi-handle").focus()
    page.keyboard.press("ArrowLeft")
    caption.filter(has_text=f"N={before - 1},").wait_for(timeout=60_000)
    status, listed = page.evaluate(API_GET, f"{url}user/{user}/api/kernels")
    assert status == 200, (user, status, listed)
    kernels = {k["id"] for k in json.loads(listed)}
    # copies: the same page later tries another student's server, on purpose
    return {"context": context, "page": page, "landed": landed, "kernels": kernels, "errors": list(errors),
            "refused": list(refused),
            "outside": sorted({r for r in requests if not is_local(r, port)}), "first_figure": first_figure}


@pytest.mark.slow
@pytest.mark.browser
def test_three_students_on_a_real_jupyterhub(tmp_path):
    _requirements()
    from playwright.sync_api import sync_playwright

    with hub(tmp_path) as (url, port), sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            seen = {user: _login_and_use_the_dashboard(browser, url, user, port) for user in USERS}
            servers = {user: _api(url, f"users/{user}")["servers"][""] for user in USERS}
            pids = {user: servers[user]["state"]["pid"] for user in USERS}
            under = {user: _kernel_ids_under(pids[user]) for user in USERS}
            # a student tries another student's server: bob opens alice's dashboard and API
            bob = seen["bob"]["page"]
            response = bob.goto(f"{url}user/alice/{DASHBOARD}", timeout=TIMEOUT_MS)
            foreign = (response.status, bob.url, bob.locator(".mha-heads-caption").count())
            api_status = bob.evaluate(API_GET, f"{url}user/alice/api/kernels")[0]
        finally:
            browser.close()
    times = ", ".join(f"{u} {seen[u]['first_figure']:.0f} s" for u in USERS)
    print(f"\nJupyterHub: {len(USERS)} users logged in, spawned and drew the dashboard (login to first "
          f"figure: {times}); kernels per user server: {', '.join(f'{u} {len(under[u])}' for u in USERS)}; "
          f"bob on alice's dashboard: HTTP {foreign[0]} at {foreign[1]}, alice's API: HTTP {api_status}")
    assert len(set(pids.values())) == len(USERS)  # three servers, three processes
    for user in USERS:
        s = seen[user]
        assert s["landed"] == f"{url}user/{user}/{DASHBOARD}", s["landed"]
        assert s["kernels"], f"{user}'s server lists no kernel"
        # the kernel the dashboard runs in is a child of this user's own server, of no other
        assert s["kernels"] <= under[user], (user, s["kernels"], under)
        for other in USERS:
            if other != user:
                assert not (s["kernels"] & under[other]) and not (s["kernels"] & seen[other]["kernels"])
        assert s["outside"] == [], s["outside"]  # the offline template on the hub route too
        assert s["errors"] == [], (s["errors"], s["refused"])
    status, landed_at, dashboards = foreign
    assert dashboards == 0, "bob saw alice's dashboard"
    assert status == 403 or "/hub/login" in landed_at, (status, landed_at)
    assert api_status in (401, 403), api_status


def test_the_hub_settings_need_no_extra_package():
    """jupyterhub stays out of the package's dependencies: a test/deploy extra only."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.lower().startswith("jupyterhub") for d in project["dependencies"])
    assert any(d.lower().startswith("jupyterhub") for d in project["optional-dependencies"]["hub"])
    assert shutil.which("npm") is None or (REPO / "tests" / "hub" / "package-lock.json").is_file()
